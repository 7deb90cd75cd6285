#!/usr/bin/env bash
# Runs every shipped TraQIOS scenario (and, with --variants, the named
# interpretation variants) and writes their tables to results/<name>/table.txt
# beside the CSV, JSON and SVG files. Takes 10-20 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
ensure_rust
cargo build --release --quiet
files=(scenarios/fig*.toml)
if [[ "${1:-}" == "--variants" ]]; then
    files+=(scenarios/variants/*.toml)
fi
for f in "${files[@]}"; do
    name=$(basename "$f" .toml)
    echo "== $f"
    mkdir -p "results/$name"
    ./target/release/sluice sim "$f" --out "results/$name" | tee "results/$name/table.txt"
done
