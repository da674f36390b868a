#!/usr/bin/env bash
# End-to-end test of the container image (deploy/Dockerfile), all on loopback:
#   1. start a private Docker daemon (no bridge, no iptables, own data-root and socket)
#   2. make a Debian bookworm base image with debootstrap (rootfs tarball cached in WORK_DIR)
#   3. build the CPU image (the build stage compiles linfer; with LINFER_DOCKER_UNIT_TESTS=ON also
#      its unit tests, which it runs: off by default, since ctest has just run them on this
#      machine's Debian bookworm and they are half of the image's compile)
#   4. run it with --network host on free loopback ports, check the non-root user and HEALTHCHECK
#   5. stream a generation through it with the host's CLI client
#   6. scrape its /metrics with Debian's Prometheus until linfer_generation_tokens_total > 0
#   7. `docker stop` it: it must drain and exit 0 in under 2 seconds
# usage: docker_test.sh SOURCE_DIR WORK_DIR LINFER_BINARY
# Exit 77 (ctest SKIP_RETURN_CODE) with "SKIPPED: docker daemon unavailable: <reason>" when no
# Docker daemon can run here. Environment: LINFER_DEBIAN_MIRROR overrides the Debian mirror (default:
# the first one in /etc/apt/sources.list{,.d}); LINFER_DOCKER_TEST_KEEP=1 keeps the test image.
# LINFER_DOCKER_CUDA=CUDA_HOME builds the CUDA variant instead (LINFER_CUDA=ON, CUDA_SOURCE=local:
# that toolkit staged into a copy of the context; CUDA_ARCHITECTURES from LINFER_DOCKER_CUDA_ARCHS,
# default 90a) and runs the same checks; without a GPU the container must say so and serve on the
# CPU. Not part of the ctest suite (~25 minutes of compiling on two cores); run it by hand:
#   LINFER_DOCKER_CUDA=/usr/local/cuda tests/deploy/docker_test.sh . /tmp/dtest build/bin/linfer
set -euo pipefail

readonly SKIP=77
if (($# != 3)); then
  echo "usage: $0 SOURCE_DIR WORK_DIR LINFER_BINARY" >&2
  exit 2
fi
root=$(cd "$1" && pwd)
mkdir -p "$2"
work=$(cd "$2" && pwd)
linfer=$3
T0=$(date +%s.%N)

# Arithmetic on fractional seconds with awk (no bc needed).
fsub() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", a - b }'; }
flt() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a < b) }'; }
elapsed() { fsub "$(date +%s.%N)" "$T0"; }
log() { printf '[docker_test %6.1fs] %s\n' "$(elapsed)" "$*"; }
fail() {
  log "FAIL: $*"
  exit 1
}
skip() {
  echo "SKIPPED: docker daemon unavailable: $*"
  exit "$SKIP"
}
# wait_for SECONDS DESCRIPTION COMMAND...: poll COMMAND every 0.2 s until it succeeds.
wait_for() {
  local limit=$1 what=$2
  shift 2
  local deadline=$(($(date +%s) + limit))
  until "$@" >/dev/null 2>&1; do
    (($(date +%s) < deadline)) || return 1
    sleep 0.2
  done
  log "ready: $what"
}

# ---- state for cleanup --------------------------------------------------------------------------
dockerd_pid="" prom_pid="" container="" exec_root=""
dstate=$work/dockerd
sock=$dstate/docker.sock
cuda_home=${LINFER_DOCKER_CUDA:-}
variant=ctest
[[ -z $cuda_home ]] || variant=ctest-cuda
image=localhost/linfer:$variant
build_image=localhost/linfer-build:$variant
base_image=localhost/bookworm:minbase

