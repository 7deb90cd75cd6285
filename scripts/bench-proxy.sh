#!/usr/bin/env bash
# AppleS on PostgreSQL (targets: docs/BENCHMARKS.md, "`sluice proxy` in
# front of PostgreSQL"): pgbench's TPC-B-like script at
# scale 10 against PostgreSQL 15 directly, through PgBouncer (transaction
# pooling, pool 16) and through sluice proxy (P tuned by the three-sample
# model), interleaved and repeated by `sluice bench pg`. Starts private
# servers in a temporary directory and stops them on exit.
#
#   scripts/bench-proxy.sh [--users 8,256,512] [--rounds 3] [--seconds 20] [--warmup 20] [--rate 1000]
#
# Arguments go to `sluice bench pg` (see its --help); --rate makes the users
# an open system, transactions started on pgbench's schedule (the rate then
# sets the throughput, so p99 is the figure to compare; runs.json keeps it).
#
# Environment:
#   SWEEP="8 16 32"   also run sluice proxies with P pinned to each value
#                     (the hand sweep the matching point is checked against)
#   GRADIENT=1        also run a sluice proxy whose P is set by the gradient
#                     limiter instead of the three-sample model
#   PLAIN=1           also run a sluice proxy with the paper's model alone
#                     (no refinement of the matching point)
#   REFINE3=1         also run sluice proxies whose refinement measures 3C
#                     as well as C and 2C ([optimizer.model]
#                     refine_multiples = 3): sluice-r3, and with TXN=1
#                     sluice-txn-r3
#   MODEL='settle_ms = 500\nsample_ms = 2000'  also run sluice proxies with
#                     these [optimizer.model] settings (TOML lines, \n
#                     between them): sluice-m, and with TXN=1 sluice-txn-m
#   BOUNCER_POOLS="24 32"  also run PgBouncer with each of these pool sizes
#                     (pgbouncer-pN), for PgBouncer's best pool in the run
#   THREADS=1         also run a sluice proxy with this many worker threads
#                     (sluice-1t; with TXN=1 also sluice-txn-1t, with
#                     LOCAL=1 also sluice-local-1t)
#   BASE=path/to/sluice  also run sluice-base: the same proxy as `sluice`
#                     from another build (copy target/release/sluice away
#                     before a change), to measure the change; it runs
#                     first in each round and is the baseline of the
#                     table's paired ratios
#   PIN=8             pin P (and take the optimizer out) in sluice and
#                     sluice-base alike, so that a BASE comparison measures
#                     the code, not where the optimizer settled
#   TXN=1             also run a sluice proxy with transaction pooling
#                     (pool = "transaction": a backend per request, not
#                     per client; see crates/sluice-proxy/src/pg/pool.rs)
#   WEIGHTS="w1:1,w2:2,w4:4"  instead, run tenants named by application_name
#                     through a weighted and an equal-weight sluice proxy
#                     (WEIGHTS_P=16 pins P in both, to compare the totals
#                     at the same P)
#   ZETA="1 16"       instead, AppleS Fig. 6: ZETA_TENANTS (16) tenants named
#                     by application_name sharing the users equally, through
#                     sluice proxies with P pinned to each of ZETA_P ("16")
#                     and ζ pinned to each of ZETA (a grid), against direct
#   NO_BOUNCER=1      leave PgBouncer out of the targets: Debian 12's
#                     PgBouncer (1.18) cannot relay named prepared
#                     statements in transaction mode, so --protocol
#                     prepared fails there
#   IDLE_BACKENDS=N   hold N idle sessions open on PostgreSQL for the whole
#                     run (scripts/pg-idle-connections.py): PgBouncer with
#                     pool 16 and N = users - 16 runs with as many backends
#                     as sluice proxy keeps, one per client
#   SLO=60            instead, the SLO experiment (AppleS §5.3): 10
#                     latency-sensitive users (tenant ls) with a p99.9
#                     target of SLO ms and the rest best effort (tenant be),
#                     through four proxies with P pinned to SLO_P (16):
#                     fair (per-user shares), strict (ls strict priority),
#                     slo (ls weight set by the SLO controller on each
#                     window's p99.9) and slo-misses (the same on the
#                     fading fraction of requests over the target); first
#                     the ls users alone. SLO_USERS (100) users in all.
#                     PostgreSQL checkpoints are pushed past the run
#                     (checkpoint_timeout 1h, max_wal_size 16GB): a
#                     checkpoint's stall set every p99.9 it fell into,
#                     whatever the scheduling; SLO_CHECKPOINTS=1 leaves
#                     them at PostgreSQL's defaults and prints them
#                     (from its log) at the end.
#   UPSTREAM_TLS=1    PostgreSQL with TLS on (a self-signed certificate),
#                     and beside PgBouncer and sluice the same with TLS to
#                     the server (pgbouncer-tls: server_tls_sslmode =
#                     require; sluice-tls: [proxy.upstream_tls] mode =
#                     "require"; with TXN=1 also sluice-txn-tls); clients
#                     stay plain (PGSSLMODE=disable)
#   UNIX=1            also run PgBouncer and sluice (as `sluice`, and with
#                     TXN=1 as `sluice-txn`) connecting to PostgreSQL's
#                     Unix socket instead of 127.0.0.1 (pgbouncer-unix,
#                     sluice-unix, sluice-txn-unix); clients still use TCP
#   LOCAL=1           also targets whose clients connect through Unix
#                     sockets (pgbench -h DIR), each with PostgreSQL's
#                     socket upstream: direct-local, pgbouncer-local
#                     (unix_socket_dir) and sluice-local (listen_unix)
#   IDLE_CLIENTS=5000 instead, open that many idle sessions through
#                     PgBouncer and through a sluice proxy with transaction
#                     pooling (scripts/pg-idle-connections.py), one pooler
#                     at a time, and report each one's RSS before, with
#                     them, and after they left (target: at most 64 KiB
#                     per idle client)
#   PG_SETTINGS="-c synchronous_commit=off"  further settings for the
#                     private PostgreSQL (postgres command-line options)
#   PGBENCH=1         drive the targets with pgbench itself
#                     (scripts/pgbench-rounds.sh: a run per target, user
#                     count and round, each opening its connections
#                     afresh) instead of `sluice bench pg`; takes --users,
#                     --rounds, --seconds and --warmup only
#   WAITS=1           also sample PostgreSQL's busy backends (wait events
#                     by application_name) and the machine's counters every
#                     0.2 s into results/pg-waits (scripts/pg-waits.py;
#                     `pg-waits.py summarize results/pg-waits` reads them)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
ensure_rust
apt_install postgresql-15 postgresql-client-15 pgbouncer
cargo build --release -p sluice

