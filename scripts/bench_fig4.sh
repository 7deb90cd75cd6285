#!/usr/bin/env bash
# Times the full Fig. 4 experiment and records its peak RSS, with 2 worker
# threads (jobs-2) and with 1 (jobs-1, the baseline, measured in the same
# round), interleaved and repeated, with the CPU steal of each run. Prints
# each run, then `sluice bench summarize`'s table: medians, and the ratios
# to jobs-1 paired by round; runs above 10% steal set aside.
#   scripts/bench_fig4.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
find_sluice
rounds=${1:-3}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "round target seconds peak_rss_kib steal" | tee "$out/runs"
for r in $(seq 1 "$rounds"); do
    for jobs in 2 1; do
        s0=$("$sluice" bench steal)
        /usr/bin/time -f "%e %M" -o "$out/time" "$sluice" sim scenarios/fig4.toml \
            --quiet --jobs "$jobs" --out "$out/fig4" 2>/dev/null
        steal=$("$sluice" bench steal --since "$s0")
        read -r secs rss_kib < "$out/time"
        echo "$r jobs-$jobs $secs $rss_kib $steal" | tee -a "$out/runs"
    done
done
echo
"$sluice" bench summarize "$out/runs" --baseline jobs-1
