#!/usr/bin/env python3
"""The fixed cost of one ``mqctl`` process on its quick paths, this checkout against
another (``--base``, e.g. main), interleaved in one run. A benchmark, not a test.

    .venv/bin/python tests/bench/bench_quickpaths.py --base /work/main [--runs 15] [--hogs 2] [--mb 100]

Each repetition runs, for each checkout in turn (the order turns every repetition):

* ``consume``: ``mqctl --store S consume t -g bench --from first -e > /dev/null`` on a fresh
  copy (made untimed before each run) of a store of 10 messages in 8 queues, so every run is
  the first member of a new group on an unchanged store, as in ``bench_produce.py``'s consume
  (a new group on one shared store would grow the offsets table run by run);
* ``consume-empty``: the same on an empty topic of 8 queues (the process's start-up and the
  group's join and leave, nothing else);
* ``consume-MB``: with ``--mb N``, the same on N MB of ``--size`` byte messages (a backlog);
* ``send``: ``seq 10 | mqctl --store S send t`` into that checkout's own store (made by
  the first send, before the timed runs);
* ``--version``: ``mqctl --version``.

The whole process is timed (wall) and its CPU (user + system) read from ``wait4``; the
floors ``python -S -c pass`` and ``python -c pass`` of this checkout's interpreter run in the
same loop. Each side runs both commands once untimed first, with the environment's
PYTHONDONTWRITEBYTECODE removed: its bytecode is written then, and read from there on, as an
installed package runs. Prints medians and min-max in ms, the load, and for each command the
median of this checkout's CPU (and wall) time over the base's, repetition by repetition.
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
from hogs import cpu_hogs, loadavg  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def timed(cmd: list[str], env: dict[str, str], stdin: bytes | None = None) -> tuple[float, float, int]:
    """Wall and CPU seconds of one process, and its exit status."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    if stdin is not None:
        assert p.stdin is not None
        p.stdin.write(stdin)
        p.stdin.close()
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    return wall, ru.ru_utime + ru.ru_stime, p.returncode


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True, help="the other checkout (its .venv is used)")
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--hogs", type=int, default=0, help="CPU hogs (yes > /dev/null) beside the runs")
    ap.add_argument("--mb", type=int, default=0, help="MB of messages for consume-MB (0: not run)")
    ap.add_argument("--size", type=int, default=65536, help="message size (bytes, newline included) for --mb")
    args = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.pop("NO_COLOR", None)
    sides = {"this": REPO, "base": Path(args.base).resolve()}
    tmp = Path(tempfile.mkdtemp(prefix="quickpaths-"))
    lines = b"".join(b"%d\n" % i for i in range(1, 11))
    this_mqctl = str(REPO / ".venv/bin/mqctl")
    src = tmp / "src"
    subprocess.run([this_mqctl, "--store", str(src), "send", "t"], input=lines, env=env, check=True,
                   capture_output=True)
    # the stores each consume run gets a fresh copy of (made by this checkout)
    stores = {"consume": src, "consume-empty": tmp / "empty"}
    subprocess.run([this_mqctl, "--store", str(stores["consume-empty"]), "topic", "create", "t", "--queues", "8"],
                   env=env, check=True, capture_output=True)
    if args.mb:
        stores[f"consume-{args.mb}MB"] = tmp / "backlog"
        n = args.mb * 1_000_000 // args.size
        subprocess.run([this_mqctl, "--store", str(tmp / "backlog"), "send", "t"], env=env, check=True,
                       input=(b"x" * (args.size - 1) + b"\n") * n, capture_output=True)
    run_store = tmp / "run"

    def consume(m: str, store: Path) -> tuple[float, float, int]:
        shutil.rmtree(run_store, ignore_errors=True)
        shutil.copytree(store, run_store)   # (untimed: a fresh copy, so a new group on an unchanged store)
        return timed([m, "--store", str(run_store), "consume", "t", "-g", "bench", "--from", "first", "-e"], env)

    for name, root in sides.items():   # (untimed: each side's store made, its bytecode written)
        subprocess.run([str(root / ".venv/bin/mqctl"), "--store", str(tmp / f"dst-{name}"), "send", "t"],
                       input=lines, env=env, check=True, capture_output=True)
        consume(str(root / ".venv/bin/mqctl"), src)
    res: dict[tuple[str, str], list[tuple[float, float]]] = {}
    hogs = cpu_hogs(args.hogs)
    load0 = loadavg()
    hogs.start() if args.hogs else None
    try:
        for rep in range(args.runs):
            order = list(sides.items())
            if rep % 2:
                order.reverse()
            for floor in (["-S", "-c", "pass"], ["-c", "pass"]):
                w, c, _ = timed([str(REPO / ".venv/bin/python"), *floor], env)
                res.setdefault(("floor", "python " + " ".join(floor)), []).append((w, c))
            for name, root in order:
                m = str(root / ".venv/bin/mqctl")
                for what, store in stores.items():
                    w, c, code = consume(m, store)
                    assert code == 0, (name, what, code)
                    res.setdefault((name, what), []).append((w, c))
                w, c, code = timed([m, "--store", str(tmp / f"dst-{name}"), "send", "t"], env, stdin=lines)
                assert code == 0, (name, "send", code)
                res.setdefault((name, "send"), []).append((w, c))
                w, c, code = timed([m, "--version"], env)
                assert code == 0, (name, "--version", code)
                res.setdefault((name, "--version"), []).append((w, c))
    finally:
        hogs.stop()
    print(f"runs {args.runs}, hogs {args.hogs}, load before {load0}, after {loadavg()}")
    print(f"{'side':6} {'command':16} {'wall ms median (min-max)':>28} {'cpu ms median (min-max)':>28}")
    for (name, what), v in sorted(res.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        walls = [x[0] * 1000 for x in v]
        cpus = [x[1] * 1000 for x in v]
        print(f"{name:6} {what:16} {statistics.median(walls):10.1f} ({min(walls):5.1f}-{max(walls):6.1f})"
              f"      {statistics.median(cpus):10.1f} ({min(cpus):5.1f}-{max(cpus):6.1f})")
    print("this/base, median of the repetitions' ratios (below 1: this checkout is faster)")
    for what in sorted({w for side, w in res if side == "this"}):
        pairs = list(zip(res[("this", what)], res[("base", what)]))
        cpu = statistics.median(a[1] / b[1] for a, b in pairs)
        wall = statistics.median(a[0] / b[0] for a, b in pairs)
        print(f"       {what:16} cpu {cpu:.3f}  wall {wall:.3f}")


if __name__ == "__main__":
    main()
