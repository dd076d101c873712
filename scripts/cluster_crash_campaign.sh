#!/usr/bin/env bash
# Crash campaign on a cluster: SIGKILLs coordinator replicas again and again, at random moments
# and at named steps of a round (crash points), and crashes PostgreSQL, under a training fleet
# that knows only HAProxy's address, and checks that nothing committed is lost and no round
# breaks its rules (docs/scaling.md).
#
#   scripts/cluster_crash_campaign.sh [--kills N] [--pg-restarts M] [--crash-points LIST]
#                                     [--seed S] [--clients C] [--target A] [--build-dir DIR]
#
#   --kills N            random replica kills (default 30)
#   --pg-restarts M      PostgreSQL crashes (pg_ctl restart -m immediate), spread over the kills
#                        (default 2)
#   --crash-points LIST  crash points to stop the replicas at, in turn, after the random kills:
#                        comma-separated names, or `all` for admitted, folded, admission_closed,
#                        partial_written, merged, committed, stage_shared, relayed (default none)
#   --seed S             seed of the random choices (default 1)
#   --clients C          SDK clients in the fleet (default 14)
#   --target A           the test accuracy a committed model of the plain job must reach at the
#                        end (default 0.8)
#   --build-dir DIR      where fedcase-coordinator and fedcase-client were built (default build)
#
# Three replicas on a private PostgreSQL behind HAProxy (scripts/lib/cluster.sh) run three MLP
# jobs at once, 3 updates a round each, no round cap in reach: `plain` (synchronous, 1.3x
# over-commitment), `secure` (synchronous with secure aggregation, threshold 2, 5 s stages, no
# over-commitment) and `async` (FedBuff: 4 clients training at once, a version every 3
# updates), all served by one fleet (a client holds one task at a time, across jobs).
#
# Random kills, N times: wait 0.5-3 s (seeded); SIGKILL a replica: every other kill the owner of
# a job (the jobs in turn) just as its open round (or buffer) has K - 1 updates (aimed at a
# commit), else one picked at random; restart it on its port, a killed owner only once every
# job has opened a round since the kill (a restarted replica keeps its name, and would acquire
# its own leases again at once). M times between kills, PostgreSQL crashes and restarts.
#
# Crash points (common/crash_point.h), each in turn after the random kills: SIGKILL the three
# replicas and start them again with FEDCASE_CRASH_AT=<point>; wait (60 s at most) for the
# first of them to pass the point and kill itself; restart it without the variable at once, as
# every other armed replica that dies so later; once every job has opened a round since the
# first death (60 s at most), check. A point that does not fire is a failed check: with three
# armed replicas every point is reachable (the owner's steps on the owners, the others on a
# non-owner; stage_shared and relayed on the secure job's rounds). After the last point the
# replicas still armed are restarted without it.
#
# After every kill and crash point, on the database, for each job: every committed model seen
# before is there with the same checksum, the latest version never goes back, no round (or
# buffer) admitted more than K updates or a client twice, each round's `admitted` counter
# equals its updates, and at most one round of the job is open; every replica not armed is
# running. At the end: every job committed a round since the first kill (or crash point), a
# model of the plain job reaches the target accuracy, and every model the plain job committed
# is evaluated. Reports, per job, the time from each kill to its next round opening (p50, p99;
# a kill of the job's owner waits for its lease to run out), and, per crash point, which
# replica died and how long until every job had opened a round again.
#
# Prints one line per kill and per crash point and, last, a JSON summary (per job and per crash
# point; wall_seconds counts the cluster's start too). Exits 1 when a check failed, keeping the
# temp dir with the logs.
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."

