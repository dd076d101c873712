#!/usr/bin/env bash
# Crash campaign: SIGKILLs the coordinator again and again under a training fleet and checks
# that nothing committed is ever lost.
#
#   scripts/crash_campaign.sh [--kills N] [--seed S] [--clients C] [--build-dir DIR]
#
#   --kills N        coordinator kills (default 50)
#   --seed S         seed of the random waits between kills (default 1)
#   --clients C      SDK clients in the fleet (default 6)
#   --build-dir DIR  where fedcase-coordinator and fedcase-client were built (default build)
#
# A coordinator on 127.0.0.1 with a fresh SQLite database in a temp dir runs a small MLP job
# (3 updates a round, 4 invited so that a client still in its reconnect backoff does not hold
# the round up; short rounds; no round cap in reach) against one fedcase-client fleet that is
# never restarted. N times: wait 0.2-3 s (seeded), SIGKILL the coordinator, check a
# copy of the database as the crash left it (PRAGMA integrity_check; every round the admin
# API showed as committed and every round committed before an earlier kill is there with the
# same model checksum, and its model row agrees), restart the coordinator on the same
# database and port, and check the admin API: every round committed before the kill is
# committed with the same checksum, the model version and the committed round count have not
# gone backwards, and each newly committed model downloads with its checksum. The port is
# fixed for the whole campaign (the clients keep retrying the address they know) and lies
# below the kernel's ephemeral range, so that no client connection retried while the
# coordinator is down can take it. At the end, the job must have committed rounds after the
# last restart and more in all than at the first kill, the clients having reconnected by
# themselves.
#
# Prints one line per kill and, last, a JSON summary. Exits 1 when a check failed, keeping the
# temp dir with the logs and the databases (the summary's kept_dir); removes it otherwise.
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."

kills=50
seed=1
clients=6
build=build
while [ $# -gt 0 ]; do
  case "$1" in
    --kills) kills=${2:?--kills needs a number}; shift 2 ;;
    --seed) seed=${2:?--seed needs a number}; shift 2 ;;
    --clients) clients=${2:?--clients needs a number}; shift 2 ;;
    --build-dir) build=${2:?--build-dir needs a directory}; shift 2 ;;
    -h|--help) sed -n 2,10p "$0"; exit 0 ;;
    *) echo "crash_campaign: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done
for tool in curl jq sqlite3 sha256sum; do
  command -v "$tool" > /dev/null || { echo "crash_campaign: $tool is missing (scripts/install-deps.sh)" >&2; exit 2; }
done

dir=$(mktemp -d "${TMPDIR:-/tmp}/fedcase-crash.XXXXXX")
coordinator_pid=""
fleet_pid=""
failed=0
passed=0
cleanup() {
  local status=$?
  for p in $coordinator_pid $fleet_pid; do kill "$p" 2>/dev/null || true; done
  for p in $coordinator_pid $fleet_pid; do wait "$p" 2>/dev/null || true; done
  if [ "$status" -eq 0 ]; then
    rm -rf "$dir"
  elif [ "$failed" -eq 0 ]; then  # stopped before the summary, which names the kept dir
    echo "crash_campaign: logs and database kept in $dir" >&2
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The binaries under test are copied, so that a rebuild during the campaign changes nothing.
cp "$build/server/fedcase-coordinator" "$build/client_sdk/fedcase-client" "$dir/"
admin_token=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
enrollment_token=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
export FEDCASE_ADMIN_TOKEN=$admin_token FEDCASE_ENROLLMENT_TOKEN=$enrollment_token
db=$dir/fedcase.db

check() {  # check <description> <command...>: counts the outcome, reports a failure
  if "${@:2}"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "crash_campaign: FAILED: $1" >&2
  fi
}

# Starts the coordinator on $port; returns 1 when it exits without listening.
start_coordinator() {
  jq --arg db "$db" --arg pf "$dir/port" --argjson port "$port" \
    '.port = $port | .port_file = $pf | .database = $db | .eval_samples = 1000 |
     .pace = {max_period_s: 2, reconnect_window_s: 2}' \
    configs/coordinator.json > "$dir/coordinator.json"
  rm -f "$dir/port"
  "$dir/fedcase-coordinator" --config "$dir/coordinator.json" >> "$dir/coordinator.log" 2>&1 &
  coordinator_pid=$!
  for _ in $(seq 600); do
    [ -s "$dir/port" ] && [ "$(cat "$dir/port")" = "$port" ] && return 0
    kill -0 "$coordinator_pid" 2>/dev/null || break
    sleep 0.05
  done
  kill -9 "$coordinator_pid" 2>/dev/null || true
  wait "$coordinator_pid" 2>/dev/null || true
  coordinator_pid=""
  return 1
}

# A free port below the ephemeral range: a few random candidates until one listens.
ephemeral_low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range)
for _ in $(seq 20); do
  port=$((10000 + $(od -An -N2 -tu2 /dev/urandom | tr -d ' ') % (ephemeral_low - 10000)))
  start_coordinator && break
  grep -q "cannot listen" "$dir/coordinator.log" || break
