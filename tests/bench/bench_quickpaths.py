#!/usr/bin/env python3
"""The fixed cost of one ``mqctl`` process on its quick paths (issue 26), this checkout against
another (``--base``, e.g. main), interleaved in one run. A benchmark, not a test.

    .venv/bin/python tests/bench/bench_quickpaths.py --base /work/main [--runs 15] [--hogs 2]

Each repetition runs, for each checkout in turn (the order turns every repetition):

* ``consume``: ``mqctl --store S consume t -g gN --from first -e > /dev/null`` with a new
  group each time, on a store of 10 messages in 8 queues (made once, by this checkout);
* ``send``: ``seq 10 | mqctl --store S send t`` into that checkout's own store (made by
  the first send, before the timed runs);
* ``--version``: ``mqctl --version``.

The whole process is timed (wall) and its CPU (user + system) read from ``wait4``; the
floors ``python -S -c pass`` and ``python -c pass`` of this checkout's interpreter run in the
same loop. Each side runs both commands once untimed first, with the environment's
PYTHONDONTWRITEBYTECODE removed: its bytecode is written then, and read from there on, as an
installed package runs. Prints medians and min-max in ms, and the load.
"""
from __future__ import annotations

import argparse
import os
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
    for name, root in sides.items():   # (untimed: each side's store made, its bytecode written)
        subprocess.run([str(root / ".venv/bin/mqctl"), "--store", str(tmp / f"dst-{name}"), "send", "t"],
                       input=lines, env=env, check=True, capture_output=True)
        subprocess.run([str(root / ".venv/bin/mqctl"), "--store", str(src), "consume", "t", "-g", f"warm{name}",
                        "--from", "first", "-e"], env=env, check=True, capture_output=True)
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
                w, c, code = timed([m, "--store", str(src), "consume", "t", "-g", f"g{name}{rep}",
                                    "--from", "first", "-e"], env)
                assert code == 0, (name, "consume", code)
                res.setdefault((name, "consume"), []).append((w, c))
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


if __name__ == "__main__":
    main()
