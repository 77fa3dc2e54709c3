"""deploy/k8s/console.yaml: the web console's Deployment and Service agree with the CLI that
runs in them (its options parse, it dials the client Service over TLS with the CA the nodes
use), with the network policy (it may reach the nodes' client port), and with the
cert-manager overlay (the CA comes from cert-manager's Secret there)."""

from __future__ import annotations

import argparse
import subprocess
from typing import Any

import yaml

from replog.cli import build_parser
from replog.console.server import config_from, parse_listen
from tests.deploy.conftest import REPO, kubectl
from tests.deploy.test_manifests import (
    NAMESPACE,
    container_ports,
    namespace_labels,
    one,
    policy_allows,
    selects,
)

Obj = dict[str, Any]
NAME = "replog-console"


def console_container(objects: list[Obj]) -> Obj:
    deployment = one(objects, "Deployment", NAME)
    (c,) = deployment["spec"]["template"]["spec"]["containers"]
    return dict(c)


def console_args(objects: list[Obj]) -> argparse.Namespace:
    """The container's command line as `replog` parses it (env from the manifest)."""
    c = console_container(objects)
    assert c["command"][:2] == ["replog", "console"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    argv = ["console", *c["command"][2:], *c["args"]]
    argv += ["--address", env["REPLOG_ADDRESS"], "--tls-ca", env["REPLOG_TLS_CA"]]
    return build_parser().parse_args(argv)


def test_the_console_runs_replog_console_against_the_client_service_over_tls(
    rendered: list[Obj],
) -> None:
    args = console_args(rendered)
    service = one(rendered, "Service", "replog")
    grpc = {p["name"]: p["port"] for p in service["spec"]["ports"]}["grpc"]
    assert args.address == f"replog.{NAMESPACE}.svc.cluster.local:{grpc}"
    c = console_container(rendered)
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    volumes = {
        v["name"]: v
        for v in one(rendered, "Deployment", NAME)["spec"]["template"]["spec"]["volumes"]
    }
    ca = volumes["ca"]["secret"]
    assert ca["secretName"] == "replog-tls" and ca["items"] == [{"key": "ca.pem", "path": "ca.pem"}]
    assert args.tls_ca == f"{mounts['ca']}/ca.pem"
    token = next(e for e in c["env"] if e["name"] == "REPLOG_TOKEN")
    assert token["valueFrom"]["secretKeyRef"]["optional"] is True


def test_the_console_listens_on_its_port_and_accepts_its_service_names(
    rendered: list[Obj],
) -> None:
    args = console_args(rendered)
    host, port = parse_listen(args.listen)
    c = console_container(rendered)
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert port == ports["http"]
    allowed = config_from(args, host).allowed_hosts
    assert {NAME, f"{NAME}.{NAMESPACE}.svc", "localhost"} <= set(allowed)
    for probe in (c["readinessProbe"], c["livenessProbe"]):
        assert probe["httpGet"] == {"path": "/healthz", "port": "http"}
    service = one(rendered, "Service", NAME)
    pod = one(rendered, "Deployment", NAME)["spec"]["template"]["metadata"]["labels"]
    assert selects({"matchLabels": service["spec"]["selector"]}, pod)
    assert [p["targetPort"] for p in service["spec"]["ports"]] == ["http"]


def test_the_console_runs_unprivileged_and_can_read_the_ca(rendered: list[Obj]) -> None:
    spec = one(rendered, "Deployment", NAME)["spec"]["template"]["spec"]
    assert spec["enableServiceLinks"] is False  # no REPLOG_* variables from Services
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["fsGroup"] == spec["securityContext"]["runAsGroup"]
    c = console_container(rendered)
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["resources"]["limits"]["memory"]


def test_the_network_policy_lets_the_console_reach_the_nodes_client_port(
    rendered: list[Obj],
) -> None:
    policy = one(rendered, "NetworkPolicy", "replog")
    pod = one(rendered, "Deployment", NAME)["spec"]["template"]["metadata"]["labels"]
    assert policy_allows(
        policy["spec"]["ingress"],
        "from",
        port=container_ports(rendered)["grpc"],
        protocol="TCP",
        labels=pod,
        ns_labels=namespace_labels(rendered, NAMESPACE),
        same_namespace=True,
    )


def test_with_cert_manager_the_console_reads_the_ca_cert_manager_makes() -> None:
    result = subprocess.run(
        [kubectl(), "kustomize", str(REPO / "deploy" / "k8s-cert-manager")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    overlay = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    volumes = one(overlay, "Deployment", NAME)["spec"]["template"]["spec"]["volumes"]
    ca = next(v for v in volumes if v["name"] == "ca")["secret"]
    assert ca["secretName"] == "replog-tls-0"
    assert ca["items"] == [{"key": "ca.crt", "path": "ca.pem"}]
    issued = [o["spec"]["secretName"] for o in overlay if o["kind"] == "Certificate"]
    assert "replog-tls-0" in issued
