#!/usr/bin/env bash
# The main job: a coordinator on 127.0.0.1 with a fresh SQLite file under var/demo/, the
# Fashion-MNIST job of configs/jobs/fmnist-demo.json, and a fleet of 100 non-IID clients.
# Prints one line per committed round and, last, a JSON summary of the model the job finished
# with (the first committed model that reached the target accuracy).
#
#   scripts/demo.sh [--runs N] [--secure-aggregation] [--compression q8|top_k] [--cluster N]
#                   [--picture FILE] [build-dir]
#                   (env: DEMO_CLIENTS, DEMO_ALPHA, DEMO_MAX_SECONDS, DEMO_DIR)
#
# With --cluster N the job runs on N coordinator replicas on a private PostgreSQL behind
# HAProxy (scripts/lib/cluster.sh, docs/scaling.md), and the fleet and the admin calls go
# through HAProxy; scripts/cluster.sh runs it with 3 replicas.
#
# With --secure-aggregation the job masks its updates (SecAgg+: its `secure_aggregation`
# section, each client clipping its update to the L2 norm 100 that max_update_norm checked
# in the clear) and the fleet takes part only in securely aggregated jobs
# (fedcase-client --secure-aggregation).
#
# With --compression q8 the clients send 8-bit updates (blocks of 256 values), with
# --compression top_k the 1% of each update's values largest in magnitude, the rest carried to
# their next update (the job's `compression`; docs/aggregation.md, "Compressed updates").
#
# With --picture FILE, once the job ended, headless Chromium signs in to the dashboard and
# writes a PNG of the job's page to FILE (build-dir/tests/integration/dashboard_picture; the
# README's picture is docs/images/dashboard-job.png).
#
# With --runs N the job runs N times (each on a fresh database); each run prints its summary
# with where a round's seconds went, and the last line is one JSON object with the medians over
# the runs (the demo benchmark). Exit status 0 when every run reached the target.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=0
picture=""
secure=0
compression=""
replicas=0
build=build
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=${2:?--runs needs a number}; shift 2 ;;
    --secure-aggregation) secure=1; shift ;;
    --cluster) replicas=${2:?--cluster needs a number of replicas}; shift 2 ;;
    --picture) picture=${2:?--picture needs a file}; shift 2 ;;
    --compression) compression=${2:?--compression needs q8 or top_k}; shift 2 ;;
    -h|--help) sed -n 2,30p "$0"; exit 0 ;;
    *) build=$1; shift ;;
  esac
done
clients=${DEMO_CLIENTS:-100}
alpha=${DEMO_ALPHA:-0.5}
max_seconds=${DEMO_MAX_SECONDS:-600}
job_config=configs/jobs/fmnist-demo.json
dir=${DEMO_DIR:-var/demo}
[ "$replicas" -eq 0 ] || dir=${DEMO_DIR:-var/cluster}

source scripts/lib/cluster.sh
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  pids=()
  cluster_stop
}
trap cleanup EXIT

# Starts one coordinator on a fresh SQLite file in $dir; sets `port` and `server_pid`.
start_coordinator() {
  jq --arg db "$dir/fedcase.db" --arg pf "$dir/port" \
    '.port = 0 | .port_file = $pf | .database = $db' configs/coordinator.json > "$dir/coordinator.json"
  "$build/server/fedcase-coordinator" --config "$dir/coordinator.json" > "$dir/coordinator.log" 2>&1 &
  server_pid=$!
  pids+=("$server_pid")
  for _ in $(seq 100); do [ -s "$dir/port" ] && break; sleep 0.1; done
  [ -s "$dir/port" ] || { echo "coordinator did not start; see $dir/coordinator.log" >&2; cat "$dir/coordinator.log" >&2; exit 1; }
  port=$(cat "$dir/port")
}

