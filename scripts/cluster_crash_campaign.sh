#!/usr/bin/env bash
# Crash campaign on a cluster: SIGKILLs coordinator replicas again and again, and crashes
# PostgreSQL, under a training fleet that knows only HAProxy's address, and checks that nothing
# committed is lost and no round breaks its rules (docs/scaling.md).
#
#   scripts/cluster_crash_campaign.sh [--kills N] [--pg-restarts M] [--seed S] [--clients C]
#                                     [--target A] [--build-dir DIR]
#
#   --kills N        replica kills (default 30)
#   --pg-restarts M  PostgreSQL crashes (pg_ctl restart -m immediate), spread over the kills
#                    (default 2)
#   --seed S         seed of the random choices (default 1)
#   --clients C      SDK clients in the fleet (default 8)
#   --target A       the test accuracy a committed model must reach at the end (default 0.8)
#   --build-dir DIR  where fedcase-coordinator and fedcase-client were built (default build)
#
# Three replicas on a private PostgreSQL behind HAProxy (scripts/lib/cluster.sh) run an MLP job
# (3 updates a round, no round cap in reach). N times: wait 0.5-3 s (seeded); SIGKILL a
# replica: every other kill the job's owner just as its open round has K - 1 updates (aimed at
# a commit), else one picked at random; restart it on its port, a killed owner only once
# another replica has opened the job's next round (a restarted replica keeps its name, and
# would acquire its own leases again at once). M times between kills, PostgreSQL crashes and
# restarts. After every kill, on the database: every committed model seen before is there
# with the same checksum, the latest version never goes back, no round admitted more than K
# updates or a client twice, and at most one round of the job is open. At the end: a model
# committed since the first kill reaches the target accuracy, and every committed model is
# evaluated. Reports the time from each kill to the next round opening (p50, p99; a kill of the
# owner waits for its lease to run out).
#
# Prints one line per kill and, last, a JSON summary. Exits 1 when a check failed, keeping the
# temp dir with the logs.
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."

kills=30
pg_restarts=2
seed=1
clients=8
target=0.8
build=build
while [ $# -gt 0 ]; do
  case "$1" in
    --kills) kills=${2:?--kills needs a number}; shift 2 ;;
    --pg-restarts) pg_restarts=${2:?--pg-restarts needs a number}; shift 2 ;;
    --seed) seed=${2:?--seed needs a number}; shift 2 ;;
    --clients) clients=${2:?--clients needs a number}; shift 2 ;;
    --target) target=${2:?--target needs an accuracy}; shift 2 ;;
    --build-dir) build=${2:?--build-dir needs a directory}; shift 2 ;;
    -h|--help) sed -n 2,15p "$0"; exit 0 ;;
    *) echo "cluster_crash_campaign: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done
for tool in curl jq psql haproxy; do
  command -v "$tool" > /dev/null || { echo "cluster_crash_campaign: $tool is missing (scripts/install-deps.sh)" >&2; exit 2; }
done
source scripts/lib/cluster.sh

