#!/usr/bin/env python3
"""Big lines through a pipe: ``cat FILE | mqctl send T`` of this checkout and of
another (``--base``, e.g. main) against ``pipe_floor.c``, interleaved in one run. A
benchmark, not a test.

    .venv/bin/python tests/bench/bench_pipe.py --base /work/main [--reps 5] [--hogs 2] [--size 65536] [--mb 100,1000] [--durable-floor]

Two amounts of input by default, each its own row: 100 MB (1,525 lines of 64 KiB), where the
process's start (~40 ms: the interpreter, the imports, the store's open) is a large part of
the ~100 ms, and 1 GB (15,258 lines), where the steady state (reading the pipe, framing,
CRC-32, ``pwritev``) dominates: the throughput figure the target (>= 0.8 of the floor) is
judged on. Each repetition runs, per amount, the C floor (``tests/bench/pipe_floor.c``, built
here as ``bench_produce.py`` builds it: reads the pipe, frames each line with a header of
mqctl's size and its CRC-32, writes the records to one file), then each checkout in turn
(the order turns every repetition): a new store whose topic ``T`` is made untimed (``topic
create``, as a user's set-up), then ``cat FILE | mqctl send T`` timed from cat's start.
Every side is timed the same way (:func:`timed_pipe`): after a ``sync`` and in recycled pages
(``bench_produce.recycle_pages``: this machine's balloon makes a write into pages it
reported to the host ~5x slower; it reports pages freed ~2 s before, so a run that lasts
longer meets them whichever side it is), its wall time and the reader's CPU time (user and
system, from ``wait4``), ``cat``'s not counted. The input is ``--mb`` MB of ``--size``-byte
lines (``bench_produce.body_of``).

mqctl runs as installed: its modules' bytecode cached (pip compiles an installed package's).
Where ``PYTHONDONTWRITEBYTECODE`` is set (this sandbox, CI) an editable checkout would
otherwise compile every module it imports in every run (~60 ms of CPU a run here, none of it
the floor's); the bytecode goes to a scratch ``PYTHONPYCACHEPREFIX``, written by one untimed
run of each checkout, so neither checkout's tree is written to.

``--durable-floor`` adds a second floor, ``floor+``: ``pipe_floor OUT 67108864``, the same
program doing the durability work an async ``mqctl send`` does besides (64 MiB segment files,
each new one's directory entry fsynced, and an fdatasync in a second thread of every 64 MiB
written once 0.5 s old: the background flush); each side's ratio to it is printed too.

Prints, per amount and side: the wall time's median and min-max, the CPU time (user, system)
per GB of input, and each side's ratio to the floor of the same repetition, by wall time (the
target) and by CPU time (steadier on a busy machine); the load at the start and after each
repetition.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_produce as bp  # noqa: E402
from hogs import cpu_hogs, loadavg  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def timed_pipe(cmd: list[str], src: Path, env: dict[str, str], scratch: Path) -> tuple[float, float, float]:
    """``cat SRC | CMD``, after a ``sync`` and with ~1.1x the input's bytes of pages recycled
    (``bench_produce.recycle_pages``): the wall time from cat's start to CMD's end, and CMD's
    user and system CPU seconds (``wait4``). CMD must exit 0."""
    os.sync()
    bp.recycle_pages(scratch, src.stat().st_size * 9 // 8)
    t = time.perf_counter()
    cat = subprocess.Popen(["cat", str(src)], stdout=subprocess.PIPE)
    try:
        p = subprocess.Popen(cmd, stdin=cat.stdout, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        assert cat.stdout is not None
        cat.stdout.close()
        assert p.stderr is not None
        err = p.stderr.read()
        _, status, usage = os.wait4(p.pid, 0)
        dt = time.perf_counter() - t
        p.returncode = os.waitstatus_to_exitcode(status)
    finally:
        cat.wait()
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}): {err.decode()[-2000:]}")
    return dt, usage.ru_utime, usage.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True, help="the other checkout (its .venv is used)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--hogs", type=int, default=0, help="CPU hogs (yes > /dev/null) beside the runs")
    ap.add_argument("--size", type=int, default=65536, help="line length in bytes")
    ap.add_argument("--mb", default="100,1000", help="MB of lines, comma separated: one row each")
    ap.add_argument("--durable-floor", action="store_true",
                    help="also the floor doing mqctl's durability work (segments, their fsyncs): floor+")
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
    # Bytecode cached as an installed package has it, outside both trees (see the docstring).
    os.environ["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    store = work / "store"
    # mqctl's default segment size (store/log/format.py) for floor+
    floors = {"floor": [], **({"floor+": [str(64 * 1024 * 1024)]} if args.durable_floor else {})}

    def send(exe: Path, src: Path) -> tuple[float, float, float]:
        shutil.rmtree(store, ignore_errors=True)
        bp.run_mqctl(["topic", "create", "T"], store, exe=exe)
        try:
            return timed_pipe([str(exe), "send", "T"], src, bp.mqctl_env(store), work)
        finally:
            shutil.rmtree(store, ignore_errors=True)

    smallest = srcs[min(amounts)]
    for exe in sides.values():   # untimed: each checkout's bytecode written once
        send(exe, smallest)
    runs: dict[tuple[float, str], list[tuple[float, float, float]]] = {}
    loads = [loadavg()]
    hogs = cpu_hogs(args.hogs)
    hogs.start() if args.hogs else None
    try:
        for rep in range(args.reps):
            for mb in amounts:
                for name, more in floors.items():
                    out = work / "floor.out"
                    runs.setdefault((mb, name), []).append(timed_pipe([str(floor), str(out), *more], srcs[mb],
                                                                      dict(os.environ), work))
                    for f in work.glob("floor.out*"):
                        f.unlink()
                for name, exe in (list(sides.items()) if rep % 2 == 0 else list(sides.items())[::-1]):
                    runs.setdefault((mb, name), []).append(send(exe, srcs[mb]))
            loads.append(loadavg())
    finally:
        hogs.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(f"lines of {args.size} B, {args.reps} repetitions, hogs {args.hogs}; load (1, 5, 15 min) at the start "
          f"and after each repetition: {' -> '.join(loads)}")
    for mb, n in amounts.items():
        what = "the throughput the target is judged on" if mb >= 1000 else "start included"
        print(f"{mb:g} MB, {n:,} lines ({what}); medians (min-max):")
        for name in (*floors, *sides):
            rs = runs[(mb, name)]
            ms = [r[0] * 1000 for r in rs]
            per_gb = 1e9 / (n * args.size)
            user = statistics.median(r[1] for r in rs) * per_gb * 1000
            system = statistics.median(r[2] for r in rs) * per_gb * 1000
            line = (f"  {name:6} wall ms {statistics.median(ms):7.1f} ({min(ms):.1f}-{max(ms):.1f})"
                    f"   CPU ms/GB user {user:5.0f} sys {system:5.0f}")
            for f_name in floors:
                if f_name == name:
                    break
                f_runs = runs[(mb, f_name)]
                wall = [f[0] / r[0] for f, r in zip(f_runs, rs)]
                cpu = [(f[1] + f[2]) / (r[1] + r[2]) for f, r in zip(f_runs, rs)]
                line += (f"   to {f_name}: wall {statistics.median(wall):.2f} ({min(wall):.2f}-{max(wall):.2f})"
                         f" CPU {statistics.median(cpu):.2f} ({min(cpu):.2f}-{max(cpu):.2f})")
            print(line)


if __name__ == "__main__":
    main()
