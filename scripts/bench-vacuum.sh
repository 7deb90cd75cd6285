#!/usr/bin/env bash
# PostgreSQL's autovacuum paced by the proxy (targets: docs/BENCHMARKS.md,
# "Autovacuum, paced"): pgbench's TPC-B-like script at scale 100 through
# sluice proxy (P pinned at 16), open loop at a fixed rate (400/s), while
# an autovacuum worker vacuums pgbench_accounts. Before each run the table
# gets the same dead rows (pgbench unthrottled, straight to PostgreSQL, with
# autovacuum off on the table), then a checkpoint; 10 s into the run the
# table's autovacuum is switched on with a threshold it has passed (and the
# run's own updates do not reach again), and a worker starts on it within a
# second (autovacuum_naptime = 1s). Four
# configurations, interleaved and repeated:
#
#   none      the table's autovacuum stays off: the foreground alone
#   unpaced   autovacuum_vacuum_cost_delay = 0: the vacuum's own speed
#   defaults  PostgreSQL's pace (2 ms per 200 cost units)
#   steered   [postgres.background.vacuum] with its defaults
#   flushed   unpaced, and backend_flush_after = 256kB: the vacuum's writes
#             handed to the disk as it makes them (sync_file_range), not
#             left for the kernel to write back in one burst later
#
# Per run: throughput, the run's p99, the vacuum's time (PostgreSQL's
# log) and the foreground's p99 and p99.9 while it ran and in the 30 s
# after it, when the kernel writes its dirty pages back (for `none`, from
# the moment the others switch the vacuum on to the end), CPU steal; for
# the steered run, its trace decided again by `sluice replay`.
# Then `sluice bench summarize`'s tables: ratios to `none` (the target:
# p99 while vacuumed at most 1.2x) and to `unpaced` (the vacuum's time at
# most 2x), paired by round.
#
# With --rest-at S the foreground falls to a tenth of its rate S seconds
# into the run (give S > 10, after the vacuum has started): the steered
# vacuum should hurry from then on, mid-table, where PostgreSQL's pace
# keeps on. --configs picks and orders the configurations.
#
#   scripts/bench-vacuum.sh [--rounds 3] [--seconds 90] [--scale 100] [--rate 400] [--dirty 80000]
#                           [--rest-at S] [--configs none,unpaced,defaults,steered,flushed]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
rounds=3 seconds=90 scale=100 rate=400 dirty=80000 rest_at="" configs=none,unpaced,defaults,steered
while [[ $# -gt 0 ]]; do
    case $1 in
        --rounds) rounds=$2; shift 2 ;;
        --seconds) seconds=$2; shift 2 ;;
        --scale) scale=$2; shift 2 ;;
        --rate) rate=$2; shift 2 ;;
        --dirty) dirty=$2; shift 2 ;;
        --rest-at) rest_at=$2; shift 2 ;;
        --configs) configs=$2; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "unknown option $1 (try --help)" >&2; exit 2 ;;
    esac
done
if [[ -n $rest_at ]] && ! ((rest_at > 10 && rest_at < seconds)); then
    echo "--rest-at must lie between 10 (the vacuum's start) and --seconds ($seconds), got $rest_at" >&2
    exit 2
fi
for config in ${configs//,/ }; do
    case $config in
        none|unpaced|defaults|steered|flushed) ;;
        *) echo "unknown configuration $config in --configs (none, unpaced, defaults, steered, flushed)" >&2; exit 2 ;;
    esac
done
apt_install postgresql-15 postgresql-client-15
find_sluice

# Below the ephemeral range, so that no client connection holds them.
PG_PORT=25462 SLUICE_PORT=27462 ADMIN_PORT=27463
bench_scratch sluice-bench-vacuum

echo "== PostgreSQL 15 on port $PG_PORT ($work), fsync on, autovacuum logged; checkpoints out of the runs"
# In the configuration file, not on the command line: the steered proxy
# refuses to steer settings pinned where ALTER SYSTEM cannot reach, and it
# steers checkpoints too (to these same values, below); shared_buffers so
# that it does not differ from initdb's line there, which every reload
# would log as an error in the file.
CONF_LINES="max_wal_size = '8GB'
checkpoint_timeout = '1h'
shared_buffers = '256MB'" start_pg autovacuum_naptime=1s \
    log_autovacuum_min_duration=0 "log_line_prefix=%m "
echo "== pgbench -i -s $scale"
pgbench -i -q -s "$scale" -h 127.0.0.1 -p $PG_PORT -U postgres postgres 2>&1 | tail -1
psql_db -c "ALTER TABLE pgbench_accounts SET (autovacuum_enabled = false)"