all_points=(admitted folded admission_closed partial_written merged committed stage_shared relayed)
kills=30
pg_restarts=2
crash_points=""
seed=1
clients=14
target=0.8
build=build
while [ $# -gt 0 ]; do
  case "$1" in
    --kills) kills=${2:?--kills needs a number}; shift 2 ;;
    --pg-restarts) pg_restarts=${2:?--pg-restarts needs a number}; shift 2 ;;
    --crash-points) crash_points=${2?--crash-points needs a list}; shift 2 ;;
    --seed) seed=${2:?--seed needs a number}; shift 2 ;;
    --clients) clients=${2:?--clients needs a number}; shift 2 ;;
    --target) target=${2:?--target needs an accuracy}; shift 2 ;;
    --build-dir) build=${2:?--build-dir needs a directory}; shift 2 ;;
    -h|--help) sed -n 2,20p "$0"; exit 0 ;;
    *) echo "cluster_crash_campaign: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done
points=()
if [ "$crash_points" = all ]; then
  points=("${all_points[@]}")
elif [ -n "$crash_points" ]; then
  IFS=, read -ra points <<< "$crash_points"
  for point in "${points[@]}"; do
    [[ " ${all_points[*]} " == *" $point "* ]] ||
      { echo "cluster_crash_campaign: unknown crash point '$point' (${all_points[*]})" >&2; exit 2; }
  done
fi
for tool in curl jq psql haproxy; do
  command -v "$tool" > /dev/null || { echo "cluster_crash_campaign: $tool is missing (scripts/install-deps.sh)" >&2; exit 2; }
done
source scripts/lib/cluster.sh
unset FEDCASE_CRASH_AT  # only the replicas the crash points arm carry it
# Bash reports each child a signal ended when it notices ("line N: PID Killed ..."): the
# campaign reports its kills and crash points itself. The filter ends once nothing writes to it
# (cleanup gives the script its stderr back first).
exec 3>&2 2> >(grep --line-buffered -v -E '^.+: line [0-9]+: +[0-9]+ Killed ' >&3)

start=$(date +%s.%N)
dir=$(mktemp -d "${TMPDIR:-/tmp}/fedcase-cluster-crash.XXXXXX")
pids=()
failed=0
passed=0
cleanup() {
  local status=$?
  exec 2>&3
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait "${pids[@]}" 2>/dev/null || true
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
now() { date +%s.%N; }

admin_token=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
enrollment_token=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
export FEDCASE_ADMIN_TOKEN=$admin_token FEDCASE_ENROLLMENT_TOKEN=$enrollment_token
replicas=3
per_round=3
cluster_start "$dir" "$replicas" "$build" > "$dir/cluster.log"
base="http://127.0.0.1:$cluster_port"
admin() { curl -sS --fail-with-body --max-time 30 -H "Authorization: Bearer $admin_token" "$@"; }

# The three jobs: the same MLP, K updates a round. The secure one invites exactly K (every
# invitee takes part in its stages; threshold 2 needs at least 3 invitees); the async one keeps
# 4 clients training, so that the three together need at most 4 + 3 + 4 = 11 clients at once.
jobs=(plain secure async)
declare -A job_id=() job_config=()
mlp='{"model": "mlp", "seed": 1, "rounds": 1000000, "clients_per_round": '"$per_round"',
      "selection": {"policy": "random", "overcommit": 1.3},
      "training": {"sample_budget": 300, "batch_size": 32, "lr": 0.05,
                   "deadline": {"mode": "fixed", "seconds": 10}}}'
