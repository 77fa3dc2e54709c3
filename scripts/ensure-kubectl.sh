#!/usr/bin/env bash
# tests/deploy renders deploy/k8s with `kubectl kustomize`. Installs kubectl when none is on
# PATH: the machine's own apt source first (package kubectl), else Debian's kubernetes-client.
set -euo pipefail
if command -v kubectl >/dev/null 2>&1; then
    exit 0
fi
echo "ensure-kubectl: installing kubectl" >&2
sudo_if_needed() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
sudo_if_needed apt-get update -qq
DEBIAN_FRONTEND=noninteractive sudo_if_needed apt-get install -y -qq --no-install-recommends \
    kubectl >/dev/null 2>&1 \
    || DEBIAN_FRONTEND=noninteractive sudo_if_needed apt-get install -y -qq \
        --no-install-recommends kubernetes-client >/dev/null
command -v kubectl >/dev/null
