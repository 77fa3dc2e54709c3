#!/usr/bin/env bash
# install-peers.sh [VENV]: what bench/peers.py needs to run replog's peers beside it, installed
# idempotently (a second run installs nothing):
#   - nats-server and redis-server from Debian (apt-get, through scripts/ensure-command.sh);
#   - their Python clients (nats-py, redis: the `bench` extra of pyproject.toml) into the venv.
# The harness starts the servers itself (127.0.0.1, free ports, a temp data dir) and stops
# them by pid; nothing here starts a service.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${1:-.venv}"
bash scripts/ensure-command.sh nats-server nats-server
bash scripts/ensure-command.sh redis-server redis-server
if ! "$venv/bin/python" -c "import nats, redis" >/dev/null 2>&1; then
    echo "install-peers: installing the bench extra (nats-py, redis) into $venv" >&2
    "$venv/bin/python" -m pip install --quiet -e '.[bench]'
fi
