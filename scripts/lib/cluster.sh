# shellcheck shell=bash
# A cluster on 127.0.0.1, sourced by scripts/demo.sh (--cluster N): a private PostgreSQL 15
# server, N fedcase-coordinator replicas on it and HAProxy in front of them (docs/scaling.md).
#
#   cluster_start DIR N BUILD   starts it; the replicas' configs and logs, haproxy.cfg and
#                               haproxy.log go to DIR; sets cluster_port (HAProxy's),
#                               cluster_proxy_pid, cluster_database (the replicas' URL),
#                               cluster_replica_pids[i] and cluster_replica_ports[i] (i = 1..N),
#                               and appends every process to `pids`
#   cluster_start_replica I [NAME=VALUE...]
#                               starts replica I again, on its port (after a kill), with the
#                               variables given added to its environment (e.g.
#                               FEDCASE_CRASH_AT=committed, common/crash_point.h)
#   cluster_psql SQL            runs SQL on the replicas' database, unaligned, no header
#   cluster_pg_restart_immediate  crashes PostgreSQL (pg_ctl restart -m immediate) and restarts it
#   cluster_stop                stops PostgreSQL and removes its data (after the replicas)
#
# PostgreSQL runs as the `postgres` user (runuser when root) with its data in a temp dir that
# user owns, listening on a Unix socket there and on a free 127.0.0.1 port. The replicas use
# 5-second leases; HAProxy (configs/haproxy.cfg) spreads requests round robin over the replicas
# that answer GET /healthz (checked every second, out after 2 failures), with timeouts above the
# coordinators' long polls, 10 s for a request's header and 1000 connections per client address.

pg_bin=$(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V | tail -1)
[ -x "$pg_bin/initdb" ] || pg_bin=
pg_dir=
cluster_dir=
cluster_build=
cluster_replica_pids=()
cluster_replica_ports=()

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

as_postgres() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

cluster_start() {
  local dir=$1 replicas=$2 build=$3 pg_port i
  [ -n "$pg_bin" ] || { echo "cluster: PostgreSQL's server is not installed (scripts/install-deps.sh)" >&2; return 1; }
  command -v haproxy > /dev/null || { echo "cluster: haproxy is not installed (scripts/install-deps.sh)" >&2; return 1; }
  pg_dir=$(mktemp -d /tmp/fedcase-cluster-pg.XXXXXX)
  [ "$(id -u)" != 0 ] || chown postgres "$pg_dir"
  pg_port=$(free_port)
  as_postgres "$pg_bin/initdb" -D "$pg_dir/data" -A trust -U postgres > "$pg_dir/initdb.log" 2>&1 ||
    { cat "$pg_dir/initdb.log" >&2; return 1; }
  as_postgres "$pg_bin/pg_ctl" -D "$pg_dir/data" -l "$pg_dir/server.log" -w \
    -o "-p $pg_port -k $pg_dir -c listen_addresses=127.0.0.1" start > /dev/null ||
    { cat "$pg_dir/server.log" >&2; return 1; }
  as_postgres "$pg_bin/createdb" -h 127.0.0.1 -p "$pg_port" -U postgres fedcase
  cluster_database="postgresql://postgres@127.0.0.1:$pg_port/fedcase"
  echo "cluster: PostgreSQL at $cluster_database (data in $pg_dir)"

  # Each replica on a port of its own for the whole run, so that HAProxy finds it again after
  # a restart.
  cluster_dir=$dir
  cluster_build=$build
  local servers=""
  for i in $(seq "$replicas"); do
    cluster_replica_ports[i]=$(free_port)
    jq --arg db "$cluster_database" --arg pf "$dir/replica-$i.port" --arg id "replica-$i" \
      --argjson port "${cluster_replica_ports[i]}" \
      '.port = $port | .port_file = $pf | .database = $db | .replica_id = $id | .lease_s = 5 |
       .pace = {max_period_s: 2, reconnect_window_s: 2}' \
      configs/coordinator.json > "$dir/replica-$i.json"
    cluster_start_replica "$i" || return 1
    servers+="  server replica-$i 127.0.0.1:${cluster_replica_ports[i]} check"$'\n'
  done

  cluster_port=$(free_port)
  # configs/haproxy.cfg, the template tests/support/haproxy_process.h uses too.
  { sed -e "s/@PORT@/$cluster_port/" -e "s/@CHECK_INTERVAL@/1s/" -e "s/@HTTP_REQUEST_TIMEOUT@/10s/" \
      -e "s/@MAXCONN_PER_CLIENT@/1000/" -e "s/@MAXCONN@/8000/" -e "s/@REPLICA_MAXCONN@/900/" \
      configs/haproxy.cfg
    printf '%s' "$servers"; } > "$dir/haproxy.cfg"
  haproxy -db -f "$dir/haproxy.cfg" > "$dir/haproxy.log" 2>&1 &
  cluster_proxy_pid=$!
  pids+=("$cluster_proxy_pid")
  for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$cluster_port/healthz" > /dev/null && break
    sleep 0.1
  done
  curl -sf "http://127.0.0.1:$cluster_port/healthz" > /dev/null ||
    { echo "cluster: HAProxy does not answer; see $dir/haproxy.log" >&2; cat "$dir/haproxy.log" >&2; return 1; }
  echo "cluster: $replicas replicas ($(seq -s ' ' -f 'replica-%g' "$replicas")) behind HAProxy at http://127.0.0.1:$cluster_port"
}

cluster_start_replica() {
  local i=$1
  shift
  rm -f "$cluster_dir/replica-$i.port"
  # env execs the coordinator: $! is the coordinator's own pid.
  env "$@" "$cluster_build/server/fedcase-coordinator" --config "$cluster_dir/replica-$i.json" \
    >> "$cluster_dir/replica-$i.log" 2>&1 &
  cluster_replica_pids[i]=$!
  pids+=("${cluster_replica_pids[i]}")
  for _ in $(seq 300); do
    [ -s "$cluster_dir/replica-$i.port" ] && return 0
    kill -0 "${cluster_replica_pids[i]}" 2>/dev/null || break
    sleep 0.05
  done
  echo "cluster: replica $i did not start; see $cluster_dir/replica-$i.log" >&2
  tail -n 20 "$cluster_dir/replica-$i.log" >&2
  return 1
}

cluster_psql() {
  psql -qAtX -v ON_ERROR_STOP=1 "$cluster_database" -c "$1"
}

cluster_pg_restart_immediate() {
  as_postgres "$pg_bin/pg_ctl" -D "$pg_dir/data" -l "$pg_dir/server.log" -w -m immediate restart > /dev/null
}

cluster_stop() {
  [ -n "$pg_dir" ] || return 0
  as_postgres "$pg_bin/pg_ctl" -D "$pg_dir/data" -m fast stop > /dev/null 2>&1 || true
  rm -rf "$pg_dir"
  pg_dir=
}
