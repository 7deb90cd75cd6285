#!/usr/bin/env bash
# Times the full Fig. 4 experiment and records its peak RSS, with 2 worker
# threads and with 1 (the baseline, measured in the same run), interleaved
# and repeated; CPU steal of each run comes from /proc/stat. Runs with more
# than 10% steal are marked and should be set aside.
#   scripts/bench_fig4.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
ensure_rust
cargo build --release --quiet
rounds=${1:-3}
cpu() { awk '/^cpu /{t=0; for(i=2;i<=9;i++) t+=$i; print t, $9}' /proc/stat; }
out=$(mktemp -d)
printf "%-6s %-5s %10s %12s %8s\n" round jobs seconds peak_rss_MiB steal
for r in $(seq 1 "$rounds"); do
    for jobs in 2 1; do
        read -r t0 s0 < <(cpu)
        /usr/bin/time -f "%e %M" -o "$out/time" ./target/release/sluice sim scenarios/fig4.toml \
            --quiet --jobs "$jobs" --out "$out/fig4" 2>/dev/null
        read -r t1 s1 < <(cpu)
        read -r secs rss_kib < "$out/time"
        steal=$(awk -v a="$((s1 - s0))" -v b="$((t1 - t0))" 'BEGIN{printf "%.1f%%", b ? 100*a/b : 0}')
        printf "%-6s %-5s %10s %12.1f %8s\n" "$r" "$jobs" "$secs" "$(awk -v k="$rss_kib" 'BEGIN{print k/1024}')" "$steal"
    done
done
rm -rf "$out"