done
[ -n "$coordinator_pid" ] || { echo "crash_campaign: the coordinator did not start; see $dir/coordinator.log" >&2; exit 1; }
base="http://127.0.0.1:$port"
admin() { curl -sS --fail-with-body --max-time 30 -H "Authorization: Bearer $admin_token" "$@"; }
job_detail() { admin "$base/v1/admin/jobs/$job" > "$1.part" && mv "$1.part" "$1"; }

job=$(admin -X POST -H 'Content-Type: application/json' --data '{
  "name": "crash-campaign", "model": "mlp", "seed": 1, "rounds": 1000000, "clients_per_round": 3,
  "selection": {"policy": "random", "overcommit": 1.3},
  "training": {"sample_budget": 300, "batch_size": 32, "lr": 0.05,
               "deadline": {"mode": "fixed", "seconds": 10}},
  "aggregation": {"rule": "fedavg"}, "server_optimizer": {"name": "fedavg", "lr": 1.0}}' \
  "$base/v1/admin/jobs" | jq -r .job_id)
# The fleet runs at a lower priority and trains one client at a time, so that the coordinator
# (and a parallel build or test) keeps a core.
nice -n 10 "$dir/fedcase-client" --port "$port" --clients "$clients" --alpha 0.5 \
  --concurrent-training 1 > "$dir/fleet.log" 2>&1 &
fleet_pid=$!
echo "crash_campaign: job $job on $base, $clients clients, $kills kills, seed $seed, logs in $dir"

# Committed rounds as sorted "round <tab> model version <tab> checksum" lines.
api_rounds() {
  jq -r '.rounds[] | select(.state == "committed")
         | [.round, .metrics.model_version, .metrics.checksum] | @tsv' "$1" | sort
}
db_rounds() {  # a store that cannot be read shows no rounds, which the checks report
  { sqlite3 -separator $'\t' "$1" "SELECT idx, json_extract(metrics, '\$.model_version'),
      json_extract(metrics, '\$.checksum') FROM rounds WHERE job_id = $job AND state = 'committed'" ||
    true; } | sort
}
missing() { comm -23 "$1" "$2" | cut -f1 | tr '\n' ' '; }  # rounds of $1 not in $2 as they are
count() { cut -f1 "$1" | sort -u | wc -l; }
max_version() { cut -f2 "$1" | sort -n | tail -1; }

# Committed rounds that the store and the coordinator must keep: grows after each kill.
: > "$dir/kept"
: > "$dir/verified"  # committed rounds whose model was downloaded and checked
committed_at_first_kill=0
restarts_with_progress=0
committed_at_last_kill=-1
start=$(date +%s.%N)
awk -v seed="$seed" -v n="$kills" 'BEGIN { srand(seed); for (i = 0; i < n; i++) printf "%.2f\n", 0.2 + 2.8 * rand() }' \
  > "$dir/waits"
