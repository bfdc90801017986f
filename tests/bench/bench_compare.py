#!/usr/bin/env python3
"""A/B benchmark: this working tree against another git revision, in one run.

Not a test. It answers "what did this change cost?" on a shared, noisy machine: both
versions run the same workloads, interleaved rep by rep (A, B, A, B, ...), and the report is
each side's median with the ratio B/A. The base revision is checked out into a temporary git
worktree and run with ``PYTHONPATH`` pointing at it (same interpreter, same dependencies)::

    .venv/bin/python tests/bench/bench_compare.py --base HEAD~1
    .venv/bin/python tests/bench/bench_compare.py --base c5f6745 --reps 5 --n 500000
    .venv/bin/python tests/bench/bench_compare.py --base c5f6745 --head 2c3a2b9   # two revisions

Workloads (the whole ``python -m mqctl`` process is timed, start-up included):

* ``send T`` of N 100-byte lines from a file, ``--flush async``;
* ``send T`` of N/8 4 KiB lines, ``--flush async``;
* ``send T --flush sync --batch-size 100`` of N/10 100-byte lines;
* ``consume T -g bench --from first -e > /dev/null`` of the 100-byte store (offsets committed).
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

REPO = Path(__file__).resolve().parents[2]


def lines_file(path: Path, n: int, size: int) -> Path:
    with open(path, "wb") as fh:
        pad = b"x" * (size - 11)
        fh.writelines(b"%010d" % i + pad + b"\n" for i in range(n))
    return path


def run(code: Path, store: Path, args: list[str], stdin: Path | None) -> float:
    env = dict(os.environ, PYTHONPATH=str(code), MQCTL_STORE=str(store), NO_COLOR="1")
    t0 = time.perf_counter()
    with open(stdin or os.devnull, "rb") as inp:
        subprocess.run([sys.executable, "-m", "mqctl", *args], stdin=inp, stdout=subprocess.DEVNULL,
                       env=env, check=True, cwd=code)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True, help="git revision to compare against (A)")
    ap.add_argument("--head", default=None, help="git revision to measure as B (default: the working tree)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--n", type=int, default=400_000, help="100-byte messages per send run")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="mqctl-ab-"))
    base = tmp / "base"
    subprocess.run(["git", "worktree", "add", "--detach", "-q", str(base), args.base], cwd=REPO, check=True)
    head = REPO
    if args.head:
        head = tmp / "head"
        subprocess.run(["git", "worktree", "add", "--detach", "-q", str(head), args.head], cwd=REPO, check=True)
    try:
        small = lines_file(tmp / "small.txt", args.n, 100)
        big = lines_file(tmp / "big.txt", args.n // 8, 4096)
        sync = lines_file(tmp / "sync.txt", args.n // 10, 100)
        sides = {"A": base, "B": head}
        times: dict[tuple[str, str], list[float]] = {}
        for rep in range(args.reps):
            for name, code in sides.items():
                work = tmp / f"{name}{rep}"
                for label, sargs, feed, store in (
                        ("send 100 B async", ["send", "T"], small, work / "s"),
                        ("send 4 KiB async", ["send", "T"], big, work / "b"),
                        ("send sync, batch 100", ["send", "T", "--flush", "sync", "--batch-size", "100"], sync, work / "y")):
                    run(code, store, ["init"], None)
                    times.setdefault((label, name), []).append(run(code, store, sargs, feed))
                times.setdefault(("consume 100 B", name), []).append(
                    run(code, work / "s", ["consume", "T", "-g", "bench", "--from", "first", "-e"], None))
                shutil.rmtree(work)
        counts = {"send 100 B async": args.n, "send 4 KiB async": args.n // 8,
                  "send sync, batch 100": args.n // 10, "consume 100 B": args.n}
        print(f"A = {args.base}, B = {args.head or 'working tree'}; medians of {args.reps}, msg/s (whole process)")
        print(f"{'workload':24} {'A':>12} {'B':>12} {'B/A':>7}")
        for label, n in counts.items():
            a = n / statistics.median(times[(label, "A")])
            b = n / statistics.median(times[(label, "B")])
            print(f"{label:24} {a:12,.0f} {b:12,.0f} {b / a:7.3f}")
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=REPO)
        if args.head:
            subprocess.run(["git", "worktree", "remove", "--force", str(head)], cwd=REPO)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
