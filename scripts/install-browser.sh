#!/usr/bin/env bash
# Installs what the browser tests (tests/e2e/test_dashboard.py) need from Debian's packages:
# Chromium, its matching ChromeDriver, and a font so pages render text. Idempotent: does
# nothing when all are present. Needs root (CI runs it before the tests).
set -euo pipefail

packages=(chromium chromium-driver fonts-dejavu-core)
missing=()
for pkg in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "install-browser: missing ${missing[*]}; run as root (apt-get install)" >&2
  exit 1
fi
echo "install-browser: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
/usr/bin/chromium --version >&2
