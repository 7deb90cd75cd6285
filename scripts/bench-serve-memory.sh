#!/usr/bin/env bash
# Memory of `sluice serve` under YCSB-A (target: docs/BENCHMARKS.md,
# "`sluice serve` memory under YCSB-A"): the server's
# resident memory after every run of `sluice bench redis`, to check that it
# stays within its memtable and block-cache budget plus 64 MiB and does not
# grow with the number of operations run.
#
#   scripts/bench-serve-memory.sh [ROUNDS] [SECONDS]
#
# The store: 4 MiB memtables (up to 2 frozen ones wait for flush, so 12 MiB
# of memtables at most) and an 8 MiB block cache: budget 20 MiB + 64 MiB.
# Writes are acknowledged before the WAL sync (--no-sync), so that the run
# is many operations rather than many fsyncs.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
ensure_rust
cargo build --release -p sluice
rounds=${1:-6} seconds=${2:-30}
PORT=27391
bench_scratch sluice-serve-memory

start_serve ./target/release/sluice --dir "$work/kv" --port $PORT --no-sync \
    --memtable-mb 4 --block-cache-mb 8
./target/release/sluice bench redis --targets "kv=127.0.0.1:$PORT" --users 16 --workload A \
    --records 200000 --seconds "$seconds" --rounds "$rounds" --rss-pid "$server"
