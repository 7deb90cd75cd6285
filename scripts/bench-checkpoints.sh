#!/usr/bin/env bash
# PostgreSQL's checkpoints steered by the proxy (targets: docs/BENCHMARKS.md,
# "PostgreSQL's checkpoints, steered"): pgbench's TPC-B-like script at scale
# 20 through sluice proxy (P pinned at 16), open loop: a base rate of 45% of
# the capacity measured first (unthrottled under the worst setting, after
# a warm-up), and every 40 s a 10 s burst that adds 15% (`--burst 0`:
# none, the load flat). (At 60% with bursts to 80%, runs of each
# configuration queued for up to seconds, p99 0.09-1.5 s from run to run:
# that measures overload, not checkpoints.) The configurations named by
# --configs (all but `direct` unless told), interleaved and repeated, each
# run from a fresh checkpoint:
#
#   worst       max_wal_size 128MB, checkpoint_completion_target 0.1: the
#               programmable background tasks paper's worst setting, left
#               alone
#   defaults    PostgreSQL's defaults (max_wal_size 1GB, target 0.9, 5 min)
#   direct      the defaults, pgbench connected to PostgreSQL directly: what
#               the proxy adds to the defaults' tail
#   compressed  the worst setting with wal_compression = lz4, left alone:
#               what the controller's compression of full-page images does
#               without its other rules
#   steered     the worst setting, and [postgres.background] with the same
#               128 MiB as its bound on recovery debt (max_recovery_wal_mib)
#               and a busy completion target of 0.5, which leaves 24-40 MiB
#               of WAL between checkpoints for the early start, more than a
#               burst writes (0.9 leaves none under this bound); the early
#               start keeps 1.5 times the largest recent burst's WAL
#   eager       steered, but with 24 MiB of room kept whatever the bursts
#               (min_burst_room_mib): under this bound's trigger point of
#               80 MiB, an early start once the debt passes half of it,
#               under a flat load as well
#
# Per run: throughput, latency p99 and p99.9 (every transaction, measured
# from its scheduled start), the worst 10-second window's p99 over the
# run's, checkpoints started (all, all during a burst, by WAL volume, by
# WAL volume during a burst), the largest WAL since the redo point (sampled every 0.5 s), the
# most WAL one burst wrote (what a bound on recovery debt must hold for no
# checkpoint to start inside a burst), CPU steal. Then
# `sluice bench summarize`'s table, ratios to `defaults` paired by round
# (to the first configuration named when `defaults` is not).
#
#   scripts/bench-checkpoints.sh [--rounds 2] [--seconds 300] [--scale 20] [--base 45] [--burst 15]
#                                [--configs worst,defaults,compressed,steered] (or direct, eager)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
rounds=2 seconds=300 scale=20 base_share=45 burst_share=15 configs=worst,defaults,compressed,steered
while [[ $# -gt 0 ]]; do
    case $1 in
        --rounds) rounds=$2; shift 2 ;;
        --seconds) seconds=$2; shift 2 ;;
        --scale) scale=$2; shift 2 ;;
        --base) base_share=$2; shift 2 ;;
        --burst) burst_share=$2; shift 2 ;;
        --configs) configs=$2; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "unknown option $1 (try --help)" >&2; exit 2 ;;
    esac
done
for config in ${configs//,/ }; do
    case $config in
        worst | defaults | direct | compressed | steered | eager) ;;
        *) echo "unknown configuration $config in --configs (worst, defaults, direct, compressed, steered, eager)" >&2; exit 2 ;;
    esac
done
apt_install postgresql-15 postgresql-client-15
find_sluice

# Below the ephemeral range, so that no client connection holds them.
PG_PORT=25442 SLUICE_PORT=27442 ADMIN_PORT=27443
bench_scratch sluice-bench-checkpoints

echo "== PostgreSQL 15 on port $PG_PORT ($work), fsync on, checkpoints logged"
# shared_buffers in the configuration file: on the command line it differs
# from initdb's line there, and every reload the controller asks for would
# log the file as containing errors.
CONF_LINES="shared_buffers = '256MB'" start_pg log_checkpoints=on "log_line_prefix=%m "
pgbench -i -q -s "$scale" -h 127.0.0.1 -p $PG_PORT -U postgres postgres

# Settings each configuration starts from.
configure() {
    local sql
    case $1 in
        defaults | direct) sql="ALTER SYSTEM RESET max_wal_size;ALTER SYSTEM RESET checkpoint_completion_target;ALTER SYSTEM RESET checkpoint_timeout" ;;
        worst | steered | eager) sql="ALTER SYSTEM SET max_wal_size = '128MB';ALTER SYSTEM SET checkpoint_completion_target = 0.1;ALTER SYSTEM RESET checkpoint_timeout" ;;
        compressed) sql="ALTER SYSTEM SET max_wal_size = '128MB';ALTER SYSTEM SET checkpoint_completion_target = 0.1;ALTER SYSTEM RESET checkpoint_timeout;ALTER SYSTEM SET wal_compression = 'lz4'" ;;
    esac
    [[ $1 == compressed ]] || sql+=";ALTER SYSTEM RESET wal_compression"
    IFS=';' read -ra statements <<<"$sql"
    for s in "${statements[@]}"; do psql_db -c "$s"; done
    psql_db -c "SELECT pg_reload_conf()" >/dev/null
    psql_db -c "CHECKPOINT"
}

