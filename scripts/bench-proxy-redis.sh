#!/usr/bin/env bash
# sluice proxy in front of Redis (targets: docs/BENCHMARKS.md, "`sluice
# proxy` in front of Redis"): redis-benchmark
# GET/SET with 50 clients directly, through sluice proxy (default: shared
# upstream lanes for clients in the default session state), through sluice
# proxy with a connection of its own per client (`sluice-own`,
# shared_upstreams = 0) and through twemproxy (nutcracker), interleaved and
# repeated, with CPU steal per run, and `sluice bench summarize`'s table of
# them (per client count and target: medians, ratios to Redis directly
# paired by round; runs above 10% steal set aside); then the proxy's
# memory with 5,000 idle client connections.
#
#   scripts/bench-proxy-redis.sh [ROUNDS] [REQUESTS]
#
# Environment: CLIENTS="1 50" runs each client count (default 50).
#              YCSB=A then also runs `sluice bench redis` with that YCSB
#              workload against the same targets: one closed-loop user per
#              connection (the last of CLIENTS users), per-user U_f and V_l.
#              LOCAL=1 also runs redis-benchmark through Unix sockets
#              (-s): direct-local on Redis's own socket, and sluice-local,
#              listening on a socket file with Redis's socket upstream.
#              BASE=path/to/sluice also runs sluice-base: the same proxy
#              and configuration as `sluice` from another build (copy
#              target/release/sluice away before a change), on its own
#              port, interleaved with the others, to measure the change.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
apt_install redis-server redis-tools nutcracker
find_sluice
rounds=${1:-3} requests=${2:-100000}

# Below the ephemeral range, so that no client connection holds them.
REDIS_PORT=26379 SLUICE_PORT=27379 ADMIN_PORT=27380 BASE_PORT=27384 OWN_PORT=27389 LOCAL_PORT=27399 TWEM_PORT=28379
bench_scratch sluice-bench-redis

redis-server --port $REDIS_PORT --unixsocket "$work/redis.sock" --unixsocketperm 700 \
    --save '' --appendonly no --maxclients 10000 >"$work/redis.log" 2>&1 &
pids+=($!)
cat >"$work/sluice.toml" <<TOML
[proxy]
listen = "127.0.0.1:$SLUICE_PORT"
upstream = "127.0.0.1:$REDIS_PORT"
protocol = "redis"
tenant_key = "connection"
[admin]
listen = "127.0.0.1:$ADMIN_PORT"
[gate]
parallelism = 64     # more than the clients: this measures the proxy's own cost
[optimizer]
parallelism = "fixed"
TOML
"$sluice" proxy --config "$work/sluice.toml" 2>"$work/sluice.log" &
pids+=($!)
sluice_pid=$!
sed -e "s/:$SLUICE_PORT\"/:$OWN_PORT\"/" -e 's/^listen = "127.0.0.1:'$ADMIN_PORT'"/listen = ""/' \
    -e 's/^tenant_key = .*/&\nshared_upstreams = 0/' "$work/sluice.toml" >"$work/sluice-own.toml"
"$sluice" proxy --config "$work/sluice-own.toml" 2>"$work/sluice-own.log" &
pids+=($!)
cat >"$work/twemproxy.yml" <<YML
sluice:
  listen: 127.0.0.1:$TWEM_PORT
  redis: true
  servers:
   - 127.0.0.1:$REDIS_PORT:1
YML
nutcracker -c "$work/twemproxy.yml" -o "$work/twemproxy.log" &
pids+=($!)
targets="direct:$REDIS_PORT sluice:$SLUICE_PORT"
ycsb_targets=direct=127.0.0.1:$REDIS_PORT,sluice=127.0.0.1:$SLUICE_PORT
if [[ -n "${BASE:-}" ]]; then
    # The same configuration as `sluice` on its own port, without an admin port.
    sed -e "s/:$SLUICE_PORT\"/:$BASE_PORT\"/" -e 's/^listen = "127.0.0.1:'$ADMIN_PORT'"/listen = ""/' \
        "$work/sluice.toml" >"$work/sluice-base.toml"
    "$BASE" proxy --config "$work/sluice-base.toml" 2>"$work/sluice-base.log" &
    pids+=($!)
    targets+=" sluice-base:$BASE_PORT"
    ycsb_targets+=",sluice-base=127.0.0.1:$BASE_PORT"
fi
targets+=" sluice-own:$OWN_PORT twemproxy:$TWEM_PORT"
ycsb_targets+=",sluice-own=127.0.0.1:$OWN_PORT,twemproxy=127.0.0.1:$TWEM_PORT"
if [[ -n "${LOCAL:-}" ]]; then
    cat >"$work/sluice-local.toml" <<TOML
[proxy]
listen = "127.0.0.1:$LOCAL_PORT"
listen_unix = "$work/sluice.sock"
upstream = "$work/redis.sock"
protocol = "redis"
tenant_key = "connection"
[admin]
listen = ""
[gate]
parallelism = 64
[optimizer]
parallelism = "fixed"
TOML
    "$sluice" proxy --config "$work/sluice-local.toml" 2>"$work/sluice-local.log" &
    pids+=($!)
    targets+=" direct-local:$work/redis.sock sluice-local:$work/sluice.sock"
fi
sleep 1
for p in "${pids[@]}"; do kill -0 "$p" || { cat "$work"/*.log; echo "a server did not start" >&2; exit 1; }; done

echo "clients round target SET/s GET/s SET_p50_ms GET_p50_ms steal" | tee "$work/runs"
for clients in ${CLIENTS:-50}; do
for round in $(seq "$rounds"); do
    for target in $targets; do
        at=${target#*:} where=(-p "${target#*:}")
        [[ $at == /* ]] && where=(-s "$at")
        s0=$("$sluice" bench steal)
        csv=$(redis-benchmark "${where[@]}" -t set,get -c "$clients" -n "$requests" --csv)
        steal=$("$sluice" bench steal --since "$s0")
        read -r set_rps set_p50 < <(awk -F'"' '$2 == "SET" {print $4, $10}' <<<"$csv")
        read -r get_rps get_p50 < <(awk -F'"' '$2 == "GET" {print $4, $10}' <<<"$csv")
        echo "$clients $round ${target%%:*} $set_rps $get_rps $set_p50 $get_p50 $steal" | tee -a "$work/runs"
    done
done
done
echo
"$sluice" bench summarize "$work/runs" --baseline direct --by clients

if [[ -n "${YCSB:-}" ]]; then
    echo "== sluice bench redis, YCSB-$YCSB"
    "$sluice" bench redis --targets "$ycsb_targets" --users "${clients##* }" --workload "$YCSB" --rounds "$rounds"
fi

echo "== idle connections: proxy RSS"
python3 - "$SLUICE_PORT" "$sluice_pid" <<'PY'
import socket, sys
port, pid = int(sys.argv[1]), sys.argv[2]
def rss_kib():
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
before = rss_kib()
conns = []
for _ in range(5000):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"PING\r\n")
    conns.append(s)
for s in conns:
    assert s.recv(16).startswith(b"+PONG"), "every connection answered"
after = rss_kib()
print(f"RSS {before} KiB with no clients, {after} KiB with {len(conns)} idle connections: "
      f"{(after - before) / len(conns):.1f} KiB per idle connection (target <= 64)")
PY
