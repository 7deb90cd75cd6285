#!/usr/bin/env python3
"""What PostgreSQL's backends wait on during a benchmark, and what the
machine does meanwhile: the diagnostic for the SLO experiment's slow windows
(docs/BENCHMARKS.md, "SLO classes").

  pg-waits.py sample HOST PORT USER OUT_DIR [--every 0.2]
      until stopped (SIGTERM or SIGINT), every EVERY seconds writes
      OUT_DIR/activity.tsv: one line per busy client backend (epoch seconds,
        application_name, state, wait_event_type, wait_event, age of its
        transaction in ms), read through one psql session (\\watch);
      OUT_DIR/system.tsv: epoch seconds, then the machine's counters since
        boot: CPU steal and iowait jiffies, /proc/pressure cpu/io "some"
        and io "full" stall totals (µs), sectors written to disk.

  pg-waits.py summarize OUT_DIR [--tenant ls] [--slow-ms 60] [--from T] [--to T]
      (samples between epoch seconds T only) sets the wait events of the tenant's transactions older than SLOW_MS
      beside those of all its busy samples, and the machine's counters in
      the intervals where such a slow transaction was seen beside the rest.

  pg-waits.py windows OUT_DIR [--seconds 5] [--slow-ms 60] [--from T] [--to T]
      a timeline, one line per window of SECONDS: the share of the window
      every non-idle task stalled on I/O (PSI io "full"), iowait, and for
      each application_name the oldest transaction seen and the commonest
      wait of those older than SLOW_MS.
"""
import argparse
import collections
import os
import signal
import subprocess
import sys
import threading
import time

ACTIVITY = """select extract(epoch from clock_timestamp())::numeric(16,3), application_name, state,
coalesce(wait_event_type, '-'), coalesce(wait_event, '-'),
coalesce((extract(epoch from clock_timestamp() - xact_start) * 1000)::int, -1)
from pg_stat_activity
where backend_type = 'client backend' and pid <> pg_backend_pid() and state <> 'idle'"""


def read_system():
    """Steal and iowait jiffies, PSI stall totals (µs), sectors written."""
    with open("/proc/stat") as f:
        cpu = f.readline().split()
    iowait, steal = int(cpu[5]), int(cpu[8])
    psi = {}
    for res in ("cpu", "io"):
        try:
            with open(f"/proc/pressure/{res}") as f:
                for line in f:
                    kind, *fields = line.split()
                    psi[f"{res}_{kind}"] = int(dict(x.split("=") for x in fields)["total"])
        except FileNotFoundError:
            pass
    written = 0
    with open("/proc/diskstats") as f:
        for line in f:
            parts = line.split()
            # Whole disks only (no partitions, loop or ram devices).
            name = parts[2]
            if name.startswith(("loop", "ram", "dm-")) or os.path.exists(f"/sys/class/block/{name}/partition"):
                continue
            written += int(parts[9])
    return [steal, iowait, psi.get("cpu_some", 0), psi.get("io_some", 0), psi.get("io_full", 0), written]


