#!/usr/bin/env bash
# ensure-chromium.sh: Debian's headless-capable Chromium and its matching ChromeDriver for the
# console's browser tests (tests/browser), installed when missing. Idempotent: does nothing
# when both are on PATH. Debian builds `chromium-driver` from the same source as `chromium`
# (same version), and it depends on it.
set -euo pipefail
here="$(dirname "$0")"
bash "$here/ensure-command.sh" chromedriver chromium-driver
bash "$here/ensure-command.sh" chromium chromium