# The pace each configuration starts from; the table gets its dead rows.
prepare() {
    psql_db -c "ALTER SYSTEM RESET autovacuum_vacuum_cost_limit"
    if [[ $1 == unpaced || $1 == flushed ]]; then
        psql_db -c "ALTER SYSTEM SET autovacuum_vacuum_cost_delay = 0"
    else
        psql_db -c "ALTER SYSTEM RESET autovacuum_vacuum_cost_delay"
    fi
    if [[ $1 == flushed ]]; then
        psql_db -c "ALTER SYSTEM SET backend_flush_after = '256kB'"
    else
        psql_db -c "ALTER SYSTEM RESET backend_flush_after"
    fi
    psql_db -c "SELECT pg_reload_conf()" >/dev/null
    psql_db -c "ALTER TABLE pgbench_accounts SET (autovacuum_enabled = false)"
    pgbench -h 127.0.0.1 -p $PG_PORT -U postgres -n -c 8 -j 2 -t $((dirty / 8)) postgres >/dev/null
    psql_db -c "CHECKPOINT"
}

# The steered configuration adds the vacuum controller, and steers
# checkpoints to the same 8 GB and 1 h the others have in postgresql.conf.
start_proxy() {
    local steering=""
    [[ $1 == steered ]] && steering="[postgres.background.checkpoint]
max_recovery_wal_mib = 8192
timeout_s = 3600
[postgres.background.vacuum]"
    start_pg_proxy "$1" "$steering"
}

run() {
    local config=$1 round=$2 dir="$work/run-$1-$2"
    mkdir -p "$dir"
    prepare "$config"
    start_proxy "$config"
    local log_from
    log_from=$(wc -l <"$work/pg.log")
    local s0 t0
    s0=$("$sluice" bench steal)
    t0=$(date +%s.%N)
    pgbench -h 127.0.0.1 -p $SLUICE_PORT -U postgres -n -c 16 -j 2 -R "$rate" -T "${rest_at:-$seconds}" \
        -l --log-prefix="$dir/base" postgres >"$dir/base.out" 2>&1 &
    local main=$!
    sleep 10
    echo "$(date +%s.%N)" >"$dir/switched"
    # A threshold the dead rows passed, which the run's own updates do not
    # reach again: one vacuum per run.
    local threshold=$((dirty / 4 > rate * seconds ? dirty / 4 : rate * seconds))
    if [[ $config != none ]]; then
        psql_db -c "ALTER TABLE pgbench_accounts SET (autovacuum_enabled = true, \
            autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = $threshold)"
    fi
    wait "$main"
    if [[ -n $rest_at ]]; then
        pgbench -h 127.0.0.1 -p $SLUICE_PORT -U postgres -n -c 16 -j 2 -R "$((rate / 10))" \
            -T "$((seconds - rest_at))" -l --log-prefix="$dir/rest" postgres >"$dir/rest.out" 2>&1
    fi
    local steal
    steal=$("$sluice" bench steal --since "$s0")
    stop_pg_proxy
    tail -n +"$((log_from + 1))" "$work/pg.log" >"$dir/pg.log"
    row=$(python3 scripts/vacuum-run.py "$dir" "$t0" "$seconds")
    echo "$round $config $row $steal" | tee -a "$work/runs"
    if [[ $config == steered ]]; then
        # The run's decisions, decided again from its observations.
        cp "$work/steering.trace" "$dir/steering.trace"
        echo "   (replayed: $("$sluice" replay "$dir/steering.trace" 2>&1))"
    fi
}

echo "round target tps p99_ms vacuum_s vacuum_p99_ms vacuum_p999_ms steal" | tee "$work/runs"
for round in $(seq "$rounds"); do
    for config in ${configs//,/ }; do
        run "$config" "$round"
    done
done
for baseline in none unpaced; do
    [[ ,$configs, == *,$baseline,* ]] || continue
    echo
    echo "== against $baseline"
    "$sluice" bench summarize "$work/runs" --baseline $baseline
done
mkdir -p results/vacuum
cp "$work/runs" results/vacuum/runs.txt
[[ -f $work/sluice-steered.log ]] && cp "$work/sluice-steered.log" results/vacuum/
for d in "$work"/run-*; do
    cp "$d/pg.log" "results/vacuum/$(basename "$d")-pg.log"
    if [[ -f $d/steering.trace ]]; then
        cp "$d/steering.trace" "results/vacuum/$(basename "$d")-steering.trace"
    fi
done
echo "rows, the steered proxy's log and traces and PostgreSQL's logs kept in results/vacuum/"
