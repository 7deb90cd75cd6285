#!/usr/bin/env bash
# pgbench itself against several targets, interleaved round by round: each
# run opens its clients' connections afresh and closes them at its end, as
# a user's pgbench runs do (`sluice bench pg` keeps its users connected
# from warm-up to the end). Used by `PGBENCH=1 scripts/bench-proxy.sh`.
#
#   scripts/pgbench-rounds.sh NAME=HOST:PORT[,NAME=HOST:PORT...] \
#       [--users 8,256] [--rounds 3] [--seconds 20] [--warmup 20]
#
# Every target first gets one unmeasured run of --warmup seconds at each
# user count (sluice's model samples a level of demand the first time).
# Prints one line per run (TPS, CPU steal during it), then per user count
# and target the median TPS and, paired by round, the ratios to the first
# target. pgbench's scale must already be initialised
# (postgres database, user postgres).
set -euo pipefail
targets=${1:?usage: $0 NAME=HOST:PORT[,...] [--users 8,256] [--rounds 3] [--seconds 20] [--warmup 20]}
shift
users=8,256 rounds=3 seconds=20 warmup=20
while [[ $# -gt 0 ]]; do
    case $1 in
        --users) users=$2 ;;
        --rounds) rounds=$2 ;;
        --seconds) seconds=$2 ;;
        --warmup) warmup=$2 ;;
        *) echo "pgbench-rounds.sh: unknown option $1 (--users, --rounds, --seconds, --warmup)" >&2; exit 2 ;;
    esac
    shift 2
done
IFS=, read -ra targets <<<"$targets"
IFS=, read -ra users <<<"$users"

# cpu_ticks: "steal total" from /proc/stat.
cpu_ticks() { awk '/^cpu / { t = 0; for (i = 2; i <= 9; i++) t += $i; print $9, t }' /proc/stat; }

# run TARGET USERS SECONDS: prints the run's TPS and its steal in percent.
run() {
    local addr=${1#*=} before after tps
    before=$(cpu_ticks)
    tps=$(pgbench -n -c "$2" -j 2 -T "$3" -h "${addr%:*}" -p "${addr##*:}" -U postgres postgres 2>&1 |
        awk '/^tps = / { print $3; exit }')
    after=$(cpu_ticks)
    [[ -n $tps ]] || { echo "pgbench against $1 reported no TPS" >&2; exit 1; }
    echo "$before $after" | awk -v tps="$tps" '{ printf "%.0f %.1f\n", tps, 100 * ($3 - $1) / ($4 - $2) }'
}

for u in "${users[@]}"; do
    for t in "${targets[@]}"; do
        echo "warm-up: ${t%%=*}, $u users, ${warmup}s: $(run "$t" "$u" "$warmup" | cut -d' ' -f1) TPS"
    done
done
results=$(mktemp)
trap 'rm -f "$results"' EXIT
for r in $(seq "$rounds"); do
    for u in "${users[@]}"; do
        for t in "${targets[@]}"; do
            read -r tps steal < <(run "$t" "$u" "$seconds")
            echo "round $r users $u ${t%%=*} $tps TPS steal $steal%" | tee -a "$results"
        done
    done
done
# Steal above 10% sets a run aside (docs/BENCHMARKS.md).
awk -v first="${targets[0]%%=*}" '
    { sub("%", "", $9); if ($9 > 10) { print "set aside (steal " $9 "%): " $0; next }
      tps[$4, $5, $2] = $6; names[$5] = 1; count[$4] = 1 }
    function median(a, n,   i, j, t) {
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    END {
        for (u in count) for (name in names) {
            n = 0; m = 0; ratios = ""
            for (r = 1; r <= '"$rounds"'; r++) {
                if (!((u, name, r) in tps)) continue
                v[++n] = tps[u, name, r]
                if ((u, first, r) in tps) { q[++m] = tps[u, name, r] / tps[u, first, r]; ratios = ratios sprintf(" %.2f", q[m]) }
            }
            if (n) printf "users %s %s: median %.0f TPS; / %s by round:%s (median %.2f)\n", u, name, median(v, n), first, ratios, m ? median(q, m) : 0
        }
    }' "$results" | sort -k2,2n -k3
