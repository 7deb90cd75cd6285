#!/usr/bin/env bash
# AppleS on PostgreSQL (issue 5 acceptance): pgbench's TPC-B-like script at
# scale 10 against PostgreSQL 15 directly, through PgBouncer (transaction
# pooling, pool 16) and through sluice proxy (P tuned by the three-sample
# model), interleaved and repeated by `sluice bench pg`. Starts private
# servers in a temporary directory and stops them on exit.
#
#   scripts/bench-proxy.sh [--users 8,256,512] [--rounds 3] [--seconds 20] [--warmup 15]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
ensure_rust
apt_install postgresql-15 postgresql-client-15 pgbouncer
cargo build --release -p sluice

PGBIN=/usr/lib/postgresql/15/bin
# Below the ephemeral range, so that no client connection holds them.
PG_PORT=25432 BOUNCER_PORT=26432 SLUICE_PORT=27432 ADMIN_PORT=27433
work=$(mktemp -d /tmp/sluice-bench-pg.XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
# PostgreSQL and PgBouncer refuse to run as root. setpriv execs in place
# (so $! is the server's pid) and keeps the raised descriptor limit.
as_db=()
[[ $(id -u) -eq 0 ]] && as_db=(setpriv --reuid=postgres --regid=postgres --init-groups --)
[[ $(id -u) -eq 0 ]] && chown postgres "$work"
# Every client costs the proxies two descriptors.
ulimit -n "$(ulimit -Hn)"

echo "== PostgreSQL 15 on port $PG_PORT ($work)"
"${as_db[@]}" "$PGBIN/initdb" -D "$work/data" -U postgres --auth=trust >/dev/null
"${as_db[@]}" "$PGBIN/postgres" -D "$work/data" -p $PG_PORT -k "$work" -c listen_addresses=127.0.0.1 \
    -c max_connections=600 -c shared_buffers=256MB >"$work/pg.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do pg_isready -q -h 127.0.0.1 -p $PG_PORT && break; sleep 0.2; done
pgbench -i -q -s 10 -h 127.0.0.1 -p $PG_PORT -U postgres postgres

echo "== PgBouncer on port $BOUNCER_PORT (transaction pooling, pool 16)"
cat >"$work/pgbouncer.ini" <<INI
[databases]
postgres = host=127.0.0.1 port=$PG_PORT dbname=postgres
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $BOUNCER_PORT
unix_socket_dir =
auth_type = trust
auth_file = $work/users.txt
pool_mode = transaction
default_pool_size = 16
max_client_conn = 2000
logfile = $work/pgbouncer.log
INI
echo '"postgres" ""' >"$work/users.txt"
chmod a+r "$work"/*.ini "$work/users.txt"
"${as_db[@]}" pgbouncer "$work/pgbouncer.ini" >"$work/pgbouncer.out" 2>&1 &
pids+=($!)
bouncer_pid=$!

echo "== sluice proxy on port $SLUICE_PORT (admin $ADMIN_PORT)"
cat >"$work/sluice.toml" <<TOML
[proxy]
listen = "127.0.0.1:$SLUICE_PORT"
upstream = "127.0.0.1:$PG_PORT"
protocol = "pg"
tenant_key = "connection"
[admin]
listen = "127.0.0.1:$ADMIN_PORT"
[gate]
queue_limit = 100000
TOML
target/release/sluice proxy --config "$work/sluice.toml" 2>"$work/sluice.log" &
pids+=($!)
sluice_pid=$!
sleep 1

target/release/sluice bench pg \
    --targets "direct=127.0.0.1:$PG_PORT,pgbouncer=127.0.0.1:$BOUNCER_PORT,sluice=127.0.0.1:$SLUICE_PORT" \
    --cpu "pgbouncer=$bouncer_pid,sluice=$sluice_pid" --out results/bench-pg "$@"
echo "== the proxy's decisions"
curl -s "http://127.0.0.1:$ADMIN_PORT/stats" | python3 -c '
import json, sys
for d in json.load(sys.stdin)["decisions"]:
    print("%8.1fs  %s = %s: %s" % (d["at"], d["knob"], d["value"], d["why"]))'
