#!/usr/bin/env bash
# `sluice serve` against Redis 7 under redis-benchmark (target:
# docs/BENCHMARKS.md, "sluice serve under redis-benchmark"): 50 clients,
# durable SET (Redis with `appendonly yes`, `appendfsync always`; sluice
# serve syncs its WAL before it acknowledges), the same with pipelines of
# 16, GET, and GET by 5 clients while 50 others run durable SETs (what a
# reader waits for behind other clients' syncs). Every server starts fresh
# in an empty directory for each run; the targets' order rotates by round.
# Prints each run (requests/s, p50 and p99 ms, the fraction of CPU time
# stolen), then `sluice bench summarize`'s table: per test, each target's
# ratio to Redis paired by round (median, range, each round); runs above
# 10% steal set aside. Not run in CI.
#
#   scripts/bench-serve-redis.sh [ROUNDS] [NAME=SLUICE_BINARY ...]
#
# Default: 3 rounds, one target `sluice`, this tree's release build
# (scripts/lib.sh, find_sluice); give several NAME=BINARY to compare
# builds in the same run.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
find_sluice
rounds=${1:-3}
shift || true
(($# > 0)) || set -- "sluice=$sluice"
declare -A bin=()
targets=(redis)
for t in "$@"; do
    [[ $t == *=* ]] || { echo "targets are NAME=BINARY, got '$t'" >&2; exit 2; }
    bin[${t%%=*}]=${t#*=}
    targets+=("${t%%=*}")
done
apt_install redis-server redis-tools
bench_scratch sluice-bench-serve
PORT=27401

# Starts target $1 fresh in an empty directory; sets $server.
start_target() {
    rm -rf "$work/data"
    mkdir -p "$work/data"
    if [[ $1 == redis ]]; then
        redis-server --port $PORT --dir "$work/data" --save '' --appendonly yes \
            --appendfsync always >"$work/redis.log" 2>&1 &
        server=$!
        pids+=($server)
    else
        start_serve "${bin[$1]}" --dir "$work/data" --port $PORT
    fi
    for _ in $(seq 50); do
        redis-cli -p $PORT PING >/dev/null 2>&1 && return
        sleep 0.1
    done
    echo "$1 did not start" >&2
    exit 1
}

echo "round target test requests/s p50_ms p99_ms steal" | tee "$work/runs"
for round in $(seq "$rounds"); do
    # Rotate the order, so that no target always runs first or last.
    order=("${targets[@]:round % ${#targets[@]}}" "${targets[@]:0:round % ${#targets[@]}}")
    for t in "${order[@]}"; do
        for test in set set-p16 get get-under-set; do
            start_target "$t"
            clients=50
            case $test in
                set) args=(-t set -n 100000) ;;
                set-p16) args=(-t set -P 16 -n 400000) ;;
                get) args=(-t get -n 200000) ;;
                get-under-set)
                    redis-benchmark -p $PORT -c 50 -t set -n 10000000 >/dev/null 2>&1 &
                    writers=$!
                    pids+=($writers)
                    sleep 1
                    clients=5
                    args=(-t get -n 20000)
                    ;;
            esac
            s0=$("$sluice" bench steal)
            csv=$(redis-benchmark -p $PORT -c $clients "${args[@]}" --csv)
            steal=$("$sluice" bench steal --since "$s0")
            if [[ $test == get-under-set ]]; then
                kill "$writers"
                wait "$writers" 2>/dev/null || true
            fi
            read -r rps p50 p99 < <(awk -F'"' 'NR==2{print $4, $10, $14}' <<<"$csv")
            echo "$round $t $test $rps $p50 $p99 $steal" | tee -a "$work/runs"
            kill "$server"
            wait "$server" 2>/dev/null || true
        done
    done
done
echo
"$sluice" bench summarize "$work/runs" --baseline redis --by test
