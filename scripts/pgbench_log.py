"""pgbench's per-transaction logs (`pgbench -l`), read for the scripts that
reduce a benchmark run to its row (checkpoint-run.py, vacuum-run.py).

Each line: client, transaction number, latency in microseconds (measured
from the scheduled start under `-R`), script, completion time in seconds
and microseconds; `skipped` in place of the latency for a transaction
that `--latency-limit` skipped.
"""

import glob
import os


def quantile(sorted_values, q):
    """The q-quantile of sorted values (NaN for none)."""
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def transactions(run_dir, prefixes):
    """(completion time, latency ms) of every transaction in the logs whose
    names start with one of the prefixes."""
    out = []
    for prefix in prefixes:
        for path in glob.glob(os.path.join(run_dir, prefix + "*")):
            if path.endswith(".out"):
                continue
            with open(path) as f:
                for line in f:
                    fields = line.split()
                    if len(fields) < 6 or fields[2] == "skipped":
                        continue
                    out.append((int(fields[4]) + int(fields[5]) / 1e6, int(fields[2]) / 1e3))
    return out
