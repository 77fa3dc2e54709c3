#!/usr/bin/env bash
# ensure-command.sh CMD PACKAGE [PACKAGE...]: when CMD is not on PATH, installs the first of
# the Debian packages that installs (apt-get, as root or through sudo). Idempotent.
#   make test: java (Spark's JVM) and kubectl (tests/deploy renders deploy/k8s with it).
set -euo pipefail
cmd="$1"
shift
if command -v "$cmd" >/dev/null 2>&1; then
    exit 0
fi
sudo_if_needed() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
sudo_if_needed apt-get update -qq
for package in "$@"; do
    echo "ensure-command: installing $package for $cmd" >&2
    if DEBIAN_FRONTEND=noninteractive sudo_if_needed apt-get install -y -qq \
        --no-install-recommends "$package" >/dev/null; then
        break
    fi
done
command -v "$cmd" >/dev/null || { echo "ensure-command: no $cmd after installing $*" >&2; exit 1; }