kill_no=0
while read -r wait_s <&3; do
  kill_no=$((kill_no + 1))
  sleep "$wait_s"
  if ! job_detail "$dir/before.json"; then
    check "the admin API did not return job $job before kill $kill_no" false
    break
  fi
  api_rounds "$dir/before.json" > "$dir/shown"
  kill -9 "$coordinator_pid" 2>/dev/null || true
  wait "$coordinator_pid" 2>/dev/null || true
  coordinator_pid=""

  # The database as the crash left it, on a copy (the coordinator's own recovery comes later).
  rm -f "$dir/crash.db" "$dir/crash.db-wal" "$dir/crash.db-shm"
  cp "$db" "$dir/crash.db"
  [ ! -e "$db-wal" ] || cp "$db-wal" "$dir/crash.db-wal"
  integrity=$(sqlite3 "$dir/crash.db" 'PRAGMA integrity_check' 2>&1 | tr '\n' ' ')
  check "integrity_check after kill $kill_no: $integrity" [ "$integrity" = "ok " ]
  db_rounds "$dir/crash.db" > "$dir/crashed"
  lost=$(missing "$dir/shown" "$dir/crashed")
  check "rounds shown committed before kill $kill_no, missing or changed in the store: $lost" [ -z "$lost" ]
  lost=$(missing "$dir/kept" "$dir/crashed")
  check "rounds committed before an earlier kill, missing or changed after kill $kill_no: $lost" [ -z "$lost" ]
  mismatched=$(sqlite3 "$dir/crash.db" 2>&1 "SELECT r.idx FROM rounds r LEFT JOIN models m
    ON m.job_id = r.job_id AND m.version = json_extract(r.metrics, '\$.model_version')
    WHERE r.job_id = $job AND r.state = 'committed'
      AND (m.checksum IS NULL OR m.checksum != json_extract(r.metrics, '\$.checksum'))" | tr '\n' ' ' || true)
  check "committed rounds whose model row is missing or differs after kill $kill_no: $mismatched" \
    [ -z "$mismatched" ]
  sort -u "$dir/kept" "$dir/crashed" > "$dir/kept.new" && mv "$dir/kept.new" "$dir/kept"

  restart_start=$(date +%s.%N)
  if ! start_coordinator; then
    check "the coordinator did not restart on port $port after kill $kill_no" false
    break
  fi
  restart_s=$(awk -v a="$restart_start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
  if ! job_detail "$dir/after.json"; then
    check "the admin API did not return job $job after the restart after kill $kill_no" false
    break
  fi
  api_rounds "$dir/after.json" > "$dir/restarted"
  lost=$(missing "$dir/kept" "$dir/restarted")
  check "rounds committed before kill $kill_no, missing or changed after the restart: $lost" [ -z "$lost" ]
  kept_version=$(max_version "$dir/kept")
  version=$(jq .model_version "$dir/after.json")
  check "model version went back from ${kept_version:-0} to $version after kill $kill_no" \
    [ "$version" -ge "${kept_version:-0}" ]
  check "committed rounds went back from $(count "$dir/kept") to $(count "$dir/restarted") after kill $kill_no" \
    [ "$(count "$dir/restarted")" -ge "$(count "$dir/kept")" ]
  bad_downloads=""
  while IFS=$'\t' read -r _ v sum; do
    got=$({ admin "$base/v1/jobs/$job/models/$v" || true; } | sha256sum | cut -d' ' -f1)
    [ "$got" = "$sum" ] || bad_downloads+="$v "
  done < <(comm -23 "$dir/kept" "$dir/verified")
  cp "$dir/kept" "$dir/verified"
  check "models served with a checksum other than the committed one after kill $kill_no: $bad_downloads" \
    [ -z "$bad_downloads" ]
  check "the fleet is no longer running after kill $kill_no" kill -0 "$fleet_pid"

  crashed_count=$(count "$dir/crashed")
  [ "$kill_no" -eq 1 ] && committed_at_first_kill=$crashed_count
  [ "$committed_at_last_kill" -ge 0 ] && [ "$crashed_count" -gt "$committed_at_last_kill" ] &&
    restarts_with_progress=$((restarts_with_progress + 1))
  committed_at_last_kill=$crashed_count
  printf 'kill %d/%d after %s s: %d rounds committed (model v%s), %d shown by the API, restart %s s, checks %d passed %d failed\n' \
    "$kill_no" "$kills" "$wait_s" "$crashed_count" "${kept_version:-0}" "$(count "$dir/shown")" \
    "$restart_s" "$passed" "$failed"
done 3< "$dir/waits"

# The clients reconnect by themselves: rounds commit after the last restart.
final_count=0
rm -f "$dir/final.json"
for _ in $(seq 120); do
  [ -n "$coordinator_pid" ] || break
  job_detail "$dir/final.json" || break
  final_count=$(api_rounds "$dir/final.json" | cut -f1 | sort -u | wc -l)
  [ "$final_count" -gt "$((committed_at_last_kill + 2))" ] && break
  sleep 0.5
done
[ "$final_count" -gt "$committed_at_last_kill" ] && restarts_with_progress=$((restarts_with_progress + 1))
check "no round committed after the last restart ($final_count committed, $committed_at_last_kill at the restart)" \
  [ "$final_count" -gt "$committed_at_last_kill" ]
check "no more rounds at the end ($final_count) than at the first kill ($committed_at_first_kill)" \
  [ "$final_count" -gt "$committed_at_first_kill" ]
integrity=$(sqlite3 -readonly "$db" 'PRAGMA integrity_check' 2>&1 | tr '\n' ' ')
check "integrity_check of the live database at the end: $integrity" [ "$integrity" = "ok " ]

failed_rounds=0
registered=0
if [ -s "$dir/final.json" ]; then
  failed_rounds=$(jq '[.rounds[] | select(.state == "failed")] | length' "$dir/final.json")
  registered=$(admin "$base/v1/admin/clients" | jq '.clients | length')
fi
wall=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
jq -cn --argjson kills "$kill_no" --argjson seed "$seed" --argjson clients "$clients" \
  --argjson committed "$final_count" --argjson at_first "$committed_at_first_kill" \
  --argjson failed_rounds "$failed_rounds" --argjson progress "$restarts_with_progress" \
  --argjson registered "$registered" --argjson passed "$passed" --argjson failed "$failed" \
  --argjson wall "$wall" --arg dir "$dir" \
  '{kills: $kills, seed: $seed, clients: $clients, committed_rounds: $committed,
    committed_at_first_kill: $at_first, failed_rounds: $failed_rounds,
    restarts_followed_by_commits: $progress, registered_clients: $registered,
    checks_passed: $passed, checks_failed: $failed, wall_seconds: $wall,
    kept_dir: (if $failed > 0 then $dir else null end)}'
[ "$failed" -eq 0 ]
