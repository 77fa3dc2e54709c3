"""deploy/k8s-cert-manager: the same cluster with certificates from cert-manager. Rendered
offline like the base; checked against what the pods and the server expect (each pod finds
its own certificate, key and the CA where its settings say, and each certificate carries
the identity the peer port authenticates)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from replog.certs import node_uri
from tests.deploy.conftest import REPO, kubectl
from tests.deploy.test_manifests import (
    KUBERNETES_VERSIONS,
    container,
    one,
    pod_env,
    pod_settings,
    statefulset,
)

OVERLAY = REPO / "deploy" / "k8s-cert-manager"
Obj = dict[str, Any]


@pytest.fixture(scope="module")
def overlay() -> list[Obj]:
    result = subprocess.run(
        [kubectl(), "kustomize", str(OVERLAY)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def certificates(objects: list[Obj]) -> dict[str, Obj]:
    return {o["metadata"]["name"]: o["spec"] for o in objects if o["kind"] == "Certificate"}


def projected_files(objects: list[Obj]) -> dict[str, tuple[str, str]]:
    """file name in the tls volume -> (Secret, key)"""
    volumes = {v["name"]: v for v in statefulset(objects)["spec"]["template"]["spec"]["volumes"]}
    assert "secret" not in volumes["tls"], "the hand-made Secret replog-tls is not used"
    files: dict[str, tuple[str, str]] = {}
    for source in volumes["tls"]["projected"]["sources"]:
        secret = source["secret"]
        for item in secret["items"]:
            assert item["path"] not in files, f"{item['path']} projected twice"
            files[item["path"]] = (secret["name"], item["key"])
    return files


def test_each_pod_gets_its_own_certificate_key_and_the_ca_where_its_settings_say(
    overlay: list[Obj],
) -> None:
    certs = certificates(overlay)
    files = projected_files(overlay)
    directory = {m["name"]: m for m in container(overlay)["volumeMounts"]}["tls"]["mountPath"]
    for ordinal in range(statefulset(overlay)["spec"]["replicas"]):
        pod = f"replog-{ordinal}"
        env = pod_env(overlay, pod)
        settings = pod_settings(overlay, ordinal)
        assert settings.tls is not None and settings.peer_listen
        own = certs[pod]["secretName"]
        for setting, key in (
            ("REPLOG_TLS_CERT_FILE", "tls.crt"),
            ("REPLOG_TLS_KEY_FILE", "tls.key"),
        ):
            path = Path(env[setting].replace("$(POD_NAME)", pod))
            assert path.parent == Path(directory)
            assert files[path.name] == (own, key), (pod, setting)
        ca = Path(env["REPLOG_TLS_CA_FILE"])
        assert ca.parent == Path(directory) and files[ca.name][1] == "ca.crt"


def test_each_certificate_carries_the_node_identity_the_peer_port_authenticates(
    overlay: list[Obj],
) -> None:
    certs = certificates(overlay)
    replicas = statefulset(overlay)["spec"]["replicas"]
    assert {f"replog-{i}" for i in range(replicas)} <= set(certs)
    for ordinal in range(replicas):
        spec = certs[f"replog-{ordinal}"]
        settings = pod_settings(overlay, ordinal)
        assert spec["uris"] == [node_uri(settings.node_id)]
        # the pod's own peer address (what the others dial) is one of its names
        own_host = settings.advertised_address.rsplit(":", 1)[0]
        assert own_host in spec["dnsNames"], (own_host, spec["dnsNames"])
        assert {"server auth", "client auth"} <= set(spec["usages"])
        assert spec["privateKey"]["encoding"] == "PKCS8"
        assert spec["issuerRef"] == {"name": "replog-ca", "kind": "Issuer"}
    assert all(u.startswith("replog://node/") for s in certs.values() for u in s.get("uris", []))


def test_the_pod_certificates_are_signed_by_a_ca_that_cert_manager_makes(
    overlay: list[Obj],
) -> None:
    ca_issuer = one(overlay, "Issuer", "replog-ca")["spec"]["ca"]
    ca_cert = certificates(overlay)["replog-ca"]
    assert ca_cert["isCA"] is True and ca_cert["secretName"] == ca_issuer["secretName"]
    root = one(overlay, "Issuer", ca_cert["issuerRef"]["name"])
    assert "selfSigned" in root["spec"]


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_the_kubernetes_objects_still_pass_strict_schema_validation(
    overlay: list[Obj], version: str
) -> None:
    for obj in overlay:
        if obj["apiVersion"].startswith("cert-manager.io/"):
            continue  # a CRD: not in the bundled schemas
        kubernetes_validate.validate(obj, version, strict=True)
