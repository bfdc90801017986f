#!/usr/bin/env python3
"""Exactly-once copy benchmark: ``consume A --to B`` against today's ways to copy.

Not a test (no ``test_`` prefix: pytest does not collect it). Run from the repository::

    .venv/bin/python tests/bench/bench_eo.py                 # a few minutes
    .venv/bin/python tests/bench/bench_eo.py --hog           # the same beside a CPU hog per core
    .venv/bin/python tests/bench/bench_eo.py --profile eo    # cProfile of one copy, top functions

Variants, each copying every message of topic A (4 queues) to topic B on a copy of one
prepared store, the whole command line timed (interpreter start-up included):

* ``eo``: ``mqctl consume A -g copy --from first -e --to B`` (exactly-once: outputs and offsets
  in one atomic batch);
* ``safe``: ``mqctl consume A -g copy --from first -e --json --batch 500 --exec 'mqctl send B
  --input json'`` (the README's at-least-once safe copy);
* ``pipe``: ``mqctl consume A -g copy --from first -e --json | mqctl send B --input json``
  (a plain pipe: the consumer commits what it printed, whatever became of it).

Sizes 100 B and 4 KiB (``--sizes``); ``--reps`` repetitions in rep-major order, the variants'
order rotated each repetition; medians with min-max, and the ratio eo/pipe per repetition
(both from the same repetition), then its median. Target: eo >= 0.8x pipe. ``uptime`` is
printed before and after. Every run's B is checked to hold every message.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent / "mqctl"
VARIANTS = {
    "eo": "mqctl consume A -g copy --from first -e --to B",
    "safe": "mqctl consume A -g copy --from first -e --json --batch 500 --exec 'mqctl send B --input json'",
    "pipe": "mqctl consume A -g copy --from first -e --json | mqctl send B --input json",
}


def env_for(store: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MQCTL_")}
    env.update(MQCTL_STORE=str(store), NO_COLOR="1", PATH=f"{BIN.parent}{os.pathsep}{env.get('PATH', '')}")
    return env


def prepare(work: Path, n: int, size: int) -> Path:
    """A store with ``n`` messages of ``size`` bytes in topic A (4 queues), B created."""
    store = work / f"src-{size}"
    e = env_for(store)
    for cmd in (["init"], ["topic", "create", "A", "--queues", "4"], ["topic", "create", "B", "--queues", "4"]):
        subprocess.run([str(BIN), *cmd], env=e, check=True, capture_output=True)
    data = work / f"in-{size}.txt"
    pad = "x" * (size - 12)
    data.write_text("".join(f"{i:010d}:{pad}\n" for i in range(n)))
    with open(data, "rb") as f:
        subprocess.run([str(BIN), "send", "A"], stdin=f, env=e, check=True, capture_output=True)
    return store


def copied(store: Path) -> int:
    cp = subprocess.run([str(BIN), "topic", "status", "B", "--json"], env=env_for(store), check=True,
                        capture_output=True, text=True)
    return sum(json.loads(line)["maxOffset"] for line in cp.stdout.splitlines() if line.strip())


def run_once(src: Path, work: Path, variant: str, n: int) -> float:
    store = work / "run"
    shutil.rmtree(store, ignore_errors=True)
    shutil.copytree(src, store)
    subprocess.run(["sync"], check=True)
    t0 = time.perf_counter()
    cp = subprocess.run(["bash", "-o", "pipefail", "-c", VARIANTS[variant]], env=env_for(store),
                        capture_output=True, text=True)
    dt = time.perf_counter() - t0
    assert cp.returncode == 0, f"{variant}: exit {cp.returncode}: {cp.stderr[-500:]}"
    got = copied(store)
    assert got == n, f"{variant}: B holds {got} messages, not {n}"
    return n / dt


def summarise(xs: list[float]) -> str:
    return f"{statistics.median(xs):>9,.0f}  ({min(xs):,.0f}-{max(xs):,.0f})"


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def profile(src: Path, work: Path, n: int) -> None:
    """The exactly-once copy in this process under cProfile (handlers run in threads here)."""
    store = work / "run"
    shutil.rmtree(store, ignore_errors=True)
    shutil.copytree(src, store)
    os.environ.update(env_for(store))
    from mqctl.app import main
    prof = cProfile.Profile()
    prof.enable()
    try:
        main(["consume", "A", "-g", "copy", "--from", "first", "-e", "--to", "B"])
    except SystemExit:
        pass
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(35)
    print(out.getvalue())
    print(f"B holds {copied(store)} of {n}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--sizes", default="100,4096")
    ap.add_argument("--n", type=int, default=20000, help="messages at 100 B (4 KiB: a quarter)")
    ap.add_argument("--hog", action="store_true", help="run `yes > /dev/null` per core meanwhile")
    ap.add_argument("--profile", choices=["eo"], help="cProfile one exactly-once copy (100 B) instead")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench_eo_") as tmp:
        work = Path(tmp)
        if a.profile:
            profile(prepare(work, a.n, 100), work, a.n)
            return
        hogs = [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) for _ in range(os.cpu_count() or 1)] \
            if a.hog else []
        try:
            print(f"start: {uptime()}{'  (CPU hog per core)' if hogs else ''}")
            sizes = [int(s) for s in a.sizes.split(",")]
            res: dict[tuple[int, str], list[float]] = {}
            srcs = {s: (prepare(work, a.n if s <= 100 else a.n // 4, s), a.n if s <= 100 else a.n // 4)
                    for s in sizes}
            names = list(VARIANTS)
            for rep in range(a.reps):
                order = names[rep % len(names):] + names[:rep % len(names)]
                for s in sizes:
                    for v in order:
                        res.setdefault((s, v), []).append(run_once(srcs[s][0], work, v, srcs[s][1]))
            print(f"end:   {uptime()}")
            for s in sizes:
                print(f"\n{s} B, {srcs[s][1]} messages, {a.reps} reps: msgs/s median (min-max)")
                for v in names:
                    print(f"  {v:5} {summarise(res[(s, v)])}")
                for other in ("pipe", "safe"):
                    ratios = [e / p for e, p in zip(res[(s, "eo")], res[(s, other)])]
                    print(f"  eo/{other}: median {statistics.median(ratios):.2f} "
                          f"({min(ratios):.2f}-{max(ratios):.2f})")
        finally:
            for h in hogs:
                h.kill()
                h.wait()


if __name__ == "__main__":
    main()
