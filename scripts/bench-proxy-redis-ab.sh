#!/usr/bin/env bash
# Two builds of `sluice proxy` in front of one Redis, A/B: redis-benchmark
# SET and GET (50 clients) through each, order alternating each round,
# with the proxies on CPU 1 (one worker thread each) and redis-server and
# redis-benchmark on CPU 0, so that the load generator does not take the
# proxy's core and a few percent of cost shows through the noise. Prints
# each run (requests/s, the proxy's CPU seconds, the fraction of CPU time
# stolen), then `sluice bench summarize`'s table: per test, the ratios B / A
# paired by round (median, range, each round) of throughput and of the
# proxy's CPU seconds, which, every run making the same number of
# requests, is the ratio of CPU per request; runs above 10% steal set
# aside. Not run in CI.
#
#   scripts/bench-proxy-redis-ab.sh A_BINARY B_BINARY [ROUNDS] [REQUESTS]
#
# e.g. the build before a change (copied away) as A, target/release/sluice
# as B. Both proxies: P = 64 pinned, a tenant per connection, no admin port.
# The steal, the CPU time and the table come from this tree's sluice
# (scripts/lib.sh, find_sluice), whatever A and B are.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
[[ $# -ge 2 ]] || { sed -n '2,19p' "$0"; exit 2; }
declare -A bin=([a]=$1 [b]=$2)
rounds=${3:-12} requests=${4:-200000}
for t in a b; do [[ -x ${bin[$t]} ]] || { echo "not an executable: ${bin[$t]}" >&2; exit 2; }; done
(( $(nproc) >= 2 )) || { echo "needs 2 CPUs (proxies on one, Redis and the load on the other)" >&2; exit 2; }
apt_install redis-server redis-tools
find_sluice
bench_scratch sluice-bench-redis-ab
REDIS_PORT=26391
declare -A port=([a]=27391 [b]=27392) pid
taskset -c 0 redis-server --port $REDIS_PORT --save '' --appendonly no --maxclients 10000 >"$work/redis.log" 2>&1 &
pids+=($!)
for t in a b; do
    printf '[proxy]\nlisten = "127.0.0.1:%s"\nupstream = "127.0.0.1:%s"\nprotocol = "redis"\ntenant_key = "connection"\nthreads = 1\n[admin]\nlisten = ""\n[gate]\nparallelism = 64\n[optimizer]\nparallelism = "fixed"\n' \
        "${port[$t]}" "$REDIS_PORT" >"$work/$t.toml"
    taskset -c 1 "${bin[$t]}" proxy --config "$work/$t.toml" 2>"$work/$t.log" &
    pids+=($!)
    pid[$t]=$!
done
sleep 1
for t in a b; do kill -0 "${pid[$t]}" 2>/dev/null || { cat "$work/$t.log"; echo "proxy $t did not start" >&2; exit 1; }; done
echo "round target test requests/s proxy_cpu_s steal" | tee "$work/runs"
for round in $(seq "$rounds"); do
    order="a b"; (( round % 2 )) || order="b a"
    for t in $order; do
        for test in set get; do
            c0=$("$sluice" bench cpu --pid "${pid[$t]}"); s0=$("$sluice" bench steal)
            rps=$(taskset -c 0 redis-benchmark -p "${port[$t]}" -t $test -c 50 -n "$requests" --csv | awk -F'"' 'NR==2{print $4}')
            cpu=$("$sluice" bench cpu --pid "${pid[$t]}" --since "$c0"); steal=$("$sluice" bench steal --since "$s0")
            echo "$round $t $test $rps $cpu $steal" | tee -a "$work/runs"
        done
    done
done
echo
"$sluice" bench summarize "$work/runs" --baseline a --by test