PGBIN=/usr/lib/postgresql/15/bin
# Below the ephemeral range, so that no client connection holds them.
PG_PORT=25432 BOUNCER_PORT=26432 SLUICE_PORT=27432 ADMIN_PORT=27433
bench_scratch sluice-bench-pg
# PostgreSQL and PgBouncer refuse to run as root. setpriv execs in place
# (so $! is the server's pid) and keeps the raised descriptor limit.
as_db=()
[[ $(id -u) -eq 0 ]] && as_db=(setpriv --reuid=postgres --regid=postgres --init-groups --)
[[ $(id -u) -eq 0 ]] && chown postgres "$work"

pg_opts=()
[[ -n "${SLO:-}" && -z "${SLO_CHECKPOINTS:-}" ]] && pg_opts=(-c checkpoint_timeout=1h -c max_wal_size=16GB)
read -ra extra_settings <<<"${PG_SETTINGS:-}"
pg_opts+=("${extra_settings[@]}")
# Under transaction pooling every login's backend stays in the pool until
# it idles out, beside the next target's backends.
max_connections=$((600 + ${IDLE_BACKENDS:-0}))
[[ -n "${TXN:-}" ]] && max_connections=$((max_connections + 600))
echo "== PostgreSQL 15 on port $PG_PORT ($work)"
"${as_db[@]}" "$PGBIN/initdb" -D "$work/data" -U postgres --auth=trust >/dev/null
if [[ -n "${UPSTREAM_TLS:-}" ]]; then
    "${as_db[@]}" openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost \
        -keyout "$work/data/server.key" -out "$work/data/server.crt" 2>/dev/null
    "${as_db[@]}" chmod 600 "$work/data/server.key"
    pg_opts+=(-c ssl=on)
    # Only the proxies' connections to the server are to be TLS.
    export PGSSLMODE=disable
fi
"${as_db[@]}" "$PGBIN/postgres" -D "$work/data" -p $PG_PORT -k "$work" -c listen_addresses=127.0.0.1 \
    -c max_connections=$max_connections -c shared_buffers=256MB "${pg_opts[@]}" >"$work/pg.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do pg_isready -q -h 127.0.0.1 -p $PG_PORT && break; sleep 0.2; done
