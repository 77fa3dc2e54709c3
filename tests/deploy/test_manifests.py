"""The Kubernetes manifests (deploy/k8s) render, pass strict schema validation for several
Kubernetes versions, and agree with the server: its settings, health services, ports, the
image's user, and the peer addresses a pod derives from its hostname."""

from __future__ import annotations

import copy
import dataclasses
import re
from typing import Any

import kubernetes_validate
import pytest

import replog
from replog.server.edge.readiness import READY_SERVICE
from replog.server.settings import Settings
from tests.deploy.conftest import REPO

# Three versions kubernetes-validate bundles (1.25-1.37): an older supported release, one in
# the middle and a recent one.
KUBERNETES_VERSIONS = ("1.29", "1.31", "1.33")
NAMESPACE = "replog"
CLUSTER_DOMAIN = "cluster.local"
NAMESPACED_KINDS = {
    "ConfigMap",
    "Deployment",
    "NetworkPolicy",
    "PodDisruptionBudget",
    "Service",
    "StatefulSet",
}
SETTING_NAMES = {"REPLOG_" + f.name.upper() for f in dataclasses.fields(Settings)}
# After the drain (shutdown_grace_ms) the server flushes every partition, checkpoints the HWs
# and closes its files; the kubelet's SIGKILL must not land in the middle of that.
FLUSH_MARGIN_MS = 10_000
# Log recovery on start-up (torn tails, index rebuilds) must not trip the startup probe.
STARTUP_BUDGET_S_MIN = 300

Obj = dict[str, Any]


# -- helpers -------------------------------------------------------------------------------


