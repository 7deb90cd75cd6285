#!/usr/bin/env bash
# The main job: `sluice demo`. sluice-kv on an emulated cloud volume runs
# YCSB-A from 3 tenants right after loading, while flush and compaction are
# busy: once with no prioritization (FIFO), once with Sluice (RCP at every
# layer plus the background controller), and once after compaction has
# settled. Prints the side-by-side table and writes results/demo/report.html.
# About a minute after the first build (which takes a few minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
ensure_rust
cargo build --release --quiet
./target/release/sluice demo --out results/demo "$@"