# The steered configurations add the checkpoint controller, held to the
# worst setting's 128 MiB of recovery debt.
steers() { [[ $1 == steered || $1 == eager ]]; }
start_proxy() {
    local steering=""
    steers "$1" && steering="[postgres.background.checkpoint]
max_recovery_wal_mib = 128
busy_completion_target = 0.5
light_completion_target = 0.3"
    [[ $1 == eager ]] && steering+="
min_burst_room_mib = 24"
    start_pg_proxy "$1" "$steering"
}

# Capacity under the hardest setting (the paper's worst), so that the
# base rate is one every configuration sustains.
echo "== capacity: pgbench unthrottled through the proxy, the worst setting: 30 s to warm up, 60 s measured"
configure worst
start_proxy capacity
unthrottled() {
    pgbench -h 127.0.0.1 -p $SLUICE_PORT -U postgres -n -c 16 -j 2 -T "$1" postgres | awk '/^tps = / {print int($3)}'
}
unthrottled 30 >/dev/null
capacity=$(unthrottled 60)
stop_pg_proxy
base=$((capacity * base_share / 100)) burst=$((capacity * burst_share / 100))
if ((burst > 0)); then
    echo "capacity $capacity tps: base rate $base tps, bursts of +$burst tps for 10 s every 40 s"
else
    echo "capacity $capacity tps: base rate $base tps, no bursts"
fi

# Samples WAL since the redo point and WAL written since the server began
# (bytes).
sample() {
    while :; do
        psql_db -c "SELECT extract(epoch FROM clock_timestamp()), pg_current_wal_lsn() - redo_lsn, pg_current_wal_lsn() - '0/0' FROM pg_control_checkpoint()" \
            2>/dev/null | tr '|' ' ' || true
        sleep 0.5
    done
}

run() {
    local config=$1 round=$2 dir="$work/run-$1-$2"
    mkdir -p "$dir"
    configure "$config"
    local port=$PG_PORT
    if [[ $config != direct ]]; then
        start_proxy "$config"
        port=$SLUICE_PORT
    fi
    sample >"$dir/debt" &
    local sampler=$!
    local log_from
    log_from=$(wc -l <"$work/pg.log")
    local s0 t0
    s0=$("$sluice" bench steal)
    t0=$(date +%s.%N)
    pgbench -h 127.0.0.1 -p "$port" -U postgres -n -c 16 -j 2 -R "$base" -T "$seconds" \
        -l --log-prefix="$dir/base" postgres >"$dir/base.out" 2>&1 &
    local main=$!
    : >"$dir/bursts"
    (
        at=20
        while ((burst > 0 && at + 10 <= seconds)); do
            sleep "$(echo "$t0 + $at - $(date +%s.%N)" | bc)"
            echo "$(date +%s.%N) $(echo "$(date +%s.%N) + 10" | bc)" >>"$dir/bursts"
            pgbench -h 127.0.0.1 -p "$port" -U postgres -n -c 8 -j 1 -R "$burst" -T 10 \
                -l --log-prefix="$dir/burst-$at" postgres >"$dir/burst-$at.out" 2>&1
            at=$((at + 40))
        done
    ) &
    local bursts=$!
    wait "$main"
    wait "$bursts"
    local steal
    steal=$("$sluice" bench steal --since "$s0")
    local apply_ms="-"
    if steers "$config"; then
        apply_ms=$(curl -s "http://127.0.0.1:$ADMIN_PORT/stats" |
            python3 -c 'import json,sys; print(round(json.load(sys.stdin)["postgres_background"]["last_apply_ms"], 1))')
    fi
    kill "$sampler"
    wait "$sampler" 2>/dev/null || true
    [[ $config == direct ]] || stop_pg_proxy
    tail -n +"$((log_from + 1))" "$work/pg.log" >"$dir/pg.log"
    row=$(python3 scripts/checkpoint-run.py "$dir" "$t0" "$seconds")
    echo "$round $config $row $steal" | tee -a "$work/runs"
    if steers "$config"; then
        echo "   ($config: the last decision reached PostgreSQL's reload in $apply_ms ms)"
        # The run's decisions, decided again from its observations.
        cp "$work/steering.trace" "$dir/steering.trace"
        echo "   (replayed: $("$sluice" replay "$dir/steering.trace" 2>&1))"
    fi
}

echo "round target tps p99_ms p999_ms worst10s_p99_ratio checkpoints checkpoints_in_bursts wal_checkpoints wal_checkpoints_in_bursts peak_debt_mib burst_wal_mib steal" |
    tee "$work/runs"
for round in $(seq "$rounds"); do
    for config in ${configs//,/ }; do
        run "$config" "$round"
    done
done
mkdir -p results/checkpoints
cp "$work/runs" results/checkpoints/runs.txt
for config in steered eager; do
    if [[ -f $work/sluice-$config.log ]]; then
        cp "$work/sluice-$config.log" results/checkpoints/
    fi
done
for d in "$work"/run-*; do
    cp "$d/pg.log" "results/checkpoints/$(basename "$d")-pg.log"
    cp "$d/windows" "results/checkpoints/$(basename "$d")-windows.txt"
    if [[ -f $d/steering.trace ]]; then
        cp "$d/steering.trace" "results/checkpoints/$(basename "$d")-steering.trace"
    fi
done
echo "rows, 10 s windows, the steered proxy's decisions and traces and PostgreSQL's logs kept in results/checkpoints/"
# Ratios to the defaults where they ran, else to the first configuration.
baseline=defaults
[[ ,$configs, == *,defaults,* ]] || baseline=${configs%%,*}
echo
"$sluice" bench summarize "$work/runs" --baseline "$baseline"
