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
# Prints one row per run (round, user count, target, TPS, the fraction of
# CPU time stolen during it), then `sluice bench summarize`'s table: per
# user count and target the median TPS and, paired by round, the ratios to
# the first target, runs above 10% steal set aside. pgbench's scale must
# already be initialised (postgres database, user postgres).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
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
find_sluice

# run TARGET USERS SECONDS: prints the run's TPS and its steal.
run() {
    local addr=${1#*=} before tps
    before=$("$sluice" bench steal)
    tps=$(pgbench -n -c "$2" -j 2 -T "$3" -h "${addr%:*}" -p "${addr##*:}" -U postgres postgres 2>&1 |
        awk '/^tps = / { print $3; exit }')
    [[ -n $tps ]] || { echo "pgbench against $1 reported no TPS" >&2; exit 1; }
    echo "$tps $("$sluice" bench steal --since "$before")"
}

for u in "${users[@]}"; do
    for t in "${targets[@]}"; do
        echo "warm-up: ${t%%=*}, $u users, ${warmup}s: $(run "$t" "$u" "$warmup" | cut -d' ' -f1) TPS"
    done
done
results=$(mktemp)
trap 'rm -f "$results"' EXIT
echo "round users target tps steal" | tee "$results"
for r in $(seq "$rounds"); do
    for u in "${users[@]}"; do
        for t in "${targets[@]}"; do
            read -r tps steal < <(run "$t" "$u" "$seconds")
            echo "$r $u ${t%%=*} $tps $steal" | tee -a "$results"
        done
    done
done
"$sluice" bench summarize "$results" --baseline "${targets[0]%%=*}" --by users