# One run of the job; writes $dir/summary.json and $dir/detail.json.
run_once() {
  trap cleanup EXIT  # also when the run is a subshell, which does not inherit the trap
  rm -rf "$dir"
  mkdir -p "$dir"
  local admin_token enrollment_token
  admin_token=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
  enrollment_token=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
  export FEDCASE_ADMIN_TOKEN=$admin_token FEDCASE_ENROLLMENT_TOKEN=$enrollment_token
  local port server_pid fleet_pid
  if [ "$replicas" -gt 0 ]; then
    cluster_start "$dir" "$replicas" "$build"
    port=$cluster_port
    server_pid=$cluster_proxy_pid  # a replica may die: the others carry on
  else
    start_coordinator
  fi
  local base="http://127.0.0.1:$port"
  admin() { curl -sS --fail-with-body -H "Authorization: Bearer $admin_token" "$@"; }

  local job target fleet_flags=()
  if [ "$secure" = 1 ]; then
    jq 'del(.max_update_norm) | .secure_aggregation = {clip: 100}' "$job_config" > "$dir/job.json"
    fleet_flags=(--secure-aggregation)
  else
    cp "$job_config" "$dir/job.json"
  fi
  if [ -n "$compression" ]; then
    jq --arg kind "$compression" '.compression = {kind: $kind}' "$dir/job.json" > "$dir/job.tmp"
    mv "$dir/job.tmp" "$dir/job.json"
  fi
  job=$(admin -X POST --data @"$dir/job.json" "$base/v1/admin/jobs" | jq -r .job_id)
  target=$(jq -r .target_accuracy "$job_config")
  echo "demo: job $job ($(jq -r .name "$job_config")), $clients clients, Dirichlet alpha $alpha, target accuracy $target$([ "$secure" = 1 ] && echo ", secure aggregation")$([ -n "$compression" ] && echo ", $compression updates")"
  echo "demo: coordinator$([ "$replicas" -gt 0 ] && echo "s behind HAProxy at") $base, logs in $dir/"

  # The fleet stands in for remote devices: on this one machine it runs at a lower priority so
  # the coordinator (polls, aggregation, evaluation) stays as responsive as it would be alone,
  # and at most one client per core trains at a time, so each trains at a device's full speed.
  nice -n 10 "$build/client_sdk/fedcase-client" --port "$port" --clients "$clients" --alpha "$alpha" \
    --concurrent-training "$(nproc)" "${fleet_flags[@]}" > "$dir/fleet.log" 2>&1 &
  fleet_pid=$!
  pids+=("$fleet_pid")

  printf '%6s %9s %8s %10s %8s %9s\n' round accuracy loss seconds updates samples
  local shown=0 state detail pending start
  start=$(date +%s.%N)
  while :; do
    detail=$(admin "$base/v1/admin/jobs/$job")
    state=$(jq -r .state <<<"$detail")
    # A round is shown once its model is evaluated (evaluation runs beside the next round).
    jq -r --argjson shown "$shown" '.rounds[]
        | select(.state == "committed" and .round > $shown and .metrics.test_accuracy != null)
        | [.round, .metrics.test_accuracy, .metrics.test_loss, .metrics.round_seconds,
           .metrics.updates, .metrics.samples]
        | @tsv' <<<"$detail" |
      while IFS=$'\t' read -r round acc loss secs n samples; do
        printf '%6d %9.4f %8.4f %10.1f %8d %9d\n' "$round" "$acc" "$loss" "$secs" "$n" "$samples"
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
    kill -0 "$server_pid" 2>/dev/null || { echo "the coordinator exited; see $dir/" >&2; tail -n 20 "$dir"/*.log >&2; exit 1; }
    kill -0 "$fleet_pid" 2>/dev/null || { echo "the fleet exited; see $dir/fleet.log" >&2; cat "$dir/fleet.log" >&2; exit 1; }
    sleep 0.5
  done
  detail=$(admin "$base/v1/admin/jobs/$job")
  if [ -n "$picture" ]; then
    "$build/tests/integration/dashboard_picture" "$base/dashboard/" "$admin_token" "$job" "$picture"
  fi
  cleanup
  echo "$detail" > "$dir/detail.json"
  # The result is the first committed model that reached the target; without one, the last
  # evaluated model. Wall seconds run from the job's creation to the moment the target was
  # known (the result's commit plus its evaluation).
  jq -c '
    def mean(f): (map(f) | add // 0) / ([length, 1] | max);
    def rounded(x): x * 1000 | round / 1000;
    . as $job
    | ([$job.rounds[] | select(.state == "committed" and .metrics.test_accuracy != null)]
       | last) as $last
    | (if $job.result then ([$job.rounds[] | select(.round == $job.result.round)] | first)
       else $last end) as $r
    | [$job.rounds[] | select(.state == "committed" and .round <= ($r.round // 0))] as $used
    | ($used | map(.metrics | .timing + {commit_s, eval_s})) as $timing
    | {rounds: ($r.round // 0), test_accuracy: ($r.metrics.test_accuracy // 0),
       wall_seconds: ((($r.closed_at // $job.created_at) + ($r.metrics.commit_s // 0)
                       + ($r.metrics.eval_s // 0) - $job.created_at) * 10 | round / 10),
       target_reached: ($job.result != null),
       samples_per_round: ($used | mean(.metrics.samples) | round),
       round_seconds: rounded($used | mean(.metrics.round_seconds)),
       breakdown_s: (if ($timing | length) == 0 then {} else
                       reduce ($timing[0] | keys[]) as $k ({};
                         .[$k] = rounded($timing | mean(.[$k] // 0))) end)}' \
    "$dir/detail.json" > "$dir/summary.json"
}

if [ "$runs" -eq 0 ]; then
  run_once
  jq -c '{rounds, test_accuracy, wall_seconds, target_reached}' "$dir/summary.json"
  jq -e .target_reached "$dir/summary.json" > /dev/null
  exit
fi

summaries=()
for i in $(seq "$runs"); do
  echo "== demo run $i of $runs"
  # In a subshell, so that `set -e` holds inside the run and any failure stops the benchmark.
  ( run_once ) > "$dir.run.log" 2>&1 || { cat "$dir.run.log"; echo "demo run $i failed" >&2; exit 1; }
  [ -s "$dir/summary.json" ] || { cat "$dir.run.log"; echo "demo run $i left no summary" >&2; exit 1; }
  summaries+=("$(cat "$dir/summary.json")")
  echo "run $i: $(cat "$dir/summary.json")"
done
printf '%s\n' "${summaries[@]}" | jq -cs --argjson clients "$clients" --argjson secure "$secure" \
  --arg compression "$compression" '
  def median: sort | if length % 2 == 1 then .[length / 2 | floor]
                     else (.[length / 2 - 1] + .[length / 2]) / 2 end;
  {bench: "demo", runs: length, clients: $clients, secure_aggregation: ($secure == 1),
   compression: (if $compression == "" then null else $compression end),
   rounds_to_target: [.[].rounds], wall_seconds_to_target: [.[].wall_seconds],
   median_rounds: ([.[].rounds] | median), median_wall_seconds: ([.[].wall_seconds] | median),
   median_samples_per_round: ([.[].samples_per_round] | median),
   median_round_seconds: ([.[].round_seconds] | median),
   median_breakdown_s: (. as $all | reduce (.[0].breakdown_s | keys[]) as $key ({};
     .[$key] = ([$all[].breakdown_s[$key] // 0] | median))),
   all_reached: all(.[]; .target_reached),
   targets: {median_rounds: 10, median_wall_seconds: 45}}
  | .targets_met = (.median_rounds <= 10 and .median_wall_seconds <= 45 and .all_reached)'
printf '%s\n' "${summaries[@]}" | jq -se 'all(.[]; .target_reached)' > /dev/null
