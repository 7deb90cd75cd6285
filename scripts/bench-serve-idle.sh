#!/usr/bin/env bash
# Idle clients of `sluice serve` (target: docs/BENCHMARKS.md, "Idle
# clients of sluice serve"): the server's resident memory and threads with
# no client, with N clients connected and idle (each has sent one PING and
# read its reply, as a pool's connection does), and a few seconds after
# they have left.
#
#   scripts/bench-serve-idle.sh [CLIENTS] [SLUICE...]
#
# CLIENTS defaults to 10,000. With SLUICE binaries given, each is measured
# in turn (to compare builds); by default the release build of this tree.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
clients=${1:-10000}
shift || true
if (($# == 0)); then
    ensure_rust
    cargo build --release -p sluice
    set -- ./target/release/sluice
fi
PORT=27392
bench_scratch sluice-serve-idle

for sluice in "$@"; do
    rm -rf "$work/kv"
    start_serve "$sluice" --dir "$work/kv" --port $PORT
    echo "== $sluice"
    python3 - "$PORT" "$server" "$clients" <<'PY'
import socket, sys, time
port, pid, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
def status():
    fields = dict(line.split(":", 1) for line in open(f"/proc/{pid}/status"))
    return int(fields["VmRSS"].split()[0]), int(fields["Threads"])
rss0, threads0 = status()
conns = []
for _ in range(n):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"PING\r\n")
    conns.append(s)
for s in conns:
    assert s.recv(16).startswith(b"+PONG"), "every connection answered"
time.sleep(1)
rss1, threads1 = status()
for s in conns:
    s.close()
time.sleep(3)
rss2, threads2 = status()
print(f"no client: RSS {rss0} KiB, {threads0} threads; {n} idle clients: RSS {rss1} KiB, "
      f"{threads1} threads, {(rss1 - rss0) / n:.1f} KiB each (target <= 32); "
      f"3 s after they left: RSS {rss2} KiB, {threads2} threads")
PY
    kill "$server"
    wait "$server" 2>/dev/null || true
done