dir=$(mktemp -d "${TMPDIR:-/tmp}/fedcase-cluster-crash.XXXXXX")
pids=()
failed=0
passed=0
cleanup() {
  local status=$?
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  cluster_stop
  if [ "$status" -eq 0 ]; then
    rm -rf "$dir"
  elif [ "$failed" -eq 0 ]; then
    echo "cluster_crash_campaign: logs kept in $dir" >&2
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

check() {  # check <description> <command...>: counts the outcome, reports a failure
  if "${@:2}"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "cluster_crash_campaign: FAILED: $1" >&2
  fi
}

admin_token=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
enrollment_token=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
export FEDCASE_ADMIN_TOKEN=$admin_token FEDCASE_ENROLLMENT_TOKEN=$enrollment_token
replicas=3
per_round=3
cluster_start "$dir" "$replicas" "$build" > "$dir/cluster.log"
base="http://127.0.0.1:$cluster_port"
admin() { curl -sS --fail-with-body --max-time 30 -H "Authorization: Bearer $admin_token" "$@"; }
job=$(admin -X POST -H 'Content-Type: application/json' --data '{
  "name": "cluster-crash-campaign", "model": "mlp", "seed": 1, "rounds": 1000000,
  "clients_per_round": '"$per_round"',
  "selection": {"policy": "random", "overcommit": 1.3},
  "training": {"sample_budget": 300, "batch_size": 32, "lr": 0.05,
               "deadline": {"mode": "fixed", "seconds": 10}}}' \
  "$base/v1/admin/jobs" | jq -r .job_id)
nice -n 10 "$build/client_sdk/fedcase-client" --port "$cluster_port" --clients "$clients" \
  --alpha 0.5 --concurrent-training 1 > "$dir/fleet.log" 2>&1 &
fleet_pid=$!
pids+=("$fleet_pid")
echo "cluster_crash_campaign: job $job through $base, $replicas replicas, $clients clients, $kills kills, $pg_restarts PostgreSQL crashes, seed $seed, logs in $dir"

# The database's view, as sorted lines. A query that fails (PostgreSQL restarting) gives none,
# and is retried before it counts.
query() {
  local out
  for _ in $(seq 50); do
    if out=$(cluster_psql "$1" 2> /dev/null); then printf '%s\n' "$out" | sed '/^$/d' | sort; return 0; fi
    sleep 0.2
  done
  return 1
}
committed_models() {
  query "SELECT m.version || ' ' || m.checksum FROM models m JOIN rounds r
         ON r.job_id = m.job_id AND r.idx = m.version
         WHERE m.job_id = $job AND r.state = 'committed'"
}
owner() { query "SELECT holder FROM job_leases WHERE job_id = $job"; }
open_round() { query "SELECT idx FROM rounds WHERE job_id = $job AND state = 'open'" | tail -1; }

: > "$dir/kept"
: > "$dir/reopen"
: > "$dir/reopen_owner"
RANDOM=$seed
pg_every=$(( kills / (pg_restarts + 1) ))
pg_done=0
last_version=0
start=$(date +%s.%N)
for kill_no in $(seq "$kills"); do
  sleep "$(awk -v r="$RANDOM" 'BEGIN { printf "%.2f", 0.5 + 2.5 * r / 32767 }')"
  if [ "$pg_done" -lt "$pg_restarts" ] && [ "$pg_every" -gt 0 ] && [ $((kill_no % pg_every)) -eq 0 ]; then
    cluster_pg_restart_immediate
    pg_done=$((pg_done + 1))
    echo "PostgreSQL crashed and restarted ($pg_done of $pg_restarts)"
  fi
  holder=$(owner || true)
  aimed=0
  if [ $((kill_no % 2)) -eq 0 ] && [ -n "$holder" ]; then
    # Aimed at a commit: the owner, once its open round holds K - 1 updates (at most 20 s).
    aimed=1
    for _ in $(seq 200); do
      round=$(open_round || true)
      [ -n "$round" ] || { sleep 0.1; continue; }
      n=$(query "SELECT count(*) FROM updates WHERE job_id = $job AND round_idx = $round AND state = 'accepted'" || echo 0)
      [ "$n" -ge $((per_round - 1)) ] && break
      sleep 0.1
    done
    victim=${holder#replica-}
  else
    victim=$((1 + RANDOM % replicas))
  fi
  killed_at=$(date +%s.%N)
  kill -9 "${cluster_replica_pids[victim]}" 2>/dev/null || true
  wait "${cluster_replica_pids[victim]}" 2>/dev/null || true
  [ "replica-$victim" = "$holder" ] ||
    check "replica $victim did not restart after kill $kill_no" cluster_start_replica "$victim"

  # The next round opened after the kill (30 s at most), and when.
  reopen=""
  for _ in $(seq 300); do
    reopen=$(query "SELECT min(opened_at) - $killed_at FROM rounds WHERE job_id = $job AND opened_at > $killed_at" || true)
    [ -n "$reopen" ] && break
    sleep 0.1
  done
  if [ -n "$reopen" ]; then
    echo "$reopen" >> "$dir/reopen"
    [ "replica-$victim" != "$holder" ] || echo "$reopen" >> "$dir/reopen_owner"
  fi
  [ "replica-$victim" != "$holder" ] ||
    check "replica $victim did not restart after kill $kill_no" cluster_start_replica "$victim"

  committed_models > "$dir/now" || true
  lost=$(comm -23 "$dir/kept" "$dir/now" | tr '\n' ' ')
  check "committed models missing or changed after kill $kill_no: $lost" [ -z "$lost" ]
  sort -u "$dir/kept" "$dir/now" > "$dir/kept.new" && mv "$dir/kept.new" "$dir/kept"
  [ "$kill_no" -gt 1 ] || committed_at_first_kill=$(wc -l < "$dir/kept")
  version=$(cut -d' ' -f1 "$dir/kept" | sort -n | tail -1)
  check "the latest version went back from $last_version to ${version:-0} after kill $kill_no" \
    [ "${version:-0}" -ge "$last_version" ]
  last_version=${version:-0}
  over=$(query "SELECT round_idx FROM updates WHERE job_id = $job AND state = 'accepted'
                GROUP BY round_idx HAVING count(*) > $per_round OR count(*) <> count(DISTINCT client_id)" | tr '\n' ' ')
  check "rounds with more than K updates or a client twice after kill $kill_no: $over" [ -z "$over" ]
  open=$(query "SELECT count(*) FROM rounds WHERE job_id = $job AND state = 'open'")
  check "$open rounds open at once after kill $kill_no" [ "${open:-0}" -le 1 ]
  check "the fleet is no longer running after kill $kill_no" kill -0 "$fleet_pid"
  printf 'kill %d/%d: replica %d%s (owner %s), next round open %s s later, %d models committed (v%s), checks %d passed %d failed\n' \
    "$kill_no" "$kills" "$victim" "$([ "$aimed" = 1 ] && echo ", aimed at a commit")" "${holder:-none}" \
    "$(printf '%.2f' "${reopen:-nan}")" "$(wc -l < "$dir/kept")" "$last_version" "$passed" "$failed"
done

# The job trains on to the target accuracy (10 minutes at most), then stops; every committed
# model gets evaluated.
best=0
for _ in $(seq 1200); do
  best=$(query "SELECT coalesce(max((metrics::jsonb->>'test_accuracy')::float), 0) FROM rounds
                WHERE job_id = $job AND state = 'committed'" || echo 0)
  awk -v a="$best" -v t="$target" 'BEGIN { exit !(a >= t) }' && break
  sleep 0.5
done
check "no committed model reached accuracy $target (best $best)" \
  awk -v a="$best" -v t="$target" 'BEGIN { exit !(a >= t) }'
admin -X POST "$base/v1/admin/jobs/$job/cancel" > /dev/null || true
committed_models > "$dir/now" || true
check "no round committed since the first kill ($committed_at_first_kill then, $(wc -l < "$dir/now") now)" \
  [ "$(wc -l < "$dir/now")" -gt "$committed_at_first_kill" ]
# Evaluations lag behind when rounds commit faster than the owner evaluates a model (each
# owner taking over queues those its predecessor left), so they get as long as they keep
# going: the check fails once 30 s pass without one, or after 5 minutes.
unevaluated=""
waited_since_progress=0
for _ in $(seq 1000); do
  previous=$unevaluated
  unevaluated=$(query "SELECT idx FROM rounds WHERE job_id = $job AND state = 'committed'
                       AND metrics::jsonb->>'test_accuracy' IS NULL" | tr '\n' ' ')
  [ -z "$unevaluated" ] && break
  if [ "$unevaluated" = "$previous" ]; then
    waited_since_progress=$((waited_since_progress + 1))
    [ "$waited_since_progress" -ge 100 ] && break
  else
    waited_since_progress=0
  fi
  sleep 0.3
done
check "committed models never evaluated: $unevaluated" [ -z "$unevaluated" ]
lost=$(comm -23 "$dir/kept" "$dir/now" | tr '\n' ' ')
check "committed models missing or changed at the end: $lost" [ -z "$lost" ]

wall=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
percentile() {  # percentile Q FILE: nearest rank
  sort -g "$2" | awk -v q="$1" '{ v[NR] = $1 } END { if (NR == 0) { print "null"; exit }
    i = int(q * (NR - 1) + 0.5) + 1; printf "%.2f", v[i] }'
}
jq -cn --argjson kills "$kills" --argjson pg "$pg_done" --argjson seed "$seed" \
  --argjson committed "$(wc -l < "$dir/now")" --argjson best "$best" \
  --argjson p50 "$(percentile 0.5 "$dir/reopen")" --argjson p99 "$(percentile 0.99 "$dir/reopen")" \
  --argjson measured "$(wc -l < "$dir/reopen")" \
  --argjson owner_p50 "$(percentile 0.5 "$dir/reopen_owner")" \
  --argjson owner_p99 "$(percentile 0.99 "$dir/reopen_owner")" \
  --argjson owner_measured "$(wc -l < "$dir/reopen_owner")" \
  --argjson passed "$passed" --argjson failed "$failed" --argjson wall "$wall" --arg dir "$dir" \
  '{bench: "cluster_crash_campaign", kills: $kills, postgres_crashes: $pg, seed: $seed,
    committed_models: $committed, best_accuracy: $best,
    kill_to_next_round_open_s: {p50: $p50, p99: $p99, kills_measured: $measured},
    owner_kill_to_next_round_open_s: {p50: $owner_p50, p99: $owner_p99,
                                      kills_measured: $owner_measured},
    checks_passed: $passed, checks_failed: $failed, wall_seconds: $wall,
    kept_dir: (if $failed > 0 then $dir else null end)}'
[ "$failed" -eq 0 ]
