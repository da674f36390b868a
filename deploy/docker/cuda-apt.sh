#!/bin/bash
# Adds NVIDIA's CUDA apt repository for Debian 12 and installs the CUDA packages linfer needs.
#   cuda-apt.sh build   VERSION   nvcc + cudart/cuBLAS headers and libraries (build stage)
#   cuda-apt.sh runtime VERSION   cudart + cuBLAS shared libraries only (runtime stage)
# VERSION is major.minor, e.g. 13.0. Used by deploy/Dockerfile when LINFER_CUDA=ON; this cannot be
# exercised on machines without access to developer.download.nvidia.com.
set -euo pipefail
mode=$1
version=$2
pkgver=${version/./-}
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends ca-certificates curl >/dev/null
curl -fsSL -o /tmp/cuda-keyring.deb \
  https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/cuda-keyring_1.1-1_all.deb
dpkg -i /tmp/cuda-keyring.deb
rm -f /tmp/cuda-keyring.deb
apt-get update -qq
case "$mode" in
  build) pkgs=("cuda-nvcc-$pkgver" "cuda-cudart-dev-$pkgver" "libcublas-dev-$pkgver") ;;
  runtime) pkgs=("cuda-cudart-$pkgver" "libcublas-$pkgver") ;;
  *) echo "usage: $0 build|runtime VERSION" >&2; exit 2 ;;
esac
apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
echo "/usr/local/cuda-$version/targets/x86_64-linux/lib" >/etc/ld.so.conf.d/zz-linfer-cuda.conf
ldconfig
if [[ $mode == runtime ]]; then
  apt-get purge -y -qq curl >/dev/null
  apt-get autoremove -y -qq >/dev/null
  rm -rf /var/lib/apt/lists/*
fi
