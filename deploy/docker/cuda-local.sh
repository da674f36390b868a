#!/bin/bash
# Stages the parts of a local CUDA toolkit that linfer's CUDA build needs into
# deploy/docker/cuda-local/toolkit (git-ignored), for `docker build --build-arg CUDA_SOURCE=local`
# on machines that cannot reach NVIDIA's apt repository but have the toolkit installed.
#   cuda-local.sh stage [CUDA_HOME]   copy nvcc, nvvm, the headers, cudart and cuBLAS(Lt)
#                                     (default CUDA_HOME: /usr/local/cuda); prints the version
#   cuda-local.sh clean               remove the staged copy (it is ~0.8 GB of build context)
# Inside the image (called by deploy/Dockerfile):
#   cuda-local.sh install VERSION     move the staged toolkit to /usr/local/cuda-VERSION
#   cuda-local.sh runtime-libs VERSION DIR
#                                     copy the CUDA shared libraries linfer loads into DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
staged=$here/cuda-local/toolkit
case "${1:-}" in
  stage)
    src=${2:-/usr/local/cuda}
    [[ -x $src/bin/nvcc ]] || { echo "no nvcc in $src/bin" >&2; exit 1; }
    rm -rf "$staged"
    mkdir -p "$staged/lib"
    cp -a "$src/bin" "$src/nvvm" "$staged/"
    cp -aL "$src/include" "$staged/include"
    lib=$src/lib64
    [[ -e $lib/libcudart.so ]] || lib=$src/lib
    for pattern in 'libcudart.so*' libcudart_static.a libcudadevrt.a libculibos.a \
      'libcublas.so*' 'libcublasLt.so*'; do
      # shellcheck disable=SC2086 # the pattern is meant to glob
      cp -a "$lib"/$pattern "$staged/lib/"
    done
    [[ -d $lib/stubs ]] && cp -a "$lib/stubs" "$staged/lib/"
    ln -s lib "$staged/lib64"
    mkdir -p "$staged/targets/x86_64-linux"
    ln -s ../../include "$staged/targets/x86_64-linux/include"
    ln -s ../../lib "$staged/targets/x86_64-linux/lib"
    "$staged/bin/nvcc" --version | sed -nE 's/.*release ([0-9]+\.[0-9]+).*/\1/p' >"$staged/VERSION"
    echo "staged CUDA $(cat "$staged/VERSION") from $src in $staged ($(du -sh "$staged" | cut -f1))"
    ;;
  clean)
    rm -rf "$staged"
    ;;
  install)
    version=$2
    [[ -f $staged/VERSION ]] || { echo "no staged toolkit (run deploy/docker/cuda-local.sh stage)" >&2; exit 1; }
    if [[ $(cat "$staged/VERSION") != "$version" ]]; then
      echo "the staged toolkit is CUDA $(cat "$staged/VERSION"), CUDA_VERSION is $version" >&2
      exit 1
    fi
    mv "$staged" "/usr/local/cuda-$version"
    echo "/usr/local/cuda-$version/lib" >/etc/ld.so.conf.d/zz-linfer-cuda.conf
    ldconfig
    ;;
  runtime-libs)
    lib=/usr/local/cuda-$2/lib
    out=$3
    mkdir -p "$out"
    cp -a "$lib"/libcudart.so.* "$lib"/libcublas.so.* "$lib"/libcublasLt.so.* "$out/"
    ;;
  *)
    echo "usage: $0 stage [CUDA_HOME] | clean | install VERSION | runtime-libs VERSION DIR" >&2
    exit 2
    ;;
esac
