#!/usr/bin/env bash
# Spark needs a Java runtime (17+). Installs Debian's headless JRE when none is on PATH.
set -euo pipefail
if command -v java >/dev/null 2>&1; then
    exit 0
fi
echo "ensure-java: installing openjdk-17-jre-headless" >&2
sudo_if_needed() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
sudo_if_needed apt-get update -qq
DEBIAN_FRONTEND=noninteractive sudo_if_needed apt-get install -y -qq --no-install-recommends \
    openjdk-17-jre-headless >/dev/null
