#!/usr/bin/env bash
# Two builds of `sluice proxy` in front of one Redis, A/B: redis-benchmark
# SET and GET (50 clients) through each, order alternating each round,
# with the proxies on CPU 1 (one worker thread each) and redis-server and
# redis-benchmark on CPU 0, so that the load generator does not take the
# proxy's core and a few percent of cost shows through the noise. Prints
# each run (requests/s, the proxy's CPU per request from /proc, steal),
# then the ratios B / A paired by round (median, range) of throughput and
# CPU per request. Not run in CI.
#
#   scripts/bench-proxy-redis-ab.sh A_BINARY B_BINARY [ROUNDS] [REQUESTS]
#
# e.g. the build before a change (copied away) as A, target/release/sluice
# as B. Both proxies: P = 64 pinned, a tenant per connection, no admin port.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
[[ $# -ge 2 ]] || { sed -n '2,14p' "$0"; exit 2; }
declare -A bin=([a]=$1 [b]=$2)
rounds=${3:-12} requests=${4:-200000}
for t in a b; do [[ -x ${bin[$t]} ]] || { echo "not an executable: ${bin[$t]}" >&2; exit 2; }; done
(( $(nproc) >= 2 )) || { echo "needs 2 CPUs (proxies on one, Redis and the load on the other)" >&2; exit 2; }
apt_install redis-server redis-tools
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
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
echo "round target test requests/s cpu_us_per_request steal%" | tee "$work/runs"
for round in $(seq "$rounds"); do
    order="a b"; (( round % 2 )) || order="b a"
    for t in $order; do
        for test in set get; do
            c0=$(cpu_ticks "${pid[$t]}"); read -r t0 s0 < <(steal_ticks)
            rps=$(taskset -c 0 redis-benchmark -p "${port[$t]}" -t $test -c 50 -n "$requests" --csv | awk -F'"' 'NR==2{print $4}')
            c1=$(cpu_ticks "${pid[$t]}"); read -r t1 s1 < <(steal_ticks)
            awk -v r="$round" -v t="$t" -v x=$test -v rps="$rps" -v c=$((c1 - c0)) -v n="$requests" -v hz="$(getconf CLK_TCK)" \
                -v st=$((s1 - s0)) -v tt=$((t1 - t0)) \
                'BEGIN{printf "%d %s %s %.0f %.3f %.1f\n", r, t, x, rps, 1e6*c/hz/n, 100*st/tt}' | tee -a "$work/runs"
        done
    done
done
python3 - "$work/runs" <<'PY'
import sys
rows = {}
for line in open(sys.argv[1]).readlines()[1:]:
    r, t, test, rps, cpu, steal = line.split()
    rows[(int(r), t, test)] = (float(rps), float(cpu), float(steal))
rounds = sorted({k[0] for k in rows})
def spread(xs):
    xs = sorted(xs)
    return f"{xs[len(xs) // 2]:.3f} ({xs[0]:.2f}-{xs[-1]:.2f})"
print("\nB / A, paired by round: median (range); rounds with steal above 10% are set aside")
for test in ("set", "get"):
    kept = [r for r in rounds if max(rows[(r, t, test)][2] for t in "ab") <= 10]
    tps = [rows[(r, "b", test)][0] / rows[(r, "a", test)][0] for r in kept]
    cpu = [rows[(r, "b", test)][1] / rows[(r, "a", test)][1] for r in kept]
    print(f"{test.upper()}: throughput {spread(tps)}, first round {tps[0]:.2f}; CPU per request {spread(cpu)}; {len(kept)} of {len(rounds)} rounds")
PY
