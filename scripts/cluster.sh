#!/usr/bin/env bash
# The demo job on a cluster: a private PostgreSQL, three coordinator replicas on it and HAProxy
# in front, all on 127.0.0.1 (scripts/lib/cluster.sh), with the fleet and the admin calls going
# through HAProxy; logs and configs in var/cluster/. Installs what is missing first.
#
#   scripts/cluster.sh [--replicas N] [build-dir]   (and demo.sh's other flags and variables)
set -euo pipefail
cd "$(dirname "$0")/.."
replicas=3
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --replicas) replicas=${2:?--replicas needs a number}; shift 2 ;;
    -h|--help) sed -n 2,7p "$0"; exit 0 ;;
    *) args+=("$1"); shift ;;
  esac
done
bash scripts/install-deps.sh
exec bash scripts/demo.sh --cluster "$replicas" "${args[@]}"
