#!/usr/bin/env bash
# The router's cost: sluice route against twemproxy (Debian's nutcracker)
# in front of the same two Redis shards, and Redis directly as the floor.
# redis-benchmark (50 clients) runs SET, GET and a 100-key MGET through
# each target, the targets' order alternating each round, with both
# routers on CPU 1 and Redis and redis-benchmark on CPU 0, so that the load
# generator does not take the routers' core. Prints each run (requests/s,
# p50 ms, the fraction of CPU time stolen), then `sluice bench summarize`'s
# table: per test and target, the ratios to twemproxy of throughput and of
# median latency paired by round (median, range, each round), and the
# difference to Redis directly (for p50, the median latency each adds);
# runs above 10% steal set aside. Not run in CI.
#
#   [PIPELINE=16] scripts/bench-route-twemproxy.sh [SLUICE_BINARY] [ROUNDS] [REQUESTS]
#
# PIPELINE: each redis-benchmark client sends that many requests before it
# reads their replies (its -P; default 1).
# Default binary: this tree's target/release/sluice (built if need be;
# scripts/lib.sh, find_sluice), which also reads the steal and prints the
# table whatever binary routes.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
find_sluice
bin=${1:-$sluice} rounds=${2:-7} requests=${3:-100000} pipeline=${PIPELINE:-1}
(( $(nproc) >= 2 )) || { echo "needs 2 CPUs (routers on one, Redis and the load on the other)" >&2; exit 2; }
apt_install redis-server redis-tools nutcracker
bench_scratch sluice-bench-route
shards=(26401 26402)
declare -A port=([direct]=26401 [route]=26411 [twemproxy]=26412)
for p in "${shards[@]}"; do
    taskset -c 0 redis-server --port "$p" --save '' --appendonly no --maxclients 10000 >"$work/redis-$p.log" 2>&1 &
    pids+=($!)
done
cat >"$work/route.toml" <<TOML
listen = "127.0.0.1:${port[route]}"
[[shard]]
name = "a"
addr = "127.0.0.1:${shards[0]}"
slots = "0-8191"
kind = "redis"
[[shard]]
name = "b"
addr = "127.0.0.1:${shards[1]}"
slots = "8192-16383"
kind = "redis"
[pool]
size = 64
order = "fifo"
TOML
cat >"$work/twemproxy.yml" <<YML
alpha:
  listen: 127.0.0.1:${port[twemproxy]}
  hash: fnv1a_64
  distribution: ketama
  redis: true
  auto_eject_hosts: false
  servers:
   - 127.0.0.1:${shards[0]}:1
   - 127.0.0.1:${shards[1]}:1
YML
taskset -c 1 "$bin" route --config "$work/route.toml" 2>"$work/route.log" &
pids+=($!)
taskset -c 1 nutcracker -c "$work/twemproxy.yml" -o "$work/twemproxy.log" &
pids+=($!)
sleep 1
mget=(MGET)
for i in $(seq 100); do mget+=("key:$i"); done
for t in route twemproxy; do
    redis-cli -p "${port[$t]}" PING >/dev/null || { cat "$work/$t.log"; echo "$t did not start" >&2; exit 1; }
done
# The MGET's keys, written through the router (any target would do: the
# shards are the same; each router finds them where its hash puts them).
for t in route twemproxy; do
    for i in $(seq 100); do printf 'SET key:%s value-%s\n' "$i" "$i"; done | redis-cli -p "${port[$t]}" >/dev/null
done
echo "round target test requests/s p50_ms steal" | tee "$work/runs"
targets=(direct route twemproxy)
for round in $(seq "$rounds"); do
    (( round % 2 )) && order=("${targets[@]}") || order=(twemproxy route direct)
    for t in "${order[@]}"; do
        for test in set get mget; do
            [[ $t == direct && $test == mget ]] && continue
            s0=$("$sluice" bench steal)
            if [[ $test == mget ]]; then
                csv=$(taskset -c 0 redis-benchmark -p "${port[$t]}" -c 50 -P "$pipeline" -n $((requests / 10)) --csv "${mget[@]}")
            else
                csv=$(taskset -c 0 redis-benchmark -p "${port[$t]}" -t $test -c 50 -P "$pipeline" -n "$requests" --csv)
            fi
            steal=$("$sluice" bench steal --since "$s0")
            read -r rps p50 < <(awk -F'"' 'NR==2{print $4, $10}' <<<"$csv")
            echo "$round $t $test $rps $p50 $steal" | tee -a "$work/runs"
        done
    done
done
echo
"$sluice" bench summarize "$work/runs" --baseline twemproxy --by test --difference-to direct
