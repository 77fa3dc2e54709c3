#!/usr/bin/env bash
# Makes a Docker engine usable on this machine, idempotently:
#   1. installs docker.io and mmdebstrap from Debian if missing;
#   2. starts dockerd (no bridge, no iptables: containers use host networking on loopback)
#      unless one already answers;
#   3. creates the local base image debian:bookworm-slim with mmdebstrap if absent
#      (no registry can be reached here; elsewhere the real image is pulled instead).
# Prints nothing but progress; exits non-zero if the engine cannot be made ready.
set -euo pipefail

log() { printf 'docker-engine: %s\n' "$*" >&2; }
sudo_if_needed() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

if ! command -v dockerd >/dev/null 2>&1 || ! command -v mmdebstrap >/dev/null 2>&1; then
    log "installing docker.io and mmdebstrap"
    sudo_if_needed apt-get update -qq
    DEBIAN_FRONTEND=noninteractive sudo_if_needed apt-get install -y -qq --no-install-recommends \
        docker.io mmdebstrap >/dev/null
fi

if ! docker info >/dev/null 2>&1; then
    log "starting dockerd"
    mkdir -p /var/log
    nohup dockerd --bridge=none --iptables=false --ip6tables=false --ip-masq=false \
        --ip-forward=false >/var/log/replog-dockerd.log 2>&1 &
    for _ in $(seq 1 300); do
        docker info >/dev/null 2>&1 && break
        sleep 0.1
    done
    docker info >/dev/null 2>&1 || { log "dockerd did not come up; see /var/log/replog-dockerd.log"; exit 1; }
fi

base="${REPLOG_BASE_IMAGE:-debian:bookworm-slim}"
if ! docker image inspect "$base" >/dev/null 2>&1; then
    if docker pull "$base" >/dev/null 2>&1; then
        log "pulled $base"
    else
        log "building $base locally with mmdebstrap (no registry reachable)"
        mmdebstrap --variant=minbase --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
            --include=ca-certificates bookworm - | docker import - "$base" >/dev/null
    fi
fi
log "ready ($(docker version --format '{{.Server.Version}}'), base $base)"
