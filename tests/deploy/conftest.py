"""Deploy tests: the Kubernetes manifests in deploy/k8s, rendered and validated offline.

No cluster runs on these machines (shared design note on containers), so `kubectl kustomize`
renders the manifests, `kubernetes-validate --strict` checks them against the API schemas of
several Kubernetes versions, and the tests check what schemas cannot see (selectors, ports,
settings, peer names) against the server's own code.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
KUSTOMIZATION = REPO / "deploy" / "k8s"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/deploy" in str(item.fspath):
            item.add_marker(pytest.mark.deploy)


def kubectl() -> str:
    found = shutil.which("kubectl") or "/usr/bin/kubectl"
    if not Path(found).is_file():
        pytest.fail(
            "kubectl is not installed (looked on PATH and at /usr/bin/kubectl): the deploy "
            "tests render deploy/k8s with `kubectl kustomize`; install kubectl to run them",
            pytrace=False,
        )
    return found


@pytest.fixture(scope="session")
def rendered() -> list[dict[str, Any]]:
    """Every object `kubectl kustomize deploy/k8s` renders, in order."""
    result = subprocess.run(
        [kubectl(), "kustomize", str(KUSTOMIZATION)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if result.returncode != 0:
        pytest.fail(f"kubectl kustomize deploy/k8s failed:\n{result.stderr}", pytrace=False)
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]