job_config[plain]=$(jq -c '.name = "cluster-crash-campaign-plain"' <<< "$mlp")
job_config[secure]=$(jq -c '.name = "cluster-crash-campaign-secure" | .selection.overcommit = 1.0
  | .secure_aggregation = {threshold: 2, clip: 10, stage_seconds: 5}' <<< "$mlp")
job_config[async]=$(jq -c '.name = "cluster-crash-campaign-async" | .mode = "async"
  | .async = {concurrency: 4}' <<< "$mlp")
for j in "${jobs[@]}"; do
  job_id[$j]=$(admin -X POST -H 'Content-Type: application/json' --data "${job_config[$j]}" \
    "$base/v1/admin/jobs" | jq -r .job_id)
done
nice -n 10 "$build/client_sdk/fedcase-client" --port "$cluster_port" --clients "$clients" \
  --alpha 0.5 --concurrent-training 1 > "$dir/fleet.log" 2>&1 &
fleet_pid=$!
pids+=("$fleet_pid")
echo "cluster_crash_campaign: jobs $(for j in "${jobs[@]}"; do printf '%s %s, ' "$j" "${job_id[$j]}"; done)through $base, $replicas replicas, $clients clients, $kills kills, $pg_restarts PostgreSQL crashes, crash points: ${points[*]:-none}, seed $seed, logs in $dir"

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
committed_models() {  # committed_models JOB
  query "SELECT m.version || ' ' || m.checksum FROM models m JOIN rounds r
         ON r.job_id = m.job_id AND r.idx = m.version
         WHERE m.job_id = ${job_id[$1]} AND r.state = 'committed'"
}
owner() { query "SELECT holder FROM job_leases WHERE job_id = ${job_id[$1]}"; }  # owner JOB
open_round() { query "SELECT idx FROM rounds WHERE job_id = ${job_id[$1]} AND state = 'open'" | tail -1; }
# next_open JOB T: seconds from T (epoch seconds) to the first round of JOB opened after it, or
# nothing.
next_open() {
  query "SELECT min(opened_at) - $2 FROM rounds WHERE job_id = ${job_id[$1]} AND opened_at > $2"
}
owned_by() {  # owned_by REPLICA: the jobs whose lease names replica-REPLICA, space-separated
  local j out=""
  for j in "${jobs[@]}"; do [ "$(owner "$j" || true)" != "replica-$1" ] || out+="$j "; done
  printf '%s' "${out% }"
}

# The checks after a kill or a crash point (`when` names it), per job, on the database.
declare -A last_version=() committed_at_first_kill=()
for j in "${jobs[@]}"; do : > "$dir/kept.$j"; : > "$dir/reopen.$j"; : > "$dir/reopen_owner.$j"; last_version[$j]=0; done
declare -A armed=()  # replicas started with FEDCASE_CRASH_AT, which may die by themselves
check_jobs() {  # check_jobs WHEN
  local when=$1 j id lost version over miscounted open i
  for j in "${jobs[@]}"; do
    id=${job_id[$j]}
    committed_models "$j" > "$dir/now.$j" || true
    lost=$(comm -23 "$dir/kept.$j" "$dir/now.$j" | tr '\n' ' ')
    check "$j job: committed models missing or changed $when: $lost" [ -z "$lost" ]
    sort -u "$dir/kept.$j" "$dir/now.$j" > "$dir/kept.new" && mv "$dir/kept.new" "$dir/kept.$j"
    [ -n "${committed_at_first_kill[$j]:-}" ] || committed_at_first_kill[$j]=$(wc -l < "$dir/kept.$j")
    version=$(cut -d' ' -f1 "$dir/kept.$j" | sort -n | tail -1)
    check "$j job: the latest version went back from ${last_version[$j]} to ${version:-0} $when" \
      [ "${version:-0}" -ge "${last_version[$j]}" ]
    last_version[$j]=${version:-0}
    over=$(query "SELECT round_idx FROM updates WHERE job_id = $id GROUP BY round_idx
                  HAVING count(*) > $per_round OR count(*) <> count(DISTINCT client_id)" | tr '\n' ' ')
    check "$j job: rounds with more than K updates or a client twice $when: $over" [ -z "$over" ]
    # One statement, so one snapshot: admission counts and stores an update in one statement,
    # and a withdrawal undoes both in one transaction.
    miscounted=$(query "SELECT r.idx || ':' || r.admitted || '/' || coalesce(u.n, 0) FROM rounds r
                        LEFT JOIN (SELECT round_idx, count(*) AS n FROM updates WHERE job_id = $id
                                   GROUP BY round_idx) u ON u.round_idx = r.idx
                        WHERE r.job_id = $id AND r.admitted <> coalesce(u.n, 0)" | tr '\n' ' ')
    check "$j job: rounds whose admitted counter differs from their updates (round:counter/updates) $when: $miscounted" \
      [ -z "$miscounted" ]
    open=$(query "SELECT count(*) FROM rounds WHERE job_id = $id AND state = 'open'")
    check "$j job: $open rounds open at once $when" [ "${open:-0}" -le 1 ]
  done
  # A replica that died unbidden is reported, and started again so that the campaign goes on.
  for i in $(seq "$replicas"); do
    [ "${armed[$i]:-0}" = 0 ] || continue
    if ! kill -0 "${cluster_replica_pids[i]}" 2>/dev/null; then
      local status=0
      wait "${cluster_replica_pids[i]}" 2>/dev/null || status=$?
      check "replica $i died by itself (status $status) $when" false
      check "replica $i did not restart $when" cluster_start_replica "$i"
    fi
  done
  check "the fleet is no longer running $when" kill -0 "$fleet_pid"
}

# Waits (at most `limit` seconds) until every job opened a round after T, writing "JOB SECONDS"
# lines to FILE for those that did; meanwhile `on_wait` runs every pass.
on_wait=:
wait_for_rounds() {  # wait_for_rounds T LIMIT FILE
  local t=$1 limit=$2 file=$3 j s pending
  local until_t
  until_t=$(awk -v a="$(now)" -v l="$limit" 'BEGIN { printf "%.3f", a + l }')
  : > "$file"
  pending=("${jobs[@]}")
  while [ "${#pending[@]}" -gt 0 ]; do
    local left=()
    for j in "${pending[@]}"; do
      s=$(next_open "$j" "$t" || true)
      if [ -n "$s" ]; then echo "$j $s" >> "$file"; else left+=("$j"); fi
    done
    pending=("${left[@]}")
    [ "${#pending[@]}" -gt 0 ] || break
    $on_wait
    awk -v a="$(now)" -v b="$until_t" 'BEGIN { exit !(a < b) }' || break
    sleep 0.1
  done
}
seconds_of() { awk -v j="$1" '$1 == j { printf "%.2f", $2 }' "$2"; }  # seconds_of JOB FILE
slowest() { awk 'BEGIN { m = -1 } $2 > m { m = $2 } END { if (m >= 0) printf "%.2f", m }' "$1"; }

RANDOM=$seed
pg_every=$(( kills / (pg_restarts + 1) ))
pg_done=0
aimed_no=0
for kill_no in $(seq "$kills"); do
  sleep "$(awk -v r="$RANDOM" 'BEGIN { printf "%.2f", 0.5 + 2.5 * r / 32767 }')"
  if [ "$pg_done" -lt "$pg_restarts" ] && [ "$pg_every" -gt 0 ] && [ $((kill_no % pg_every)) -eq 0 ]; then
    cluster_pg_restart_immediate
    pg_done=$((pg_done + 1))
    echo "PostgreSQL crashed and restarted ($pg_done of $pg_restarts)"
  fi
  aimed=""
  if [ $((kill_no % 2)) -eq 0 ]; then
    # Aimed at a commit of the jobs in turn: the job's owner, once its open round (buffer)
    # holds K - 1 updates (at most 20 s).
    aimed=${jobs[aimed_no % ${#jobs[@]}]}
    aimed_no=$((aimed_no + 1))
    holder=$(owner "$aimed" || true)
    if [ -n "$holder" ]; then
      for _ in $(seq 200); do
        round=$(open_round "$aimed" || true)
        [ -n "$round" ] || { sleep 0.1; continue; }
        n=$(query "SELECT count(*) FROM updates WHERE job_id = ${job_id[$aimed]} AND round_idx = $round" || echo 0)
        [ "$n" -ge $((per_round - 1)) ] && break
        sleep 0.1
      done
      victim=${holder#replica-}
    else
      aimed=""
    fi
  fi
  [ -n "$aimed" ] || victim=$((1 + RANDOM % replicas))
  held=$(owned_by "$victim")
  killed_at=$(now)
  kill -9 "${cluster_replica_pids[victim]}" 2>/dev/null || true
  wait "${cluster_replica_pids[victim]}" 2>/dev/null || true
  [ -n "$held" ] ||
    check "replica $victim did not restart after kill $kill_no" cluster_start_replica "$victim"

  # Each job's next round opened after the kill (30 s at most), and when.
  wait_for_rounds "$killed_at" 30 "$dir/reopen_now"
  for j in "${jobs[@]}"; do
    s=$(seconds_of "$j" "$dir/reopen_now")
    [ -n "$s" ] || continue
    echo "$s" >> "$dir/reopen.$j"
    [[ " $held " != *" $j "* ]] || echo "$s" >> "$dir/reopen_owner.$j"
  done
  [ -z "$held" ] ||
    check "replica $victim did not restart after kill $kill_no" cluster_start_replica "$victim"

  check_jobs "after kill $kill_no"
  printf 'kill %d/%d: replica %d%s (owner of %s), next round open %s s later, %s models committed, checks %d passed %d failed\n' \
    "$kill_no" "$kills" "$victim" "${aimed:+, aimed at a commit of $aimed}" "${held:-no job}" \
    "$(for j in "${jobs[@]}"; do printf '%s %s, ' "$j" "$(s=$(seconds_of "$j" "$dir/reopen_now"); echo "${s:-nan}")"; done | sed 's/, $//')" \
    "$(for j in "${jobs[@]}"; do printf '%s %d (v%s), ' "$j" "$(wc -l < "$dir/kept.$j")" "${last_version[$j]}"; done | sed 's/, $//')" \
    "$passed" "$failed"
done

# Crash points. `reap_armed` restarts, without the variable, every armed replica that died, and
# notes it in $dir/deaths ("REPLICA SECONDS-SINCE-ARMED STATUS JOBS-IT-OWNED").
reap_armed() {
  local i status
  for i in $(seq "$replicas"); do
    [ "${armed[$i]:-0}" = 1 ] || continue
    kill -0 "${cluster_replica_pids[i]}" 2>/dev/null && continue
    status=0
    wait "${cluster_replica_pids[i]}" 2>/dev/null || status=$?
    armed[$i]=0
    printf '%s %s %s %s\n' "$i" "$(awk -v a="$armed_at" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }')" \
      "$status" "$(owned_by "$i" | tr ' ' ,)" >> "$dir/deaths"
    check "replica $i, armed with $point, died with status $status, not by SIGKILL" [ "$status" = 137 ]
    check "replica $i did not restart after crash point $point" cluster_start_replica "$i"
  done
}
: > "$dir/points.jsonl"
for point in "${points[@]}"; do
  for i in $(seq "$replicas"); do kill -9 "${cluster_replica_pids[i]}" 2>/dev/null || true; done
  for i in $(seq "$replicas"); do wait "${cluster_replica_pids[i]}" 2>/dev/null || true; done
  for i in $(seq "$replicas"); do
    armed[$i]=1
    check "replica $i did not start armed with $point" cluster_start_replica "$i" "FEDCASE_CRASH_AT=$point"
  done
  armed_at=$(now)
  : > "$dir/deaths"
  # The first death, 60 s at most.
  for _ in $(seq 600); do
    reap_armed
    [ ! -s "$dir/deaths" ] || break
    sleep 0.1
  done
  check "crash point $point never fired within 60 s" [ -s "$dir/deaths" ]
  : > "$dir/progress"
  if [ -s "$dir/deaths" ]; then
    fired_at=$(awk -v a="$armed_at" -v s="$(head -1 "$dir/deaths" | cut -d' ' -f2)" 'BEGIN { printf "%.3f", a + s }')
    on_wait=reap_armed
    wait_for_rounds "$fired_at" 60 "$dir/progress"
    on_wait=:
    reap_armed
    for j in "${jobs[@]}"; do
      check "$j job opened no round within 60 s of crash point $point" \
        [ -n "$(seconds_of "$j" "$dir/progress")" ]
    done
  fi
  check_jobs "after crash point $point"
  first=$(head -1 "$dir/deaths")
  progress=$(slowest "$dir/progress")
  printf 'crash point %s: %s; every job opened a round %s s later (%s), checks %d passed %d failed\n' \
    "$point" \
    "$(if [ -n "$first" ]; then
         awk '{ printf "%sreplica %s died %.2f s after arming%s", (NR > 1 ? ", then " : ""), $1, $2,
                ($4 != "" ? " (owner of " $4 ")" : "") }' "$dir/deaths"
       else echo "no replica died within 60 s"; fi)" \
    "${progress:-nan}" \
    "$(for j in "${jobs[@]}"; do printf '%s %s, ' "$j" "$(s=$(seconds_of "$j" "$dir/progress"); echo "${s:-nan}")"; done | sed 's/, $//')" \
    "$passed" "$failed"
  jq -cn --arg point "$point" --rawfile deaths "$dir/deaths" --rawfile progress "$dir/progress" \
    --argjson slowest "${progress:-null}" \
    '($deaths | split("\n") | map(select(. != "") | split(" ")
       | {replica: (.[0] | tonumber), after_arming_s: (.[1] | tonumber), status: (.[2] | tonumber),
          owner_of: (.[3] // "" | split(",") | map(select(. != "")))})) as $d
     | {point: $point, fired: ($d | length > 0), replica: ($d[0].replica // null), deaths: $d,
        every_job_progressed_s: $slowest,
        progress_s: ($progress | split("\n") | map(select(. != "") | split(" ")
                     | {(.[0]): (.[1] | tonumber * 100 | round / 100)}) | add // {})}' \
    >> "$dir/points.jsonl"
done
# The replicas still armed are restarted without it: the jobs train on without crash points.
for i in $(seq "$replicas"); do
  [ "${armed[$i]:-0}" = 1 ] || continue
  kill -9 "${cluster_replica_pids[i]}" 2>/dev/null || true
  wait "${cluster_replica_pids[i]}" 2>/dev/null || true
  armed[$i]=0
  check "replica $i did not restart after the crash points" cluster_start_replica "$i"
done

# The jobs train on until the plain one reaches the target accuracy and every job committed a
# round since the first kill (10 minutes at most), then stop; every model the plain job
# committed gets evaluated.
if [ "$kills" -eq 0 ] && [ "${#points[@]}" -eq 0 ]; then check_jobs "before the end"; fi
best_of() {  # best_of JOB: the best test accuracy of its committed models
  query "SELECT coalesce(max((metrics::jsonb->>'test_accuracy')::float), 0) FROM rounds
         WHERE job_id = ${job_id[$1]} AND state = 'committed'" || echo 0
}
reached() { awk -v a="$1" -v t="$target" 'BEGIN { exit !(a >= t) }'; }
committed_since_first_kill() {  # committed_since_first_kill JOB
  [ "$(committed_models "$1" | wc -l)" -gt "${committed_at_first_kill[$1]}" ]
}
best=0
for _ in $(seq 1200); do
  best=$(best_of plain)
  done_jobs=0
  for j in "${jobs[@]}"; do committed_since_first_kill "$j" && done_jobs=$((done_jobs + 1)); done
  reached "$best" && [ "$done_jobs" -eq "${#jobs[@]}" ] && break
  sleep 0.5
done
check "no committed model of the plain job reached accuracy $target (best $best)" reached "$best"
for j in "${jobs[@]}"; do admin -X POST "$base/v1/admin/jobs/${job_id[$j]}/cancel" > /dev/null || true; done
for j in "${jobs[@]}"; do
  committed_models "$j" > "$dir/now.$j" || true
  check "$j job: no round committed since the first kill (${committed_at_first_kill[$j]} then, $(wc -l < "$dir/now.$j") now)" \
    [ "$(wc -l < "$dir/now.$j")" -gt "${committed_at_first_kill[$j]}" ]
done
# Evaluations lag behind when rounds commit faster than the owner evaluates a model (each
# owner taking over queues those its predecessor left), so they get as long as they keep
# going: the check fails once 30 s pass without one, or after 5 minutes.
unevaluated=""
waited_since_progress=0
for _ in $(seq 1000); do
  previous=$unevaluated
  unevaluated=$(query "SELECT idx FROM rounds WHERE job_id = ${job_id[plain]} AND state = 'committed'
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
check "plain job: committed models never evaluated: $unevaluated" [ -z "$unevaluated" ]
for j in "${jobs[@]}"; do
  lost=$(comm -23 "$dir/kept.$j" "$dir/now.$j" | tr '\n' ' ')
  check "$j job: committed models missing or changed at the end: $lost" [ -z "$lost" ]
done

best=$(best_of plain)  # with the evaluations since
wall=$(awk -v a="$start" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')
percentile() {  # percentile Q FILE: nearest rank
  sort -g "$2" | awk -v q="$1" '{ v[NR] = $1 } END { if (NR == 0) { print "null"; exit }
    i = int(q * (NR - 1) + 0.5) + 1; printf "%.2f", v[i] }'
}
: > "$dir/jobs.jsonl"
for j in "${jobs[@]}"; do
  jq -cn --arg job "$j" --argjson id "${job_id[$j]}" \
    --argjson committed "$(wc -l < "$dir/now.$j")" \
    --argjson at_first_kill "${committed_at_first_kill[$j]}" \
    --argjson latest "$(cut -d' ' -f1 "$dir/now.$j" | sort -n | tail -1 | grep . || echo 0)" \
    --argjson best "$(best_of "$j")" \
    --argjson p50 "$(percentile 0.5 "$dir/reopen.$j")" --argjson p99 "$(percentile 0.99 "$dir/reopen.$j")" \
    --argjson measured "$(wc -l < "$dir/reopen.$j")" \
    --argjson owner_p50 "$(percentile 0.5 "$dir/reopen_owner.$j")" \
    --argjson owner_p99 "$(percentile 0.99 "$dir/reopen_owner.$j")" \
    --argjson owner_measured "$(wc -l < "$dir/reopen_owner.$j")" \
    '{($job): {job_id: $id, committed_models: $committed, committed_at_first_kill: $at_first_kill,
               latest_version: $latest, best_accuracy: $best,
               kill_to_next_round_open_s: {p50: $p50, p99: $p99, kills_measured: $measured},
               owner_kill_to_next_round_open_s: {p50: $owner_p50, p99: $owner_p99,
                                                 kills_measured: $owner_measured}}}' >> "$dir/jobs.jsonl"
done
jq -cn --argjson kills "$kills" --argjson pg "$pg_done" --argjson seed "$seed" \
  --argjson clients "$clients" --argjson best "$best" --argjson target "$target" \
  --slurpfile jobs "$dir/jobs.jsonl" --slurpfile points "$dir/points.jsonl" \
  --argjson passed "$passed" --argjson failed "$failed" --argjson wall "$wall" --arg dir "$dir" \
  '{bench: "cluster_crash_campaign", kills: $kills, postgres_crashes: $pg, seed: $seed,
    clients: $clients, target_accuracy: $target, best_accuracy: $best, jobs: ($jobs | add),
    crash_points: $points, crash_points_fired: ($points | map(select(.fired)) | length),
    checks_passed: $passed, checks_failed: $failed, wall_seconds: $wall,
    kept_dir: (if $failed > 0 then $dir else null end)}'
[ "$failed" -eq 0 ]
