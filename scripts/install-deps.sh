#!/usr/bin/env bash
# Installs every Debian package fedcase needs to build, test and run its demo (Chart.js is built
# into the dashboard; Chromium and promtool, from prometheus, run in the tests; python3-torch
# exports the SDK example's TorchScript model in the tests and runs the Python SDK's, which pip
# installs with setuptools and wheel; clang checks the locks with -Wthread-safety; lintian and
# shellcheck check the Debian packages; libpq-dev is the PostgreSQL store's client library, and
# postgresql the server the tests start for it; haproxy the load balancer in front of a
# cluster's replicas, in scripts/cluster.sh and the tests); with --fuzz, also libFuzzer and the sanitizer
# runtimes, and llvm-symbolizer for their reports (`make fuzz`); with --flower, also what
# Flower's SecAgg+ workflow needs to run from its source beside secagg_bench
# (bench/flower_secaggplus.py: Flower's Python dependencies as Debian packages, and the
# compilers that regenerate its protobuf modules for Debian's protobuf and gRPC).
# Idempotent and quick when everything is already present.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config
  libboost-dev libboost-system-dev nlohmann-json3-dev libsqlite3-dev libpq-dev libssl-dev zlib1g-dev
  libisal-dev
  libtorch-dev doctest-dev dataset-fashion-mnist
  curl jq sqlite3 openssl postgresql haproxy
  libjs-chart.js chromium prometheus python3-torch clang
  python3-numpy python3-pip python3-setuptools python3-wheel lintian shellcheck
)
case "${1:-}" in
  --fuzz) packages+=(libclang-rt-14-dev llvm-14) ;;
  --flower)
    packages+=(python3-numpy python3-cryptography python3-pycryptodome python3-protobuf
      python3-grpcio python3-rich python3-typer python3-tomli python3-tomli-w python3-pathspec
      python3-packaging python3-click python3-sqlalchemy python3-alembic python3-semver
      python3-typing-extensions protobuf-compiler protobuf-compiler-grpc) ;;
esac

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${missing[*]}"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
