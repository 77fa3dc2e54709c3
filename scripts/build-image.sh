#!/usr/bin/env bash
# `make image`: engine ready (scripts/docker-engine.sh), wheels built on the host, image built.
# Idempotent; a second run with nothing changed reuses every cached layer.
set -euo pipefail
cd "$(dirname "$0")/.."
image="${REPLOG_IMAGE:-replog:dev}"
venv="${VENV:-.venv}"
bash scripts/docker-engine.sh
rm -rf dist/wheels
# With the console extra: the same image runs `replog console` (deploy/k8s/console.yaml).
"$venv/bin/python" -m pip wheel --quiet --wheel-dir dist/wheels '.[console]' >/dev/null
docker build --quiet --network host --tag "$image" \
    --build-arg BASE_IMAGE="${REPLOG_BASE_IMAGE:-debian:bookworm-slim}" . >/dev/null
echo "image $image ready ($(docker image inspect "$image" --format '{{.Size}}' | awk '{printf "%.0f MB", $1/1e6}'))"
