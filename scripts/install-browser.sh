#!/usr/bin/env bash
# Installs what the browser tests (tests/e2e/test_dashboard.py) need from Debian's packages:
# Chromium, its matching ChromeDriver, and a font so pages render text. Idempotent: does
# nothing when all are present. Needs root (CI runs it before the tests).
set -euo pipefail
cd "$(dirname "$0")"
./install-debian-packages.sh install-browser chromium chromium-driver fonts-dejavu-core
