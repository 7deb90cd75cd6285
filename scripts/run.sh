#!/usr/bin/env bash
# The main job: the TraQIOS comparison on the simulator (Fig. 4/5 of the
# paper: EDF, SSTF, FD-SCAN, SSEDV and TraQIOS from utilization 0.1 to 0.99,
# 5 seeds each). Prints the tables and writes CSV, JSON and SVG plots to
# results/fig4/. About a minute on 2 cores after the first build.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
ensure_rust
cargo build --release --quiet
./target/release/sluice sim scenarios/fig4.toml --out results/fig4 "$@"
