#!/usr/bin/env bash
# The SDK example end to end, as a PyTorch user would run it: installs the client SDK into a
# temporary prefix, builds examples/sdk_app out of tree against it (find_package), exports the
# example's TorchScript model and data files with Debian's python3-torch, starts a coordinator
# on 127.0.0.1 port 0, creates the job with `fedcase jobs create --model`, and runs three app
# processes until the job finishes (the example's job stops at 95% federated accuracy) or has
# committed 8 rounds. Passes when the job finished on its target after at least two committed
# rounds and the federated evaluation's accuracy of the last round is above the first's.
#   scripts/example_test.sh --build-dir build
set -euo pipefail
cd "$(dirname "$0")/.."
build=build
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build=$2; shift 2 ;;
    *) echo "usage: $0 [--build-dir DIR]" >&2; exit 2 ;;
  esac
done
build=$(cd "$build" && pwd)
dir=$(mktemp -d /tmp/fedcase-example-XXXXXX)
pids=()
cleanup() {
  local status=$?
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  if [ "$status" -eq 0 ]; then rm -rf "$dir"; else echo "example_test: logs kept in $dir" >&2; fi
}
trap cleanup EXIT

echo "example_test: installing the SDK into $dir/prefix"
cmake --install "$build" --prefix "$dir/prefix" > "$dir/install.log"
echo "example_test: building examples/sdk_app against it"
cmake -S examples/sdk_app -B "$dir/app" -G Ninja -DCMAKE_PREFIX_PATH="$dir/prefix" \
  -DCMAKE_BUILD_TYPE=Release > "$dir/configure.log" 2>&1 || { cat "$dir/configure.log"; exit 1; }
cmake --build "$dir/app" > "$dir/build.log" 2>&1 || { cat "$dir/build.log"; exit 1; }

echo "example_test: exporting the model and the devices' data files"
/usr/bin/python3 examples/sdk_app/export_model.py --model "$dir/model.pt" --data "$dir/data" \
  --devices 3

admin_token=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
enrollment_token=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
jq --arg db "$dir/fedcase.db" --arg pf "$dir/port" --arg admin "$admin_token" \
  --arg enroll "$enrollment_token" \
  '.port = 0 | .port_file = $pf | .database = $db | .admin_token = $admin |
   .enrollment_token = $enroll | .eval_samples = 1000' \
  configs/coordinator.json > "$dir/coordinator.json"
"$build/server/fedcase-coordinator" --config "$dir/coordinator.json" > "$dir/coordinator.log" 2>&1 &
pids+=($!)
for _ in $(seq 600); do [ -s "$dir/port" ] && break; sleep 0.05; done
[ -s "$dir/port" ] || { echo "example_test: the coordinator did not start" >&2; exit 1; }
port=$(cat "$dir/port")
export FEDCASE_URL=http://127.0.0.1:$port FEDCASE_TOKEN=$admin_token

job=$("$build/cli/fedcase" jobs create examples/sdk_app/job.json --model "$dir/model.pt" --json |
      jq -r .job_id)
echo "example_test: job $job created on port $port"
for i in 0 1 2; do
  "$dir/app/sdk_app" --port "$port" --token "$enrollment_token" --name "device-$i" \
    --data "$dir/data/device-$i/train" --held-out "$dir/data/device-$i/held-out" \
    --state-dir "$dir/state-$i" > "$dir/app-$i.log" 2>&1 &
  pids+=($!)
done

committed=0
state=running
for _ in $(seq 1200); do
  "$build/cli/fedcase" jobs show "$job" --json > "$dir/job.json"
  committed=$(jq '[.rounds[] | select(.state == "committed")] | length' "$dir/job.json")
  state=$(jq -r .state "$dir/job.json")
  [ "$state" != running ] && break
  sleep 0.1
done
jq '.rounds' "$dir/job.json" > "$dir/rounds.json"
jq -r '.[] | select(.state == "committed") |
       "round \(.round): federated accuracy \(.metrics.federated_evaluation.metrics.accuracy // "none") over \(.metrics.federated_evaluation.samples // 0) held-out samples"' \
  "$dir/rounds.json"
first=$(jq '[.[] | select(.state == "committed")][0].metrics.federated_evaluation.metrics.accuracy' "$dir/rounds.json")
last=$(jq '[.[] | select(.state == "committed")][-1].metrics.federated_evaluation.metrics.accuracy' "$dir/rounds.json")
reached=$(jq '.result != null' "$dir/job.json")
if [ "$state" != finished ] || [ "$reached" != true ] || [ "$committed" -lt 2 ]; then
  echo "example_test: the job is $state after $committed committed rounds (target reached: $reached)" >&2
  exit 1
fi
if ! jq -n --argjson a "$first" --argjson b "$last" '$b > $a' | grep -q true; then
  echo "example_test: the federated accuracy did not improve ($first -> $last)" >&2
  exit 1
fi
echo "example_test: passed (federated accuracy $first -> $last)"
