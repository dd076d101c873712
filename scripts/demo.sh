#!/usr/bin/env bash
# The main job: a coordinator on 127.0.0.1 with a fresh SQLite file under var/demo/, the
# Fashion-MNIST job of configs/jobs/fmnist-demo.json, and a fleet of 100 non-IID clients.
# Prints one line per committed round and, last, a JSON summary.
#   scripts/demo.sh [build-dir]      (env: DEMO_CLIENTS, DEMO_ALPHA, DEMO_MAX_SECONDS)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
clients=${DEMO_CLIENTS:-100}
alpha=${DEMO_ALPHA:-0.5}
max_seconds=${DEMO_MAX_SECONDS:-600}
job_config=configs/jobs/fmnist-demo.json

dir=var/demo
rm -rf "$dir"
mkdir -p "$dir"
admin_token=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
enrollment_token=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
export FEDCASE_ADMIN_TOKEN=$admin_token FEDCASE_ENROLLMENT_TOKEN=$enrollment_token
jq --arg db "$dir/fedcase.db" --arg pf "$dir/port" \
  '.port = 0 | .port_file = $pf | .database = $db' configs/coordinator.json > "$dir/coordinator.json"

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

"$build/server/fedcase-coordinator" --config "$dir/coordinator.json" > "$dir/coordinator.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [ -s "$dir/port" ] && break; sleep 0.1; done
[ -s "$dir/port" ] || { echo "coordinator did not start; see $dir/coordinator.log" >&2; cat "$dir/coordinator.log" >&2; exit 1; }
base="http://127.0.0.1:$(cat "$dir/port")"
admin() { curl -sS --fail-with-body -H "Authorization: Bearer $admin_token" "$@"; }

start=$(date +%s.%N)
job=$(admin -X POST --data @"$job_config" "$base/v1/admin/jobs" | jq -r .job_id)
target=$(jq -r .target_accuracy "$job_config")
echo "demo: job $job ($(jq -r .name "$job_config")), $clients clients, Dirichlet alpha $alpha, target accuracy $target"
echo "demo: coordinator $base, logs in $dir/"

# The fleet stands in for remote devices: on this one machine it runs at a lower priority so
# the coordinator (polls, aggregation, evaluation) stays as responsive as it would be alone.
nice -n 10 "$build/client_sdk/fedcase-client" --port "$(cat "$dir/port")" --clients "$clients" --alpha "$alpha" \
  > "$dir/fleet.log" 2>&1 &
pids+=($!)

printf '%6s %9s %8s %10s %13s\n' round accuracy loss seconds participants
shown=0
state=running
while :; do
  detail=$(admin "$base/v1/admin/jobs/$job")
  state=$(jq -r .state <<<"$detail")
  # A round is shown once its model is evaluated (evaluation runs beside the next round).
  jq -r --argjson shown "$shown" '.rounds[]
      | select(.state == "committed" and .round > $shown and .metrics.test_accuracy != null)
      | [.round, .metrics.test_accuracy, .metrics.test_loss, .metrics.round_seconds, .metrics.updates]
      | @tsv' <<<"$detail" |
    while IFS=$'\t' read -r round acc loss secs n; do
      printf '%6d %9.4f %8.4f %10.1f %13d\n' "$round" "$acc" "$loss" "$secs" "$n"
    done
  shown=$(jq '[.rounds[] | select(.state == "committed" and .metrics.test_accuracy != null)
      | .round] | max // 0' <<<"$detail")
  pending=$(jq '[.rounds[] | select(.state == "committed" and .metrics.test_accuracy == null)]
      | length' <<<"$detail")
  [ "$state" = running ] || [ "$pending" -gt 0 ] || break
  if awk -v now="$(date +%s.%N)" -v start="$start" -v max="$max_seconds" \
       'BEGIN { exit !(now - start > max) }'; then
    echo "demo: stopping after $max_seconds s" >&2
    admin -X POST "$base/v1/admin/jobs/$job/cancel" > /dev/null
    break
  fi
  kill -0 "${pids[0]}" 2>/dev/null || { echo "coordinator exited; see $dir/coordinator.log" >&2; exit 1; }
  sleep 1
done

wall=$(awk -v now="$(date +%s.%N)" -v start="$start" 'BEGIN { print now - start }')
jq -c --argjson wall "$wall" --argjson target "$target" '
  ([.rounds[] | select(.state == "committed" and .metrics.test_accuracy != null)] | last) as $last
  | {rounds: ($last.round // 0), test_accuracy: ($last.metrics.test_accuracy // 0),
     wall_seconds: ($wall * 10 | round / 10), target_reached: (($last.metrics.test_accuracy // 0) >= $target)}' \
  <<<"$(admin "$base/v1/admin/jobs/$job")" | tee "$dir/summary.json"
jq -e .target_reached "$dir/summary.json" > /dev/null