cleanup() {
  local rc=$?
  set +e
  if [[ -n $container ]]; then docker rm -f "$container" >/dev/null 2>&1; fi
  if [[ -n $prom_pid ]]; then
    kill "$prom_pid" 2>/dev/null
    wait "$prom_pid" 2>/dev/null
  fi
  rm -rf "$work/prometheus"
  if [[ -n $dockerd_pid ]]; then
    if [[ ${LINFER_DOCKER_TEST_KEEP:-0} != 1 ]]; then
      docker rmi "$image" >/dev/null 2>&1
    fi
    # Dangling images of earlier builds; the tagged build stage stays as the layer cache.
    docker image prune -f >/dev/null 2>&1
    kill "$dockerd_pid" 2>/dev/null
    for _ in $(seq 100); do kill -0 "$dockerd_pid" 2>/dev/null || break; sleep 0.2; done
    kill -9 "$dockerd_pid" 2>/dev/null
    wait "$dockerd_pid" 2>/dev/null
  fi
  if [[ -n $exec_root ]]; then
    # dockerd leaves mounts (e.g. netns/default, an nsfs bind mount) under its exec-root.
    awk -v r="$exec_root/" 'index($2, r) == 1 { print $2 }' /proc/mounts | sort -r |
      while read -r m; do umount -l "$m" 2>/dev/null; done
    rm -rf "$exec_root"
  fi
  log "cleaned up (exit $rc)"
  return $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- 0. prerequisites ---------------------------------------------------------------------------
[[ -x $linfer ]] || fail "no linfer binary at $linfer"
if (($(id -u) != 0)); then skip "needs root to start dockerd (running as uid $(id -u))"; fi

# Packages this test needs (docker.io brings dockerd, containerd and runc). Services must not
# auto-start: a policy-rc.d that refuses them is put in place for the install if none exists.
need=()
command -v dockerd >/dev/null || need+=(docker.io)
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v curl >/dev/null || need+=(curl)
[[ -x /usr/bin/prometheus && -x /usr/bin/promtool ]] || need+=(prometheus)
if ((${#need[@]})); then
  log "installing ${need[*]}"
  made_policy=0
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    made_policy=1
  fi
  apt_ok=1
  { DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"; } \
    >"$work/apt.log" 2>&1 || apt_ok=0
  ((made_policy)) && rm -f /usr/sbin/policy-rc.d
  if ((!apt_ok)); then
    tail -5 "$work/apt.log"
    if ! command -v dockerd >/dev/null; then skip "cannot install docker.io (see $work/apt.log)"; fi
    fail "cannot install ${need[*]} (see $work/apt.log)"
  fi
fi
export DOCKER_HOST=unix://$sock DOCKER_BUILDKIT=0 DOCKER_CLI_HINTS=false
# The client must not read a user's config (contexts, credential helpers).
export DOCKER_CONFIG=$dstate/client
mkdir -p "$DOCKER_CONFIG"

# ---- 1. private Docker daemon on loopback-only settings -----------------------------------------
mkdir -p "$dstate/data"
# A daemon left over from an interrupted run of this test (same data-root) is stopped first.
if [[ -f $dstate/docker.pid ]]; then
  old=$(cat "$dstate/docker.pid")
  if [[ -n $old ]] && grep -qa -- "$dstate/data" "/proc/$old/cmdline" 2>/dev/null; then
    log "stopping a stale test dockerd ($old)"
    kill "$old" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$old" 2>/dev/null || break; sleep 0.2; done
  fi
  rm -f "$dstate/docker.pid"
fi
rm -f "$sock"
exec_root=/run/linfer-dtest-$$ # short: containerd/runc socket paths must fit in 108 bytes
echo '{}' >"$dstate/daemon.json"
log "starting dockerd (data-root $dstate/data)"
dockerd --config-file "$dstate/daemon.json" --data-root "$dstate/data" --exec-root "$exec_root" \
  --pidfile "$dstate/docker.pid" -H "unix://$sock" \
  --bridge=none --iptables=false --ip6tables=false --ip-forward=false --ip-masq=false \
  >"$dstate/dockerd.log" 2>&1 &
dockerd_pid=$!
deadline=$(($(date +%s) + 60))
until docker version --format '{{.Server.Version}}' >/dev/null 2>&1; do
  if ! kill -0 "$dockerd_pid" 2>/dev/null; then
    wait "$dockerd_pid" 2>/dev/null || true
    dockerd_pid=""
    skip "dockerd exited: $(grep -iE 'level=(fatal|error)|failed' "$dstate/dockerd.log" | tail -2 | tr '\n' ' ')"
  fi
  if (($(date +%s) >= deadline)); then skip "dockerd did not answer within 60 s (see $dstate/dockerd.log)"; fi
  sleep 0.2
done
log "dockerd $(docker version --format '{{.Server.Version}}') up (storage driver $(docker info --format '{{.Driver}}'))"
t_daemon=$(elapsed)

# ---- 2. base image: debootstrap --variant=minbase bookworm ---------------------------------------
debian_mirror() {
  if [[ -n ${LINFER_DEBIAN_MIRROR:-} ]]; then
    echo "$LINFER_DEBIAN_MIRROR"
    return
  fi
  local m
  # deb822 (URIs: ...) or one-line (deb [opts] URI suite ...) entries; the main archive, not security.
  m=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources \
    2>/dev/null | grep -v '^\s*#' |
    sed -nE 's/^URIs:\s*(\S+).*/\1/p; s/^deb\s+(\[[^]]*\]\s+)?(\S+)\s.*/\2/p' |
    grep -E '/debian/?$' | grep -v security | head -1)
  echo "${m:-http://deb.debian.org/debian}"
}
if ! docker image inspect "$base_image" >/dev/null 2>&1; then
  tarball=$work/bookworm-minbase.tar
  if [[ ! -s $tarball ]]; then
    mirror=$(debian_mirror)
    mirror=${mirror%/}
    log "debootstrap --variant=minbase bookworm from $mirror"
    rootfs=$work/rootfs.tmp
    rm -rf "$rootfs"
    debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 ||
      { tail -20 "$work/debootstrap.log"; fail "debootstrap failed"; }
    security=${mirror%/debian}/debian-security
    cat >"$rootfs/etc/apt/sources.list" <<EOF
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb $security bookworm-security main
EOF
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    tar -C "$rootfs" -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
    rm -rf "$rootfs"
    log "rootfs tarball cached: $tarball ($(du -h "$tarball" | cut -f1))"
  else
    log "using cached rootfs tarball $tarball"
  fi
  docker import "$tarball" "$base_image" >/dev/null
  log "imported $base_image"
else
  log "base image $base_image already present"
fi
t_base=$(elapsed)

# ---- 3. build the CPU image ----------------------------------------------------------------------
# The build context is the source tree (.dockerignore drops build dirs and node_modules). Until the
# bundled model models/tiny exists, the test bakes in a tiny random checkpoint made by the Python
# reference instead, from a staged copy of the sources.
context=$root
model_note="models/tiny"
stage_context() {
  context=$work/context
  rm -rf "$context"
  mkdir -p "$context"
  tar -C "$root" --exclude='./build*' --exclude=node_modules --exclude=.git --exclude=__pycache__ \
    --exclude=./.cache --exclude=./.device --exclude=./deploy/docker/cuda-local/toolkit -cf - . |
    tar -C "$context" -xf -
}
if [[ ! -f $root/models/tiny/config.json || ! -f $root/models/tiny/model.safetensors ]]; then
  fixtures=$work/fixture
  if [[ ! -f $fixtures/gdn_default/model.safetensors ]]; then
    /usr/bin/python3 "$root/tests/models/reference/make_fixtures.py" --out "$fixtures" \
      --only gdn_default >"$work/fixture.log" 2>&1 || { tail "$work/fixture.log"; fail "make_fixtures.py failed"; }
  fi
  stage_context
  mkdir -p "$context/models/tiny"
  cp "$fixtures/gdn_default/config.json" "$fixtures/gdn_default/model.safetensors" "$context/models/tiny/"
  model_note="random gdn_default fixture (models/tiny is not there yet)"
fi
build_args=(--network host -f "$context/deploy/Dockerfile" --build-arg "BASE_IMAGE=$base_image"
  --build-arg BUILD_JOBS=2 --build-arg "UNIT_TESTS=${LINFER_DOCKER_UNIT_TESTS:-OFF}")
if [[ -n $cuda_home ]]; then
  [[ $context != "$root" ]] || stage_context
  bash "$context/deploy/docker/cuda-local.sh" stage "$cuda_home" | sed 's/^/    /'
  build_args+=(--build-arg LINFER_CUDA=ON --build-arg CUDA_SOURCE=local
    --build-arg "CUDA_VERSION=$(cat "$context/deploy/docker/cuda-local/toolkit/VERSION")"
    --build-arg "CUDA_ARCHITECTURES=${LINFER_DOCKER_CUDA_ARCHS:-90a}")
  model_note+="; CUDA variant, toolkit from $cuda_home"
fi
log "docker build (base $base_image, model: $model_note)"
# The build stage is tagged so that it stays as the layer cache for the next run (apt + compile).
if ! docker build "${build_args[@]}" --target build -t "$build_image" "$context" >"$work/build.log" 2>&1; then
  tail -40 "$work/build.log"
  fail "docker build (build stage) failed; full log: $work/build.log"
fi
t_build_stage=$(elapsed)
grep -E 'tests passed|tests failed' "$work/build.log" | tail -1 | sed 's/^/    in-image ctest: /' || true
if ! docker build "${build_args[@]}" -t "$image" "$context" >>"$work/build.log" 2>&1; then
  tail -40 "$work/build.log"
  fail "docker build (runtime stage) failed; full log: $work/build.log"
fi
t_build=$(elapsed)
log "built $image ($(docker image inspect -f '{{.Size}}' "$image" | awk '{printf "%.0f MB", $1/1e6}'))"

# ---- 4. run it on free loopback ports ------------------------------------------------------------
read -r grpc_port http_port prom_port < <(/usr/bin/python3 - <<'EOF'
import socket
socks = [socket.socket() for _ in range(3)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))
EOF
)
container=linfer-ctest-$$
log "docker run $image on 127.0.0.1 (gRPC $grpc_port, HTTP $http_port)"
docker run -d --name "$container" --network host -e "LINFER_HTTP_PORT=$http_port" \
  --health-interval 1s --health-start-period 30s \
  "$image" --bind=127.0.0.1 --port="$grpc_port" --http_port="$http_port" \
  --state_memory_mb=64 --drain_timeout_s=30 >/dev/null
running() { [[ $(docker inspect -f '{{.State.Running}}' "$container" 2>/dev/null) == true ]]; }
if ! wait_for 60 "container /health" curl -fsS "http://127.0.0.1:$http_port/health"; then
  docker logs "$container" 2>&1 | tail -20
  fail "container not serving /health within 60 s (running: $(running && echo yes || echo no))"
fi
t_up=$(elapsed)
uid=$(docker exec "$container" id -u)
[[ $uid != 0 ]] || fail "the server runs as root"
log "server runs as uid $uid; model: $(docker exec "$container" ls /usr/share/linfer/models/tiny | tr '\n' ' ')"
if [[ -n $cuda_home ]]; then
  # The CUDA build, started without a GPU (no --gpus here): it must say why it serves on the CPU,
  # and refuse --device cuda by name.
  device_line=$(docker logs "$container" 2>&1 | grep -m1 'device:' || true)
  log "container: $device_line"
  grep -q 'no usable GPU' <<<"$device_line" || fail "the CUDA image does not report its device choice"
  ldd_cuda=$(docker exec "$container" ldd /usr/local/bin/linfer | grep -cE 'libcudart|libcublasLt' || true)
  ((ldd_cuda == 2)) || fail "the CUDA image's linfer does not load cudart and cuBLASLt"
  if refused=$(docker exec "$container" linfer info --device cuda 2>&1); then
    fail "linfer info --device cuda succeeded without a GPU: $refused"
  fi
  log "info --device cuda: $(tail -1 <<<"$refused" | head -c 200)"
fi

# ---- 5. Prometheus scraping the container --------------------------------------------------------
pdir=$work/prometheus
rm -rf "$pdir"
mkdir -p "$pdir"
cat >"$pdir/prometheus.yml" <<EOF
global: {scrape_interval: 1s, evaluation_interval: 1s}
scrape_configs:
  - job_name: linfer
    static_configs: [{targets: ['127.0.0.1:$http_port']}]
EOF
promtool check config "$pdir/prometheus.yml" >/dev/null
/usr/bin/prometheus --config.file="$pdir/prometheus.yml" --storage.tsdb.path="$pdir/data" \
  --web.listen-address="127.0.0.1:$prom_port" >"$pdir/prometheus.log" 2>&1 &
prom_pid=$!
wait_for 30 "prometheus" curl -fsS "http://127.0.0.1:$prom_port/-/ready" ||
  { tail "$pdir/prometheus.log"; fail "prometheus not ready"; }
# query EXPR: the first sample's value, or empty.
query() {
  curl -fsS "http://127.0.0.1:$prom_port/api/v1/query" --data-urlencode "query=$1" |
    /usr/bin/python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else "")'
}
scraped() { [[ -n $(query 'linfer_generation_tokens_total') ]]; }
wait_for 30 "first scrape of the container" scraped || fail "prometheus never scraped linfer"
before=$(query 'sum(linfer_generation_tokens_total)')
log "linfer_generation_tokens_total before: $before"

# ---- 6. a streamed generation through the container with the CLI client -------------------------
gen_out=$work/generate.out
t_gen0=$(elapsed)
if ! timeout 60 "$linfer" generate --server "127.0.0.1:$grpc_port" --tokens 1,2,3 --max_tokens 16 \
  >"$gen_out" 2>&1; then
  cat "$gen_out"
  fail "linfer generate through the container failed"
fi
log "generate: $(head -c 300 "$gen_out" | tr '\n' ' ')"
[[ -s $gen_out ]] || fail "linfer generate printed nothing"
metrics=$(curl -fsS "http://127.0.0.1:$http_port/metrics")
# The exposition must parse; promtool's naming lints (e.g. a gauge ending in _total) are reported,
# not failed on: the metric names are the server's API.
echo "$metrics" | promtool check metrics >"$work/check_metrics.log" 2>&1 || true
if grep -q 'error while linting' "$work/check_metrics.log"; then
  cat "$work/check_metrics.log"
  fail "promtool cannot parse /metrics"
fi
sed 's/^/    promtool lint (not fatal): /' "$work/check_metrics.log"
grep -q '^linfer_generation_tokens_total' <<<"$metrics" || fail "/metrics lacks linfer_generation_tokens_total"
moved() {
  local v
  v=$(query 'sum(linfer_generation_tokens_total)')
  [[ -n $v ]] && flt "${before:-0}" "$v"
}
wait_for 30 "prometheus sees linfer_generation_tokens_total move" moved ||
  fail "linfer_generation_tokens_total stayed at $(query 'sum(linfer_generation_tokens_total)')"
after=$(query 'sum(linfer_generation_tokens_total)')
log "linfer_generation_tokens_total after: $after (prompt tokens $(query 'sum(linfer_prompt_tokens_total)'))"
t_prom=$(elapsed)

# ---- HEALTHCHECK from the Dockerfile (interval shortened to 1 s by the run flags) ----------------
healthy() { [[ $(docker inspect -f '{{.State.Health.Status}}' "$container") == healthy ]]; }
wait_for 30 "HEALTHCHECK healthy" healthy ||
  fail "health status $(docker inspect -f '{{json .State.Health}}' "$container")"

# ---- 7. docker stop: drain and exit 0 in under 2 s ----------------------------------------------
s0=$(date +%s.%N)
docker stop -t 10 "$container" >/dev/null
stop_s=$(awk -v a="$(date +%s.%N)" -v b="$s0" 'BEGIN { printf "%.2f", a - b }')
code=$(docker inspect -f '{{.State.ExitCode}}' "$container")
logs=$(docker logs "$container" 2>&1)
log "docker stop took ${stop_s}s, exit code $code"
echo "$logs" | tail -4 | sed 's/^/    container: /'
[[ $code == 0 ]] || fail "container exit code $code (want 0)"
flt "$stop_s" 2 || fail "docker stop took ${stop_s}s (want < 2 s)"
grep -q 'drain' <<<"$logs" || fail "no drain message in the container log"

log "timings: daemon ${t_daemon}s, base image $(fsub "$t_base" "$t_daemon")s, build stage" \
  "$(fsub "$t_build_stage" "$t_base")s, runtime stage $(fsub "$t_build" "$t_build_stage")s," \
  "serving after $(fsub "$t_up" "$t_build")s, generate+scrape $(fsub "$t_prom" "$t_gen0")s," \
  "stop ${stop_s}s"
log "PASS"
