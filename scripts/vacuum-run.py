#!/usr/bin/env python3
"""One run of scripts/bench-vacuum.sh, reduced to its row.

    vacuum-run.py DIR T0 SECONDS

DIR holds the run's pgbench transaction logs (base.*, and rest.* for the
foreground after --rest-at; one line per transaction: client, number, latency in microseconds measured from the
scheduled start, script, completion time in seconds and microseconds),
`switched` (the epoch at which the table's autovacuum was switched on) and
`pg.log` (PostgreSQL's log of the run, autovacuum logged). Prints:
transactions per second, the run's p99 in ms, the vacuum of
pgbench_accounts' time in seconds (0 if none ran), and the p99 and p99.9
of the transactions that finished while it ran or in the 30 s after it
(the kernel writes the pages a vacuum dirtied back within 30 s,
`vm.dirty_expire_centisecs`, and that is when commits wait on the disk
behind them); with no vacuum, from the switch to the run's end.
"""

import os
import re
import sys
from datetime import datetime, timezone

from pgbench_log import quantile, transactions

# Seconds after a vacuum that still count as its: the kernel's write-back.
AFTER_S = 30


def vacuum_span(log_path):
    """(start, end) epochs of the autovacuum of pgbench_accounts, from its
    log entry: `2026-11-28 12:00:05.123 UTC LOG:  automatic vacuum of table
    "postgres.public.pgbench_accounts": ...` whose last line ends in
    `elapsed: 4.21 s`."""
    with open(log_path, errors="replace") as f:
        text = f.read()
    entry = re.search(
        r"^(\S+ \S+) \S+ LOG:  automatic vacuum of table \"[^\"]*pgbench_accounts\".*?elapsed: ([0-9.]+) s",
        text,
        re.S | re.M,
    )
    if not entry:
        return None
    end = datetime.strptime(entry.group(1), "%Y-%m-%d %H:%M:%S.%f").replace(tzinfo=timezone.utc).timestamp()
    return end - float(entry.group(2)), end


def main():
    run_dir, t0, seconds = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
    txns = transactions(run_dir, ["base.", "rest."])
    p99 = quantile(sorted(l for _, l in txns), 0.99)
    span = vacuum_span(os.path.join(run_dir, "pg.log"))
    if span is None:
        with open(os.path.join(run_dir, "switched")) as f:
            switched = float(f.read())
        window, took = (switched, t0 + seconds), "0"
    else:
        window, took = (span[0], span[1] + AFTER_S), f"{span[1] - span[0]:.2f}"
    during = sorted(l for done, l in txns if window[0] <= done <= window[1])
    print(f"{len(txns) / seconds:.1f} {p99:.2f} {took} {quantile(during, 0.99):.2f} {quantile(during, 0.999):.2f}")


if __name__ == "__main__":
    main()
