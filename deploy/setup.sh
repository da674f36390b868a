#!/usr/bin/env bash
# Installs every Debian package linfer's build and tests need. Idempotent: when everything is
# already installed it only checks (no apt-get update), which takes well under a second.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config git ca-certificates
  libabsl-dev nlohmann-json3-dev libopenblas-dev zlib1g-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libpcre2-dev libicu-dev
  python3 python3-numpy
  clang-format
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  exit 0
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
echo "linfer setup: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
