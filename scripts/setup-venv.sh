#!/usr/bin/env bash
# Creates (or updates) the project's virtualenv and installs replog with its dev extras.
# Idempotent: re-running only installs what changed.
set -euo pipefail
python="${1:-python3}"
venv="${2:-.venv}"
if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet -e '.[dev]'