pgbench -i -q -s 10 -h 127.0.0.1 -p $PG_PORT -U postgres postgres
if [[ -n "${WAITS:-}" ]]; then
    rm -rf results/pg-waits
    python3 scripts/pg-waits.py sample 127.0.0.1 $PG_PORT postgres results/pg-waits &
    pids+=($!)
fi
if [[ -n "${IDLE_BACKENDS:-}" ]]; then
    python3 scripts/pg-idle-connections.py "$IDLE_BACKENDS" 127.0.0.1 $PG_PORT postgres >"$work/idle.log" 2>&1 &
    pids+=($!)
    idle_pid=$!
    # It says "holding" once every session is open.
    until grep -q holding "$work/idle.log"; do
        kill -0 $idle_pid 2>/dev/null || { cat "$work/idle.log"; echo "idle sessions did not open" >&2; exit 1; }
        sleep 0.2
    done
fi

echo '"postgres" ""' >"$work/users.txt"
# start_bouncer NAME PORT [EXTRA_INI]: PgBouncer in transaction mode with
# pool $POOL (16 by default) in front of PostgreSQL (at $BOUNCER_HOST,
# 127.0.0.1 by default); its pid is in bouncer_pid.
start_bouncer() {
    local name=$1 port=$2 extra=${3:-}
    echo "== $name on port $port (transaction pooling, pool ${POOL:-16})"
    cat >"$work/$name.ini" <<INI
[databases]
postgres = host=${BOUNCER_HOST:-127.0.0.1} port=$PG_PORT dbname=postgres
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir = ${BOUNCER_SOCKET_DIR:-}
auth_type = trust
auth_file = $work/users.txt
pool_mode = transaction
default_pool_size = ${POOL:-16}
max_client_conn = $((2000 + ${IDLE_CLIENTS:-0}))
logfile = $work/$name.log
$extra
INI
    chmod a+r "$work/$name.ini" "$work/users.txt"
    "${as_db[@]}" pgbouncer "$work/$name.ini" >"$work/$name.out" 2>&1 &
    pids+=($!)
    bouncer_pid=$!
    sleep 1
    kill -0 $bouncer_pid 2>/dev/null || { cat "$work/$name.log"; echo "$name did not start" >&2; exit 1; }
}
start_bouncer pgbouncer $BOUNCER_PORT

# start_sluice NAME PORT ADMIN_LISTEN [EXTRA_TOML]: a sluice proxy in front
# of PostgreSQL (at $UPSTREAM, 127.0.0.1:$PG_PORT by default; $PROXY_TOML
# goes into its [proxy] section; $SLUICE_BIN is the binary,
# target/release/sluice by default); its pid is appended to cpu_args. With
# CLIENT_DIR set it also listens on CLIENT_DIR/.s.PGSQL.PORT, which its
# target names.
start_sluice() {
    local name=$1 port=$2 admin=$3 extra=${4:-} unix=""
    [[ -n "${CLIENT_DIR:-}" ]] && unix="listen_unix = \"$CLIENT_DIR/.s.PGSQL.$port\"\n"
    printf '[proxy]\nlisten = "127.0.0.1:%s"\n%bupstream = "%s"\nprotocol = "pg"\ntenant_key = "%s"\n%b[admin]\nlisten = "%s"\n[gate]\nqueue_limit = 100000\n%b' \
        "$port" "$unix" "${UPSTREAM:-127.0.0.1:$PG_PORT}" "${TENANT_KEY:-connection}" "${PROXY_TOML:-}" "$admin" "$extra" >"$work/$name.toml"
    "${SLUICE_BIN:-target/release/sluice}" proxy --config "$work/$name.toml" 2>"$work/$name.log" &
    pids+=($!)
    local pid=$!
    sleep 1
    kill -0 $pid 2>/dev/null || { cat "$work/$name.log"; echo "sluice proxy $name did not start" >&2; exit 1; }
    targets+=",$name=${CLIENT_DIR:-127.0.0.1}:$port"
    cpu_args+=",$name=$pid"
}

targets="direct=127.0.0.1:$PG_PORT,pgbouncer=127.0.0.1:$BOUNCER_PORT"
cpu_args="pgbouncer=$bouncer_pid"
if [[ -n "${NO_BOUNCER:-}" ]]; then
    targets="direct=127.0.0.1:$PG_PORT" cpu_args=""
