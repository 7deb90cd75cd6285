#!/usr/bin/env python3
"""One run of scripts/bench-checkpoints.sh, reduced to its row.

    checkpoint-run.py DIR T0 SECONDS

DIR holds the run's pgbench transaction logs (base.* and burst-*.*, one
line per transaction: client, number, latency in microseconds measured
from the scheduled start, script, completion time in seconds and
microseconds), `bursts` (each burst's start and end, epoch seconds),
`debt` (epoch seconds, WAL bytes since the redo point and WAL bytes
written since the server began, sampled) and
`pg.log` (PostgreSQL's log of the run, checkpoints logged). Prints:
transactions per second, p99 and p99.9 in ms, the worst 10-second
window's p99 over the run's, the checkpoints started (all of them, those
started during a burst, those started by WAL volume, and those of them
started during a burst), the largest WAL since the redo point in MiB, and
the most WAL one burst wrote in MiB (from the samples nearest its ends).
Writes DIR/windows: each 10-second window's start (seconds into the run),
transactions, p99 and longest latency in ms, and whether a burst ran in
it, for finding what made the worst window. Only windows of at least 100
transactions count for the worst (a smaller one's p99 is its longest:
the run's last, partial window).
"""

import os
import sys
from datetime import datetime, timezone

from pgbench_log import quantile, transactions


def checkpoint_starts(log_path):
    """(epoch, cause) of each checkpoint started, from lines such as
    `2026-11-26 20:30:01.123 UTC LOG:  checkpoint starting: wal`."""
    starts = []
    with open(log_path, errors="replace") as f:
        for line in f:
            if "checkpoint starting:" not in line:
                continue
            stamp = " ".join(line.split()[:2])
            at = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S.%f").replace(tzinfo=timezone.utc).timestamp()
            starts.append((at, line.split("checkpoint starting:")[1].split()))
    return starts


def main():
    run_dir, t0, seconds = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
    txns = transactions(run_dir, ["base.", "burst-"])
    latencies = sorted(l for _, l in txns)
    p99, p999 = quantile(latencies, 0.99), quantile(latencies, 0.999)
    windows = {}
    for done, latency in txns:
        windows.setdefault(int((done - t0) // 10), []).append(latency)
    with open(os.path.join(run_dir, "bursts")) as f:
        bursts = [tuple(map(float, line.split())) for line in f if line.strip()]
    with open(os.path.join(run_dir, "windows"), "w") as f:
        print("start_s transactions p99_ms max_ms burst", file=f)
        for index, w in sorted(windows.items()):
            start = t0 + 10 * index
            burst = any(b_start < start + 10 and start < b_end for b_start, b_end in bursts)
            w.sort()
            print(f"{10 * index} {len(w)} {quantile(w, 0.99):.2f} {w[-1]:.2f} {int(burst)}", file=f)
    worst = max((quantile(w, 0.99) for w in windows.values() if len(w) >= 100), default=float("nan"))
    starts = checkpoint_starts(os.path.join(run_dir, "pg.log"))
    by_wal = [at for at, cause in starts if "wal" in cause]

    def in_bursts(times):
        return sum(1 for at in times if any(start <= at <= end for start, end in bursts))

    with open(os.path.join(run_dir, "debt")) as f:
        samples = [tuple(map(float, line.split())) for line in f if len(line.split()) == 3]
    debts = [debt for _, debt, _ in samples]

    def written_by(at):
        """WAL written since the server began, at the sample nearest `at`."""
        return min(samples, key=lambda s: abs(s[0] - at))[2]

    burst_wal = [written_by(end) - written_by(start) for start, end in bursts] if samples else []
    print(
        f"{len(txns) / seconds:.1f} {p99:.2f} {p999:.2f} {worst / p99:.3f} "
        f"{len(starts)} {in_bursts(at for at, _ in starts)} {len(by_wal)} {in_bursts(by_wal)} "
        f"{max(debts, default=0) / 2**20:.1f} {max(burst_wal, default=0) / 2**20:.1f}"
    )


if __name__ == "__main__":
    main()
