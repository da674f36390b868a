#!/usr/bin/env bash
# Builds linfer's CUDA kernel tests and benchmark, and the device-parameterized model and engine
# tests and the engine benchmark, here (no GPU needed: nvcc 13.0, sm_90a) and packs
# them with every shared library they load into the git-ignored .device/linfer-gpu/ (one xz tarball,
# ~8 MB: OpenBLAS alone is 35 MB unpacked), for the device tool to carry to a GPU machine, where
# tests/gpu/run_on_gpu.sh unpacks it (tests/gpu/README.md). Left out, because the GPU machine brings
# its own: the C/C++ runtime (glibc, libstdc++, libgcc_s) and the CUDA libraries (libcuda, libcudart,
# libcublas*; cuBLASLt alone is ~540 MB, far over the 64 MiB carry limit).
#   bash tests/gpu/pack.sh            # BUILD_DIR=build-cuda by default
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$root/build-cuda}
out=$root/.device/linfer-gpu
stage=$build/gpu-pack  # the unpacked tree, kept for the smoke test below
targets=(kernels_test cuda_recurrence_benchmark models_device_test engine_test engine_stress_test
  engine_graph_test engine_decode_graphs_test engine_prefix_cache_test engine_benchmark linfer
  linfer_bench server_benchmark)
binaries=(tests/kernels/kernels_test tests/bench/cuda_recurrence_benchmark
  tests/models/models_device_test tests/engine/engine_test tests/engine/engine_stress_test
  tests/engine/engine_graph_test tests/engine/engine_decode_graphs_test
  tests/engine/engine_prefix_cache_test tests/bench/engine_benchmark)
# The server, the load generator and server_benchmark (run_on_gpu.sh's serve stage) go in a pack of their own: with
# gRPC, protobuf, OpenSSL and ICU they would push the test pack past the carry limit.
serve_binaries=(bin/linfer bin/linfer_bench tests/bench/server_benchmark)
serve_out=$root/.device/linfer-serve

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DLINFER_WERROR=ON -DLINFER_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90a >/dev/null
cmake --build "$build" -j2 --target "${targets[@]}"

skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libstdc\+\+\.so|libgcc_s\.so|libcuda\.so|libcudart\.so|libcublas|libcublasLt|libnvrtc|libnvJitLink)'
commit=$(git -C "$root" rev-parse --short HEAD)
dirty=$(git -C "$root" status --porcelain --untracked-files=no | wc -l)
# pack STAGE_DIR OUT_DIR TARBALL BINARY...: the binaries (debug info stripped), every shared library
# they load but the skipped ones, and a MANIFEST, as OUT_DIR/TARBALL.
pack() {
  local dir=$1 dest=$2 tarball=$3 b name path
  shift 3
  rm -rf "$dest" "$dir"
  mkdir -p "$dest" "$dir/bin" "$dir/lib"
  for b in "$@"; do
    cp "$build/$b" "$dir/bin/"
    strip --strip-debug "$dir/bin/$(basename "$b")"
    while read -r name _ path _; do
      if [[ "$name" =~ $skip || -z "${path:-}" || "$path" != /* ]]; then continue; fi
      cp -nL "$path" "$dir/lib/$name"
    done < <(ldd "$build/$b")
  done
  {
    echo "linfer commit $commit ($dirty modified tracked files) packed $(date -u +%FT%TZ)"
    echo "built with $(/usr/local/cuda/bin/nvcc --version | tail -1), CUDA architectures 90a"
    for b in "$dir"/bin/*; do echo "$(basename "$b"): $(sha256sum "$b" | cut -c1-16)"; done
    echo "libraries: $(find "$dir/lib" -type f -printf '%f ')"
  } >"$dir/MANIFEST"
  cp "$dir/MANIFEST" "$dest/MANIFEST"
  # One xz block with a 64 MiB dictionary: the binaries share their kernel images, which a
  # multi-threaded (block-split) -6 could not see (38.9 MiB vs 11.7 MiB for the kernel pack).
  tar -C "$dir" -cf - MANIFEST bin lib | xz -T1 -9e >"$dest/$tarball"
}
pack "$stage" "$out" linfer-gpu.tar.xz "${binaries[@]}"
pack "$build/serve-pack" "$serve_out" linfer-serve.tar.xz "${serve_binaries[@]}"

# The device tool carries the working tree (tracked + untracked, not ignored) plus the carried
# folders: 64 MiB in all.
tree_bytes=$(cd "$root" && git ls-files -z --cached --others --exclude-standard |
  xargs -0 -r stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
pack_bytes=$(du -sb "$out" | cut -f1)
serve_bytes=$(du -sb "$serve_out" | cut -f1)
fla_bytes=$( (du -sb "$root/.device/fla" 2>/dev/null || echo 0) | cut -f1)
# Call 1 carries the kernel pack alone; call 2 the serve pack with fla (tests/gpu/README.md).
awk -v p="$pack_bytes" -v t="$tree_bytes" 'BEGIN {
  m = 1048576
  printf "pack %.1f MiB + working tree %.1f MiB = %.1f MiB of the 64 MiB carry limit\n",
    p / m, t / m, (p + t) / m
}'
awk -v p="$serve_bytes" -v f="$fla_bytes" -v t="$tree_bytes" 'BEGIN {
  m = 1048576
  printf "serve pack %.1f MiB + fla %.1f MiB + working tree %.1f MiB = %.1f MiB (the serve and fla stages)\n",
    p / m, f / m, t / m, (p + f + t) / m
}'
cat "$out/MANIFEST"
if ((pack_bytes + tree_bytes > 64 * 1048576 || serve_bytes + fla_bytes + tree_bytes > 64 * 1048576)); then
  echo "over the carry limit" >&2
  exit 1
fi
# Smoke test here (no GPU): the binaries start from the pack alone and report "no device".
LD_LIBRARY_PATH="$stage/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib" "$stage/bin/kernels_test" \
  --gtest_filter='DeviceContextTest.*:Devices/DeviceOpsTest.*' --gtest_brief=1 | tail -3
LD_LIBRARY_PATH="$stage/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib" \
  "$stage/bin/cuda_recurrence_benchmark"
LD_LIBRARY_PATH="$build/serve-pack/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib" \
  "$build/serve-pack/bin/server_benchmark" --device cuda