fi
tenant_args=()
if [[ -n "${SLO:-}" ]]; then
    echo "== SLO experiment: ls p99.9 <= $SLO ms; fair, strict, slo and slo-misses proxies with P = ${SLO_P:-16}"
    targets="" cpu_args=""
    pinned="parallelism = ${SLO_P:-16}\n"
    fixed='[optimizer]\nparallelism = "fixed"\nzeta = "fixed"\n'
    # Fair: per-user shares, ls's 10 users against be's 90 (weights by users).
    fair="${pinned}[gate.weights]\nls = 1\nbe = 9\n$fixed"
    TENANT_KEY=application_name start_sluice fair $SLUICE_PORT "127.0.0.1:$ADMIN_PORT" "$fair"
    TENANT_KEY=application_name start_sluice strict $((SLUICE_PORT + 10)) "" "${pinned}strict = [\"ls\"]\n$fixed"
    slo_target="[[optimizer.slo]]\ntenant = \"ls\"\npercentile = 99.9\ntarget_ms = $SLO\n"
    TENANT_KEY=application_name start_sluice slo $((SLUICE_PORT + 11)) "127.0.0.1:$((ADMIN_PORT + 11))" "$fair$slo_target"
    TENANT_KEY=application_name start_sluice slo-misses $((SLUICE_PORT + 14)) "127.0.0.1:$((ADMIN_PORT + 14))" \
        "${fair}slo_measure = \"misses\"\n$slo_target"
    targets=${targets#,}
    echo "== the latency-sensitive users alone"
    target/release/sluice bench pg --targets "${targets%%,*}" --tenants ls:1:10 --users 10 --out results/bench-slo-alone "$@"
    tenant_args=(--tenants "ls:1:10,be:9" --users "${SLO_USERS:-100}")
    decisions_ports="slo:$((ADMIN_PORT + 11)) slo-misses:$((ADMIN_PORT + 14))"
elif [[ -n "${ZETA:-}" ]]; then
    echo "== AppleS Fig. 6: P in {${ZETA_P:-16}} x zeta in {$ZETA}, ${ZETA_TENANTS:-16} tenants"
    targets="direct=127.0.0.1:$PG_PORT" cpu_args=""
    i=0
    for p in ${ZETA_P:-16}; do
        for z in $ZETA; do
            pinned="parallelism = $p\nzeta = $z\n[optimizer]\nparallelism = \"fixed\"\nzeta = \"fixed\"\n"
            TENANT_KEY=application_name start_sluice "sluice-p$p-z$z" $((SLUICE_PORT + 20 + i)) "" "$pinned"
            i=$((i + 1))
        done
    done
    tenant_args=(--tenants "$(seq -f 't%g:1' -s, "${ZETA_TENANTS:-16}")")
    decisions_ports=""
elif [[ -n "${WEIGHTS:-}" ]]; then
    echo "== tenants $WEIGHTS: weighted and equal-weight sluice proxies"
    pin="" fixed=""
    if [[ -n "${WEIGHTS_P:-}" ]]; then
        pin="parallelism = $WEIGHTS_P\n" fixed='[optimizer]\nparallelism = "fixed"\n'
    fi
    weights_toml="$pin[gate.weights]\n$(tr ',' '\n' <<<"$WEIGHTS" | sed 's/:/ = /')\n$fixed"
    TENANT_KEY=application_name start_sluice sluice-weighted $SLUICE_PORT "127.0.0.1:$ADMIN_PORT" "$weights_toml"
    TENANT_KEY=application_name start_sluice sluice-equal $((SLUICE_PORT + 10)) "" "$pin$fixed"
    tenant_args=(--tenants "$WEIGHTS")
elif [[ -n "${IDLE_CLIENTS:-}" ]]; then
    echo "== $IDLE_CLIENTS idle clients through PgBouncer and sluice (transaction pooling)"
    PROXY_TOML='pool = "transaction"\n' start_sluice sluice $SLUICE_PORT ""
    decisions_ports=""
else
    echo "== sluice proxy on port $SLUICE_PORT (admin $ADMIN_PORT)"
    pinned=""
    [[ -n "${PIN:-}" ]] && pinned="parallelism = $PIN\n[optimizer]\nparallelism = \"fixed\"\n"
    start_sluice sluice $SLUICE_PORT "127.0.0.1:$ADMIN_PORT" "$pinned"
    if [[ -n "${GRADIENT:-}" ]]; then
        start_sluice sluice-gradient $((SLUICE_PORT + 10)) "" '[optimizer]\nparallelism = "gradient"\n'
    fi
    if [[ -n "${TXN:-}" ]]; then
        # Every login brings a backend; those left idle go after 5 s, so
        # that the next target in the round starts without them.
        PROXY_TOML='pool = "transaction"\nserver_idle_timeout_secs = 5\n' \
            start_sluice sluice-txn $((SLUICE_PORT + 7)) "127.0.0.1:$((ADMIN_PORT + 60))"
        decisions_ports="sluice:$ADMIN_PORT sluice-txn:$((ADMIN_PORT + 60))"
    fi
    if [[ -n "${BASE:-}" ]]; then
        SLUICE_BIN=$BASE start_sluice sluice-base $((SLUICE_PORT + 5)) "" "$pinned"
        # The first target is the baseline of `sluice bench pg`'s ratios.
        base_target=${targets##*,}
        targets="$base_target,${targets%,*}"
    fi
    if [[ -n "${UPSTREAM_TLS:-}" ]]; then
        start_bouncer pgbouncer-tls $((BOUNCER_PORT + 1)) "server_tls_sslmode = require"
        targets+=",pgbouncer-tls=127.0.0.1:$((BOUNCER_PORT + 1))"
        cpu_args+=",pgbouncer-tls=$bouncer_pid"
        start_sluice sluice-tls $((SLUICE_PORT + 6)) "" '[proxy.upstream_tls]\nmode = "require"\n'
        if [[ -n "${TXN:-}" ]]; then
            PROXY_TOML='pool = "transaction"\nserver_idle_timeout_secs = 5\n' \
                start_sluice sluice-txn-tls $((SLUICE_PORT + 4)) "" '[proxy.upstream_tls]\nmode = "require"\n'
        fi
    fi
    if [[ -n "${UNIX:-}" ]]; then
        BOUNCER_HOST=$work start_bouncer pgbouncer-unix $((BOUNCER_PORT + 2))
        targets+=",pgbouncer-unix=127.0.0.1:$((BOUNCER_PORT + 2))"
        cpu_args+=",pgbouncer-unix=$bouncer_pid"
        UPSTREAM=$work/.s.PGSQL.$PG_PORT start_sluice sluice-unix $((SLUICE_PORT + 3)) ""
        if [[ -n "${TXN:-}" ]]; then
            UPSTREAM=$work/.s.PGSQL.$PG_PORT PROXY_TOML='pool = "transaction"\nserver_idle_timeout_secs = 5\n' \
                start_sluice sluice-txn-unix $((SLUICE_PORT + 2)) ""
        fi
    fi
    if [[ -n "${LOCAL:-}" ]]; then
        targets+=",direct-local=$work:$PG_PORT"
        BOUNCER_HOST=$work BOUNCER_SOCKET_DIR=$work start_bouncer pgbouncer-local $((BOUNCER_PORT + 3))
        targets+=",pgbouncer-local=$work:$((BOUNCER_PORT + 3))"
        cpu_args+=",pgbouncer-local=$bouncer_pid"
        CLIENT_DIR=$work UPSTREAM=$work/.s.PGSQL.$PG_PORT start_sluice sluice-local $((SLUICE_PORT + 30)) ""
    fi
    if [[ -n "${THREADS:-}" ]]; then
        PROXY_TOML="${PROXY_TOML:-}threads = $THREADS\n" start_sluice "sluice-${THREADS}t" $((SLUICE_PORT + 8)) ""
        if [[ -n "${TXN:-}" ]]; then
            PROXY_TOML="pool = \"transaction\"\nserver_idle_timeout_secs = 5\nthreads = $THREADS\n" \
                start_sluice "sluice-txn-${THREADS}t" $((SLUICE_PORT + 12)) ""
        fi
        if [[ -n "${LOCAL:-}" ]]; then
            CLIENT_DIR=$work UPSTREAM=$work/.s.PGSQL.$PG_PORT PROXY_TOML="${PROXY_TOML:-}threads = $THREADS\n" \
                start_sluice "sluice-local-${THREADS}t" $((SLUICE_PORT + 31)) ""
        fi
    fi
    if [[ -n "${PLAIN:-}" ]]; then
        start_sluice sluice-plain $((SLUICE_PORT + 9)) "" '[optimizer.model]\nrefine = false\n'
    fi
    if [[ -n "${REFINE3:-}" ]]; then
        start_sluice sluice-r3 $((SLUICE_PORT + 40)) "" '[optimizer.model]\nrefine_multiples = 3\n'
        if [[ -n "${TXN:-}" ]]; then
            PROXY_TOML='pool = "transaction"\nserver_idle_timeout_secs = 5\n' \
                start_sluice sluice-txn-r3 $((SLUICE_PORT + 41)) "" '[optimizer.model]\nrefine_multiples = 3\n'
        fi
    fi
    if [[ -n "${MODEL:-}" ]]; then
        start_sluice sluice-m $((SLUICE_PORT + 42)) "127.0.0.1:$((ADMIN_PORT + 62))" "[optimizer.model]\n$MODEL\n"
        decisions_ports="${decisions_ports-sluice:$ADMIN_PORT} sluice-m:$((ADMIN_PORT + 62))"
        if [[ -n "${TXN:-}" ]]; then
            PROXY_TOML='pool = "transaction"\nserver_idle_timeout_secs = 5\n' \
                start_sluice sluice-txn-m $((SLUICE_PORT + 43)) "127.0.0.1:$((ADMIN_PORT + 63))" "[optimizer.model]\n$MODEL\n"
            decisions_ports+=" sluice-txn-m:$((ADMIN_PORT + 63))"
        fi
    fi
    i=50
    for pool in ${BOUNCER_POOLS:-}; do
        POOL=$pool start_bouncer "pgbouncer-p$pool" $((BOUNCER_PORT + i))
        targets+=",pgbouncer-p$pool=127.0.0.1:$((BOUNCER_PORT + i))"
        cpu_args+=",pgbouncer-p$pool=$bouncer_pid"
        i=$((i + 1))
    done
    i=11
    for p in ${SWEEP:-}; do
        start_sluice "sluice-p$p" $((SLUICE_PORT + i)) "" "parallelism = $p\n[optimizer]\nparallelism = \"fixed\"\n"
        i=$((i + 1))
    done
fi

rss_kib() { awk '/^VmRSS:/{print $2}' "/proc/$1/status"; }
# idle_rss NAME PID HOST PORT: the RSS of pooler NAME (process PID) before,
# with $IDLE_CLIENTS idle sessions through it, and after they left; twice,
# so that memory kept for reuse is told from memory lost.
idle_rss() {
    local name=$1 pid=$2 host=$3 port=$4 before with after holder
    for cycle in 1 2; do
        before=$(rss_kib "$pid")
        python3 scripts/pg-idle-connections.py "$IDLE_CLIENTS" "$host" "$port" postgres >"$work/idle-$name.log" 2>&1 &
        holder=$!
        until grep -q holding "$work/idle-$name.log"; do
            kill -0 $holder 2>/dev/null || { cat "$work/idle-$name.log"; echo "$name: idle sessions did not open" >&2; exit 1; }
            sleep 0.5
        done
        with=$(rss_kib "$pid")
        kill $holder && wait $holder || true
        sleep 2
        after=$(rss_kib "$pid")
        awk -v name="$name" -v c="$cycle" -v n="$IDLE_CLIENTS" -v b="$before" -v w="$with" -v a="$after" 'BEGIN {
            printf "%s, cycle %d: RSS %d KiB before, %d KiB with %d idle clients, %d KiB after they left: %.1f KiB per idle client (target <= 64)\n",
                name, c, b, w, n, a, (w - b) / n }'
    done
}

if [[ -n "${IDLE_CLIENTS:-}" ]]; then
    for entry in ${cpu_args//,/ }; do
        name=${entry%%=*} pid=${entry#*=}
        addr=$(tr , '\n' <<<"$targets" | sed -n "s/^$name=//p")
        idle_rss "$name" "$pid" "${addr%:*}" "${addr##*:}"
    done
elif [[ -n "${PGBENCH:-}" ]]; then
    scripts/pgbench-rounds.sh "$targets" "$@"
else
    target/release/sluice bench pg --targets "$targets" --cpu "${cpu_args#,}" "${tenant_args[@]}" --out results/bench-pg "$@"
fi
for named in ${decisions_ports-sluice:$ADMIN_PORT}; do
    port=${named#*:}
    echo "== the decisions of ${named%%:*} (admin port $port)"
    curl -s "http://127.0.0.1:$port/stats" | python3 -c '
import json, sys
for d in json.load(sys.stdin)["decisions"]:
    print("%8.1fs  %s = %s: %s" % (d["at"], d["knob"], d["value"], d["why"]))'
done
if [[ -n "${SLO_CHECKPOINTS:-}" ]]; then
    echo "== PostgreSQL's checkpoints during the run"
    grep -E "checkpoint (starting|complete)" "$work/pg.log" || echo "none"
fi