def sample(args):
    os.makedirs(args.out, exist_ok=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    psql = subprocess.Popen(
        ["psql", "-h", args.host, "-p", str(args.port), "-U", args.user, "-d", "postgres",
         "-AtqX", "-F", "\t"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # \watch repeats the query buffer; psql takes it only from a script.
    psql.stdin.write(f"{ACTIVITY}\n\\watch {args.every}\n")
    psql.stdin.flush()

    def copy_activity():
        with open(os.path.join(args.out, "activity.tsv"), "w") as out:
            for line in psql.stdout:
                if line.strip():
                    out.write(line)

    copier = threading.Thread(target=copy_activity, daemon=True)
    copier.start()
    with open(os.path.join(args.out, "system.tsv"), "w") as out:
        out.write("epoch\tsteal\tiowait\tcpu_some_us\tio_some_us\tio_full_us\tsectors_written\n")
        while not stop.wait(args.every):
            if psql.poll() is not None:
                sys.exit(f"pg-waits: psql stopped: {psql.stderr.read().strip()}")
            out.write("\t".join(map(str, [f"{time.time():.3f}", *read_system()])) + "\n")
            out.flush()
    psql.terminate()
    copier.join(timeout=2)


def load_activity(path, tenant, within):
    """Samples of the tenant's busy backends (every tenant's if None):
    (epoch, tenant, wait, age_ms)."""
    rows = []
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 6 or tenant not in (None, parts[1]) or not within(float(parts[0])):
                continue
            epoch, name, state, wtype, wevent, age = parts
            wait = f"{wtype}:{wevent}" if wtype != "-" else f"running ({state})"
            rows.append((float(epoch), name, wait, int(age)))
    return rows


def load_system(path, within):
    with open(path) as f:
        header = f.readline().rstrip("\n").split("\t")
        rows = [list(map(float, line.split("\t"))) for line in f if line.strip()]
    return header, [r for r in rows if within(r[0])]


def print_waits(title, waits):
    total = sum(waits.values())
    print(f"{title} ({total} samples)")
    for wait, n in waits.most_common(12):
        print(f"  {100 * n / total:5.1f}%  {wait}")


def in_span(args):
    """Whether an epoch time lies between --from and --to."""
    return lambda t: args.start <= t <= args.end


def summarize(args):
    within = in_span(args)
    rows = load_activity(os.path.join(args.out, "activity.tsv"), args.tenant, within)
    if not rows:
        sys.exit(f"pg-waits: no busy backend of application_name {args.tenant!r} in {args.out}/activity.tsv")
    slow = [r for r in rows if r[3] > args.slow_ms]
    print_waits(f"{args.tenant}: every busy sample", collections.Counter(r[2] for r in rows))
    print_waits(f"{args.tenant}: transactions older than {args.slow_ms} ms",
                collections.Counter(r[2] for r in slow))
    header, system = load_system(os.path.join(args.out, "system.tsv"), within)
    slow_times = sorted(r[0] for r in slow)
    # Each interval between two system samples is slow if a slow
    # transaction of the tenant was seen in it.
    marked = {True: [], False: []}
    j = 0
    for before, after in zip(system, system[1:]):
        while j < len(slow_times) and slow_times[j] < before[0]:
            j += 1
        is_slow = j < len(slow_times) and slow_times[j] <= after[0]
        seconds = after[0] - before[0]
        marked[is_slow].append([(a - b) / seconds for a, b in zip(after[1:], before[1:])])
    print("machine, per second of interval (mean): intervals with a slow transaction | the rest")
    for k, name in enumerate(header[1:]):
        means = [sum(r[k] for r in marked[s]) / max(len(marked[s]), 1) for s in (True, False)]
        print(f"  {name:<16} {means[0]:>14.1f} | {means[1]:>14.1f}")
    print(f"  intervals        {len(marked[True]):>14} | {len(marked[False]):>14}")


def windows(args):
    within = in_span(args)
    rows = load_activity(os.path.join(args.out, "activity.tsv"), None, within)
    header, system = load_system(os.path.join(args.out, "system.tsv"), within)
    if len(system) < 2:
        sys.exit(f"pg-waits: fewer than two machine samples in {args.out}/system.tsv for that span")
    tenants = sorted({r[1] for r in rows})
    io_full, iowait = header.index("io_full_us"), header.index("iowait")
    print(f"{'window':>14}  {'io full':>7}  {'iowait/s':>8}  " + "  ".join(f"{t + ' oldest, slow waits':<41}" for t in tenants))
    t0 = system[0][0]
    while t0 + args.seconds <= system[-1][0]:
        t1 = t0 + args.seconds
        span = [r for r in system if t0 <= r[0] <= t1]
        cells = []
        for t in tenants:
            ages = [r for r in rows if r[1] == t and t0 <= r[0] < t1]
            slow = collections.Counter(r[2] for r in ages if r[3] > args.slow_ms)
            top = ", ".join(f"{n} {w}" for w, n in slow.most_common(2))
            cells.append(f"{max((r[3] for r in ages), default=0):>5} ms {top:<32}")
        if len(span) >= 2:
            dt = span[-1][0] - span[0][0]
            full = (span[-1][io_full] - span[0][io_full]) / dt / 1e4
            wait = (span[-1][iowait] - span[0][iowait]) / dt
            print(f"{t0:>14.1f}  {full:>6.1f}%  {wait:>8.1f}  " + "  ".join(cells))
        t0 = t1


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("sample", help="sample until stopped")
    s.add_argument("host")
    s.add_argument("port", type=int)
    s.add_argument("user")
    s.add_argument("out")
    s.add_argument("--every", type=float, default=0.2, help="seconds between samples (default 0.2)")
    m = sub.add_parser("summarize", help="what the slow transactions waited on")
    m.add_argument("out")
    m.add_argument("--tenant", default="ls", help="application_name to look at (default ls)")
    m.add_argument("--slow-ms", type=int, default=60, help="a transaction older than this is slow (default 60)")
    m.add_argument("--from", dest="start", type=float, default=0, help="epoch seconds to start at")
    m.add_argument("--to", dest="end", type=float, default=float("inf"), help="epoch seconds to end at")
    w = sub.add_parser("windows", help="a timeline of I/O stalls and the oldest transactions")
    w.add_argument("out")
    w.add_argument("--seconds", type=float, default=5, help="window length (default 5)")
    w.add_argument("--slow-ms", type=int, default=60, help="a transaction older than this is slow (default 60)")
    w.add_argument("--from", dest="start", type=float, default=0, help="epoch seconds to start at")
    w.add_argument("--to", dest="end", type=float, default=float("inf"), help="epoch seconds to end at")
    args = parser.parse_args()
    {"sample": sample, "summarize": summarize, "windows": windows}[args.command](args)


if __name__ == "__main__":
    main()
