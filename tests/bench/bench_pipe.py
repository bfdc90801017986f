#!/usr/bin/env python3
"""Big lines through a pipe (issue 26): ``cat FILE | mqctl send T`` of this checkout and of
another (``--base``, e.g. main) against ``pipe_floor.c``, interleaved in one run. A
benchmark, not a test.

    .venv/bin/python tests/bench/bench_pipe.py --base /work/main [--reps 5] [--hogs 2] [--size 65536] [--mb 100,1000]

Two amounts of input by default, each its own row: 100 MB (1,525 lines of 64 KiB), where the
process's start (~40 ms: the interpreter, the imports, the store's open) is a large part of
the ~100 ms, and 1 GB (15,258 lines), where the steady state (reading the pipe, framing,
CRC-32, ``pwritev``) dominates: the throughput figure the target (>= 0.8 of the floor) is
judged on. Each repetition runs, per amount, the C floor (``tests/bench/pipe_floor.c``, built
here as ``bench_produce.py`` builds it: reads the pipe, frames each line with a header of
mqctl's size and its CRC-32, writes the records to one file), then each checkout in turn
(the order turns every repetition): a new store whose topic ``T`` is made untimed (``topic
create``, as a user's set-up), then ``cat FILE | mqctl send T`` timed from cat's start.
Every timed write starts after a ``sync`` and in recycled pages
(``bench_produce.recycle_pages``: this machine's balloon makes a write into pages it
reported to the host ~5x slower). The input is ``--mb`` MB of ``--size``-byte lines
(``bench_produce.body_of``). Prints, per amount, the medians, min-max and each side's ratio
to the floor of the same repetition, and the load.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_produce as bp  # noqa: E402
from hogs import cpu_hogs, loadavg  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True, help="the other checkout (its .venv is used)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--hogs", type=int, default=0, help="CPU hogs (yes > /dev/null) beside the runs")
    ap.add_argument("--size", type=int, default=65536, help="line length in bytes")
    ap.add_argument("--mb", default="100,1000", help="MB of lines, comma separated: one row each")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-pipe-"))
    amounts = {float(x): int(float(x) * 1e6) // args.size for x in args.mb.split(",") if x}
    srcs = {mb: work / f"in{mb:g}.txt" for mb in amounts}
    for mb, n in amounts.items():
        bp.write_input(srcs[mb], n, args.size)
    floor = bp.compile_crc_floor("pipe_floor", work)
    if floor is None:
        raise SystemExit("pipe_floor.c did not build: no floor to compare with")
    sides = {"this": REPO / ".venv/bin/mqctl", "base": Path(args.base).resolve() / ".venv/bin/mqctl"}
    secs: dict[tuple[float, str], list[float]] = {}
    cpus: dict[tuple[float, str], list[float]] = {}
    ratios: dict[tuple[float, str], list[float]] = {}
    loads = [loadavg()]
    hogs = cpu_hogs(args.hogs)
    hogs.start() if args.hogs else None
    try:
        for rep in range(args.reps):
            for mb, n in amounts.items():
                t_floor = bp.c_floor_seconds(floor, srcs[mb], work / "floor.out")
                (work / "floor.out").unlink(missing_ok=True)
                secs.setdefault((mb, "floor"), []).append(t_floor)
                for name, exe in (list(sides.items()) if rep % 2 == 0 else list(sides.items())[::-1]):
                    store = work / "store"
                    shutil.rmtree(store, ignore_errors=True)
                    bp.run_mqctl(["topic", "create", "T"], store, exe=exe)
                    os.sync()
                    bp.recycle_pages(work, n * (args.size + 256))
                    r = bp.run_mqctl(["send", "T"], store, srcs[mb], exe=exe)
                    secs.setdefault((mb, name), []).append(r["seconds"])
                    cpus.setdefault((mb, name), []).append(r["cpu_seconds"])
                    ratios.setdefault((mb, name), []).append(t_floor / r["seconds"])
                shutil.rmtree(work / "store", ignore_errors=True)
            loads.append(loadavg())
    finally:
        hogs.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(f"lines of {args.size} B, {args.reps} repetitions, hogs {args.hogs}; load {' -> '.join(loads)}")
    for mb, n in amounts.items():
        what = "the throughput the target is judged on" if mb == max(amounts) and len(amounts) > 1 else "start included"
        print(f"{mb:g} MB, {n:,} lines ({what}):")
        for (m, name), v in secs.items():
            if m != mb:
                continue
            ms = [x * 1000 for x in v]
            line = f"  {name:6} wall ms {statistics.median(ms):7.1f} ({min(ms):.1f}-{max(ms):.1f})"
            if (mb, name) in cpus:
                c = [x * 1000 for x in cpus[(mb, name)]]
                r = ratios[(mb, name)]
                line += (f"   cpu ms {statistics.median(c):6.0f}   / floor {statistics.median(r):.2f}"
                         f" ({min(r):.2f}-{max(r):.2f})")
            print(line)


if __name__ == "__main__":
    main()
