#!/usr/bin/env bash
# Usage: install-debian-packages.sh NAME PACKAGE...
# Installs the Debian packages that are missing, with apt-get; does nothing when all are
# present. Needs root to install (CI runs the callers before the tests); NAME prefixes its
# messages.
set -euo pipefail

name=$1
shift
missing=()
for pkg in "$@"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "$name: missing ${missing[*]}; run as root (apt-get install)" >&2
  exit 1
fi
echo "$name: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