def one(objects: list[Obj], kind: str, name: str | None = None) -> Obj:
    found = [
        o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def every(objects: list[Obj], kind: str) -> list[Obj]:
    return [o for o in objects if o["kind"] == kind]


def statefulset(objects: list[Obj]) -> Obj:
    return one(objects, "StatefulSet", "replog")


def pod_labels(objects: list[Obj]) -> dict[str, str]:
    labels: dict[str, str] = statefulset(objects)["spec"]["template"]["metadata"]["labels"]
    return labels


def container(objects: list[Obj]) -> Obj:
    containers = statefulset(objects)["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    c: Obj = containers[0]
    return c


def container_ports(objects: list[Obj]) -> dict[str, int]:
    """Port name -> number."""
    return {p["name"]: p["containerPort"] for p in container(objects)["ports"]}


def selects(selector: Obj | None, labels: dict[str, str]) -> bool:
    """Whether a label selector (matchLabels / matchExpressions) selects `labels`."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        ok = {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[op]
        if not ok:
            return False
    return True


def namespace_labels(objects: list[Obj], name: str) -> dict[str, str]:
    """A namespace's labels as a NetworkPolicy sees them (the API server adds the name)."""
    labels = {"kubernetes.io/metadata.name": name}
    for ns in every(objects, "Namespace"):
        if ns["metadata"]["name"] == name:
            labels.update(ns["metadata"].get("labels") or {})
    return labels


def policy_allows(
    rules: list[Obj],
    peers_key: str,
    *,
    port: int,
    protocol: str,
    labels: dict[str, str],
    ns_labels: dict[str, str],
    same_namespace: bool,
) -> bool:
    """Whether NetworkPolicy rules (ingress `from` / egress `to`) allow `port` with a pod of
    `labels` in a namespace of `ns_labels`."""

    def peer_matches(peer: Obj) -> bool:
        if "ipBlock" in peer:
            return False
        if "namespaceSelector" in peer:
            if not selects(peer["namespaceSelector"], ns_labels):
                return False
        elif not same_namespace:
            return False
        return selects(peer.get("podSelector", {}), labels)

    def port_matches(rule: Obj) -> bool:
        ports = rule.get("ports")
        if not ports:
            return True
        return any(
            p.get("protocol", "TCP") == protocol and (p.get("port") is None or p["port"] == port)
            for p in ports
        )

    for rule in rules:
        peers = rule.get(peers_key)
        if port_matches(rule) and (not peers or any(peer_matches(p) for p in peers)):
            return True
    return False


def pod_env(
    objects: list[Obj], pod_name: str, labels: dict[str, str] | None = None
) -> dict[str, str]:
    """The environment a pod's container starts with, as the kubelet builds it (`labels`:
    the pod's labels besides the template's, e.g. the zone Kubernetes copies from the node;
    a label that is absent gives an empty value)."""
    c = container(objects)
    env = {"HOSTNAME": pod_name}  # a StatefulSet pod's hostname is its name
    for source in c.get("envFrom") or []:
        ref = source["configMapRef"]["name"]
        data = one(objects, "ConfigMap", ref).get("data") or {}
        env.update({source.get("prefix", "") + k: v for k, v in data.items()})
    for var in c.get("env") or []:
        if "value" in var:  # the kubelet expands $(NAME) of the variables defined before
            env[var["name"]] = re.sub(r"\$\((\w+)\)", lambda m: env.get(m[1], m[0]), var["value"])
            continue
        path = var["valueFrom"]["fieldRef"]["fieldPath"]
        if path.startswith("metadata.labels['") and path.endswith("']"):
            key = path[len("metadata.labels['") : -2]
            template = one(objects, "StatefulSet", "replog")["spec"]["template"]["metadata"]
            env[var["name"]] = {**template.get("labels", {}), **(labels or {})}.get(key, "")
            continue
        env[var["name"]] = {"metadata.name": pod_name, "metadata.namespace": NAMESPACE}[path]
    return env


def pod_settings(objects: list[Obj], ordinal: int) -> Settings:
    return Settings.from_sources(args=None, env=pod_env(objects, f"replog-{ordinal}"))


# -- rendering and schemas -----------------------------------------------------------------


def test_kustomization_renders_every_object_into_the_replog_namespace(
    rendered: list[Obj],
) -> None:
    kinds = sorted((o["kind"], o["metadata"]["name"]) for o in rendered)
    assert kinds == [
        ("ConfigMap", "replog-config"),
        ("Deployment", "replog-console"),
        ("Namespace", "replog"),
        ("NetworkPolicy", "replog"),
        ("PodDisruptionBudget", "replog"),
        ("Service", "replog"),
        ("Service", "replog-console"),
        ("Service", "replog-headless"),
        ("StatefulSet", "replog"),
    ]
    for o in rendered:
        if o["kind"] in NAMESPACED_KINDS:
            assert o["metadata"].get("namespace") == NAMESPACE, o["metadata"]["name"]


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_object_passes_strict_schema_validation(rendered: list[Obj], version: str) -> None:
    errors = []
    for o in rendered:
        try:
            kubernetes_validate.validate(o, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            path = ".".join(str(p) for p in exc.path)
            errors.append(f"{o['kind']}/{o['metadata']['name']} {path}: {exc.message}")
    assert not errors, f"Kubernetes {version}:\n" + "\n".join(errors)


def test_strict_validation_rejects_a_misspelled_field(rendered: list[Obj]) -> None:
    """The schema check above is not vacuous: an unknown field fails it."""
    bad = copy.deepcopy(statefulset(rendered))
    c = bad["spec"]["template"]["spec"]["containers"][0]
    c["readinesProbe"] = c.pop("readinessProbe")
    with pytest.raises(kubernetes_validate.ValidationError, match="readinesProbe"):
        kubernetes_validate.validate(bad, KUBERNETES_VERSIONS[-1], strict=True)


# -- StatefulSet, Services, PDB ------------------------------------------------------------


def test_statefulset_selector_matches_its_pod_template_labels(rendered: list[Obj]) -> None:
    sts = statefulset(rendered)
    assert selects(sts["spec"]["selector"], pod_labels(rendered))


def test_statefulset_is_governed_by_a_headless_service_that_publishes_unready_pods(
    rendered: list[Obj],
) -> None:
    sts = statefulset(rendered)
    headless = one(rendered, "Service", sts["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None"
    # peers must resolve each other before any of them is ready
    assert headless["spec"]["publishNotReadyAddresses"] is True
    assert selects({"matchLabels": headless["spec"]["selector"]}, pod_labels(rendered))
    assert sts["spec"]["podManagementPolicy"] == "Parallel"


def test_every_service_targets_container_ports_and_selects_the_pods(rendered: list[Obj]) -> None:
    ports = container_ports(rendered)
    # the node Services (the console's: tests/deploy/test_console_manifest.py)
    services = [s for s in every(rendered, "Service") if s["metadata"]["name"] != "replog-console"]
    assert len(services) == 2
    for svc in services:
        assert selects({"matchLabels": svc["spec"]["selector"]}, pod_labels(rendered))
        for p in svc["spec"]["ports"]:
            target = p.get("targetPort", p["port"])
            assert target in ports or target in ports.values(), (svc["metadata"]["name"], p)
    client = one(rendered, "Service", "replog")
    assert {p["name"]: p["port"] for p in client["spec"]["ports"]} == {
        "grpc": 7070,
        "kafka": 9092,
        "metrics": 9464,
    }


def test_disruption_budget_selects_the_pods_and_lets_one_go_at_a_time(
    rendered: list[Obj],
) -> None:
    pdb = one(rendered, "PodDisruptionBudget", "replog")
    assert selects(pdb["spec"]["selector"], pod_labels(rendered))
    assert pdb["spec"]["maxUnavailable"] == 1
    assert "minAvailable" not in pdb["spec"]


def test_no_two_pods_are_scheduled_on_the_same_node(rendered: list[Obj]) -> None:
    anti = statefulset(rendered)["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    terms = anti["requiredDuringSchedulingIgnoredDuringExecution"]
    assert any(
        t["topologyKey"] == "kubernetes.io/hostname"
        and selects(t["labelSelector"], pod_labels(rendered))
        for t in terms
    )


def test_each_pod_keeps_its_own_volume_when_the_set_is_deleted_or_scaled_down(
    rendered: list[Obj],
) -> None:
    sts = statefulset(rendered)
    (claim,) = sts["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert sts["spec"]["persistentVolumeClaimRetentionPolicy"] == {
        "whenDeleted": "Retain",
        "whenScaled": "Retain",
    }
    mounts = {m["name"]: m["mountPath"] for m in container(rendered)["volumeMounts"]}
    assert mounts[claim["metadata"]["name"]] == "/var/lib/replog"


# -- probes ----------------------------------------------------------------------------------


def test_every_probe_targets_a_port_the_container_exposes(rendered: list[Obj]) -> None:
    ports = container_ports(rendered)
    c = container(rendered)
    for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
        probe = c[kind]
        (action,) = [probe[a] for a in ("grpc", "httpGet", "tcpSocket", "exec") if a in probe]
        port = action["port"]
        assert port in ports.values() or port in ports, (kind, port)
        assert "grpc" in probe, f"{kind} should use the server's gRPC health service"
        # the plaintext health listener: the kubelet's gRPC probes cannot speak TLS
        assert probe["grpc"]["port"] == ports["health"]
    settings = pod_settings(rendered, 0)
    assert settings.health_listen == f"0.0.0.0:{ports['health']}"


def test_liveness_never_depends_on_peers_and_readiness_asks_for_caught_up_replicas(
    rendered: list[Obj],
) -> None:
    c = container(rendered)
    # "" is the overall service: SERVING whenever the process serves, whatever its peers do
    assert c["livenessProbe"]["grpc"].get("service", "") == ""
    assert c["startupProbe"]["grpc"].get("service", "") == ""
    # the name the server publishes once every replica it hosts has caught up
    assert c["readinessProbe"]["grpc"]["service"] == READY_SERVICE


def test_startup_probe_leaves_minutes_for_log_recovery(rendered: list[Obj]) -> None:
    startup = container(rendered)["startupProbe"]
    budget_s = startup["periodSeconds"] * startup["failureThreshold"]
    assert budget_s >= STARTUP_BUDGET_S_MIN
    liveness = container(rendered)["livenessProbe"]
    # once started, a hung process is restarted within about a minute
    assert liveness["periodSeconds"] * liveness["failureThreshold"] <= 120


# -- settings and identity -----------------------------------------------------------------


def test_every_configured_env_name_is_a_real_server_setting(rendered: list[Obj]) -> None:
    config = one(rendered, "ConfigMap", "replog-config")["data"]
    unknown = sorted(set(config) - SETTING_NAMES)
    assert not unknown, f"ConfigMap keys that are not settings: {unknown}"
    literal = {v["name"] for v in container(rendered).get("env") or []}
    unknown_env = sorted(n for n in literal if n.startswith("REPLOG_") and n not in SETTING_NAMES)
    assert not unknown_env, f"env vars that look like settings but are not: {unknown_env}"
    # Service links would add REPLOG_PORT=tcp://... for the `replog` Service
    assert statefulset(rendered)["spec"]["template"]["spec"]["enableServiceLinks"] is False


def test_replicas_equal_the_configured_cluster_size(rendered: list[Obj]) -> None:
    config = one(rendered, "ConfigMap", "replog-config")["data"]
    assert int(config["REPLOG_CLUSTER_SIZE"]) == statefulset(rendered)["spec"]["replicas"]


def test_each_pod_derives_the_peers_the_headless_service_resolves_and_its_own_node_id(
    rendered: list[Obj],
) -> None:
    sts = statefulset(rendered)
    replicas = sts["spec"]["replicas"]
    grpc_port = container_ports(rendered)["grpc"]
    expected = {
        i + 1: f"{sts['metadata']['name']}-{i}.{sts['spec']['serviceName']}."
        f"{sts['metadata']['namespace']}.svc.{CLUSTER_DOMAIN}:{grpc_port}"
        for i in range(replicas)
    }
    node_ids = []
    for i in range(replicas):
        settings = pod_settings(rendered, i)
        assert settings.peer_map() == expected, f"pod replog-{i}"
        # peers dial each other's peer listener at the same stable DNS names
        peer_port = container_ports(rendered)["peer"]
        assert settings.peer_dial_map() == {
            n: a.replace(f":{grpc_port}", f":{peer_port}") for n, a in expected.items()
        }
        # clients are told this address in leader hints: the pod's own stable DNS name
        assert settings.advertised_address == expected[settings.node_id]
        node_ids.append(settings.node_id)
    assert node_ids == list(range(1, replicas + 1))


def test_the_server_listens_on_the_container_ports_and_stores_on_the_volume(
    rendered: list[Obj],
) -> None:
    settings = pod_settings(rendered, 0)
    ports = container_ports(rendered)
    assert settings.listen == f"0.0.0.0:{ports['grpc']}"
    assert settings.metrics_listen == f"0.0.0.0:{ports['metrics']}"
    (claim,) = statefulset(rendered)["spec"]["volumeClaimTemplates"]
    mounts = {m["name"]: m["mountPath"] for m in container(rendered)["volumeMounts"]}
    assert str(settings.data_dir) == mounts[claim["metadata"]["name"]]


def test_termination_grace_period_covers_the_drain_and_the_flush(rendered: list[Obj]) -> None:
    settings = pod_settings(rendered, 0)
    grace_s = statefulset(rendered)["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace_s * 1000 > settings.shutdown_grace_ms
    assert grace_s * 1000 >= settings.shutdown_grace_ms + FLUSH_MARGIN_MS


# -- image and security ----------------------------------------------------------------------


def test_pods_run_as_the_image_user_with_a_read_only_root_and_no_privileges(
    rendered: list[Obj],
) -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    user = re.search(r"^USER (\d+):(\d+)$", dockerfile, re.MULTILINE)
    assert user, "the Dockerfile should run as a numeric USER uid:gid"
    uid, gid = int(user[1]), int(user[2])
    assert f"--uid {uid}" in dockerfile
    pod = statefulset(rendered)["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsUser"] == uid == 10001
    assert pod["securityContext"]["runAsGroup"] == gid
    assert pod["securityContext"]["fsGroup"] == gid  # the volume is writable by the user
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = container(rendered)["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    # a writable /tmp, since the root filesystem is not
    mounts = {m["mountPath"]: m["name"] for m in container(rendered)["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]


def test_the_image_is_the_project_version_and_is_not_pulled_when_present(
    rendered: list[Obj],
) -> None:
    version = replog.__version__  # the one place the version is written (pyproject reads it)
    c = container(rendered)
    assert c["image"] == f"replog:{version}"
    assert c["imagePullPolicy"] == "IfNotPresent"


def test_pods_request_cpu_and_memory_and_have_a_memory_limit(rendered: list[Obj]) -> None:
    resources = container(rendered)["resources"]
    assert {"cpu", "memory"} <= set(resources["requests"])
    assert "memory" in resources["limits"]


# -- network policy ----------------------------------------------------------------------------


def test_network_policy_lets_replicas_talk_clients_connect_and_dns_resolve(
    rendered: list[Obj],
) -> None:
    policy = one(rendered, "NetworkPolicy", "replog")
    spec = policy["spec"]
    labels = pod_labels(rendered)
    grpc, metrics = container_ports(rendered)["grpc"], container_ports(rendered)["metrics"]
    peer = container_ports(rendered)["peer"]
    assert selects(spec["podSelector"], labels)
    assert set(spec["policyTypes"]) == {"Ingress", "Egress"}
    own_ns = namespace_labels(rendered, NAMESPACE)

    def ingress(port: int, pod: dict[str, str], ns: dict[str, str], same: bool) -> bool:
        return policy_allows(
            spec["ingress"],
            "from",
            port=port,
            protocol="TCP",
            labels=pod,
            ns_labels=ns,
            same_namespace=same,
        )

    def egress(port: int, protocol: str, pod: dict[str, str], ns: dict[str, str]) -> bool:
        return policy_allows(
            spec["egress"],
            "to",
            port=port,
            protocol=protocol,
            labels=pod,
            ns_labels=ns,
            same_namespace=ns == own_ns,
        )

    # replication and forwarded admin calls between the replog pods, both directions, and
    # the peer port for nobody else (not even a client pod in the namespace)
    assert ingress(peer, labels, own_ns, True)
    assert egress(peer, "TCP", labels, own_ns)
    assert not ingress(peer, {"app": "producer"}, own_ns, True)
    # a client pod in the namespace, and none from an unlabelled other namespace
    assert ingress(grpc, {"app": "producer"}, own_ns, True)
    assert not ingress(grpc, {"app": "producer"}, {"kubernetes.io/metadata.name": "x"}, False)
    # Prometheus in another namespace scrapes metrics
    assert ingress(metrics, {"app": "prometheus"}, {"kubernetes.io/metadata.name": "mon"}, False)
    # DNS for the peers' names
    dns_ns = {"kubernetes.io/metadata.name": "kube-system"}
    for protocol in ("UDP", "TCP"):
        assert egress(53, protocol, {"k8s-app": "kube-dns"}, dns_ns)
    # and nothing else leaves the pods
    assert not egress(443, "TCP", {"app": "anything"}, {"kubernetes.io/metadata.name": "x"})


def test_tls_is_on_with_each_pod_using_its_own_certificate_from_the_secret(
    rendered: list[Obj],
) -> None:
    c = container(rendered)
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    assert "subPath" not in mounts["tls"], "a subPath mount never sees a rotated Secret"
    volumes = {v["name"]: v for v in statefulset(rendered)["spec"]["template"]["spec"]["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == "replog-tls"
    directory = mounts["tls"]["mountPath"]
    for ordinal in range(statefulset(rendered)["spec"]["replicas"]):
        env = pod_env(rendered, f"replog-{ordinal}")
        # the kubelet expands $(POD_NAME) from the env var defined before it (pod_env)
        cert = env["REPLOG_TLS_CERT_FILE"]
        key = env["REPLOG_TLS_KEY_FILE"]
        assert cert == f"{directory}/replog-{ordinal}.pem"
        assert key == f"{directory}/replog-{ordinal}-key.pem"
        assert env["REPLOG_TLS_CA_FILE"] == f"{directory}/ca.pem"
        settings = pod_settings(rendered, ordinal)
        assert settings.tls is not None and settings.peer_listen


def test_each_pod_takes_its_rack_from_the_zone_of_its_node(rendered: list[Obj]) -> None:
    zone = {"topology.kubernetes.io/zone": "eu-west-1b"}
    assert Settings.from_sources(args=None, env=pod_env(rendered, "replog-0", zone)).rack == (
        "eu-west-1b"
    )
    # without the label (PodTopologyLabelsAdmission off): no rack, placement ignores racks
    assert pod_settings(rendered, 0).rack == ""


def test_each_pod_serves_kafka_and_advertises_its_own_stable_dns_name(
    rendered: list[Obj],
) -> None:
    sts = statefulset(rendered)
    kafka_port = container_ports(rendered)["kafka"]
    for ordinal in range(sts["spec"]["replicas"]):
        settings = pod_settings(rendered, ordinal)
        assert settings.kafka_listen == f"0.0.0.0:{kafka_port}"
        # what the headless Service resolves to this very pod, on the Kafka port
        assert settings.kafka_advertise == (
            f"{sts['metadata']['name']}-{ordinal}.{sts['spec']['serviceName']}."
            f"{sts['metadata']['namespace']}.svc.{CLUSTER_DOMAIN}:{kafka_port}"
        )
        # over TLS, with SASL PLAIN's tokens (the Kafka edge offers PLAIN with a token file)
        assert settings.tls is not None and settings.token_file is not None
    for name in ("replog", "replog-headless"):  # bootstrap, and each pod's own name
        ports = {p["name"]: p for p in one(rendered, "Service", name)["spec"]["ports"]}
        assert ports["kafka"]["port"] == kafka_port
        assert ports["kafka"]["targetPort"] == "kafka"
    spec = one(rendered, "NetworkPolicy", "replog")["spec"]
    own_ns = namespace_labels(rendered, NAMESPACE)
    client = {"app": "producer"}
    assert policy_allows(
        spec["ingress"], "from", port=kafka_port, protocol="TCP", labels=client,
        ns_labels=own_ns, same_namespace=True,
    )  # fmt: skip
    assert not policy_allows(
        spec["ingress"], "from", port=kafka_port, protocol="TCP", labels=client,
        ns_labels={"kubernetes.io/metadata.name": "x"}, same_namespace=False,
    )  # fmt: skip
