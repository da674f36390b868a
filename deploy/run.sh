#!/usr/bin/env bash
# The run command: installs what is missing, builds linfer (Release) and runs it.
# Usage: bash deploy/run.sh [linfer arguments...]   (default: `linfer serve`, the bundled model)
# Progress goes to stderr (one line per stage, the build's progress every 10%, compiler errors and
# warnings as they come), so linfer's own stdout stays clean. Full logs: BUILD_DIR/run-*.log.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${LINFER_BUILD_DIR:-$root/build}

say() { echo "linfer run: $*" >&2; }

# Condenses `cmake --build` output: progress lines ("[ 42%] Building CXX object ..." from make,
# "[12/345] ..." from ninja) at most once per 10%, everything else (compiler output) unchanged.
progress() {
  awk '
    /^\[ *[0-9]+%\]/ {
      p = substr($0, 2, index($0, "%") - 2) + 0
      if ($0 ~ /Building|Linking/ && p >= next_p) {
        print "  " $0; fflush(); next_p = p - p % 10 + 10
      }
      next
    }
    /^\[[0-9]+\/[0-9]+\] / {
      split(substr($0, 2, index($0, "]") - 2), f, "/")
      p = int(100 * f[1] / f[2])
      if (p >= next_p) { print "  " $0; fflush(); next_p = p - p % 10 + 10 }
      next
    }
    { print; fflush() }
  ' >&2
}

say "checking build dependencies (deploy/setup.sh)"
bash "$root/deploy/setup.sh"
mkdir -p "$build"
say "configuring $build (Release)"
if ! cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >"$build/run-configure.log" 2>&1; then
  tail -n 30 "$build/run-configure.log" >&2
  say "configure failed (full log: $build/run-configure.log)"
  exit 1
fi
say "building linfer with $(nproc) jobs (a first build takes several minutes)"
start=$SECONDS
if ! cmake --build "$build" -j "$(nproc)" --target linfer 2>&1 | tee "$build/run-build.log" |
  progress; then
  say "build failed; the errors are above (full log: $build/run-build.log)"
  exit 1
fi
say "built $build/bin/linfer ($((SECONDS - start)) s)"
if (($# == 0)); then set -- serve; fi
cd "$root"
exec "$build/bin/linfer" "$@"
