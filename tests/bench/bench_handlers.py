#!/usr/bin/env python3
"""Handler throughput of a concurrent consumer, this checkout against another (``--base``),
interleaved in one run: how the batches handed to handlers are spread over the queues held
(``store/client/dispatch.py``) must cost nothing when one queue or every queue has messages.

Not a test. Run from the repository::

    .venv/bin/python tests/bench/bench_handlers.py --base /work/main --reps 5 [--hogs 2]

One store per queue count (``--queues``, ``--n`` messages of 100 bytes spread evenly over the
queues, made once with this checkout's ``mqctl send``). Each repetition consumes each store
with a new group, with each checkout's interpreter (its ``.venv``), the order of the two
turning every repetition:

* ``run``: ``store.Consumer(...).run(no-op, threads=4, exit_at_end=True)``, timed from the
  Consumer's creation;
* ``async``: ``store.AsyncConsumer(...).run(no-op, concurrency=4, exit_at_end=True)``;
* ``exec``: ``mqctl consume T -g G --from first -e --exec 'cat' --batch 100 --threads 4``
  (stdout to /dev/null), the whole process timed.

Prints the median rate (messages/s), min-max and the median of the per-repetition ratios
head / base, with the load average before and after.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hogs import cpu_hogs, loadavg

HERE = Path(__file__).resolve().parents[2]

WORKER = """
import asyncio, json, subprocess, sys, time
kind, root, group, mqctl = sys.argv[1:5]
import store
t0 = time.perf_counter()
if kind == "run":
    with store.Consumer("T", group=group, start_from="first", path=root) as c:
        c.run(lambda m: None, threads=4, exit_at_end=True)
elif kind == "async":
    async def main():
        async with store.AsyncConsumer("T", group=group, start_from="first", path=root) as c:
            async def h(m):
                return None
            await c.run(h, concurrency=4, exit_at_end=True)
    asyncio.run(main())
else:
    subprocess.run([mqctl, "consume", "T", "-g", group, "--from", "first", "-e", "--exec", "cat",
                    "--batch", "100", "--threads", "4"], check=True, stdout=subprocess.DEVNULL,
                   env={**__import__("os").environ, "MQCTL_STORE": root})
print(json.dumps(time.perf_counter() - t0))
"""


def make_store(root: Path, queues: int, n: int) -> None:
    env = {**os.environ, "MQCTL_STORE": str(root)}
    mq = str(HERE / ".venv" / "bin" / "mqctl")
    subprocess.run([mq, "topic", "create", "T", "--queues", str(queues)], env=env, check=True, capture_output=True)
    body = "x" * 99
    for q in range(queues):
        lines = "".join(f"{body}\n" for _ in range(n // queues))
        subprocess.run([mq, "send", "T", "-q", str(q)], input=lines, text=True, env=env, check=True,
                       capture_output=True)


def timed(checkout: Path, kind: str, root: Path, group: str) -> float:
    py = checkout / ".venv" / "bin" / "python"
    out = subprocess.run([str(py), "-c", WORKER, kind, str(root), group, str(checkout / ".venv" / "bin" / "mqctl")],
                         check=True, capture_output=True, text=True, cwd=checkout)
    return float(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", type=Path, required=True)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--queues", default="1,4,8")
    ap.add_argument("--kinds", default="run,async,exec")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--hogs", type=int, default=0)
    args = ap.parse_args()
    sides = {"head": HERE, "base": args.base.resolve()}
    scratch = Path(tempfile.mkdtemp(prefix="bench-handlers-"))
    results: dict[str, dict[str, list[float]]] = {}
    try:
        stores = {}
        for q in map(int, args.queues.split(",")):
            stores[q] = scratch / f"q{q}"
            make_store(stores[q], q, args.n)
        n = {q: (args.n // q) * q for q in stores}
        before = loadavg()
        with cpu_hogs(args.hogs):
            for rep in range(args.reps):
                order = list(sides) if rep % 2 == 0 else list(reversed(sides))
                for kind in args.kinds.split(","):
                    for q, root in stores.items():
                        for side in order:
                            secs = timed(sides[side], kind, root, f"G{rep}{side}{kind}")
                            results.setdefault(f"{kind} q={q}", {}).setdefault(side, []).append(n[q] / secs)
        after = loadavg()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"load average before {before}, after {after}; hogs {args.hogs}; {args.reps} reps, n={args.n}")
    print(f"{'case':<14} {'head msg/s (min-max)':>30} {'base msg/s (min-max)':>30} {'head/base':>10}")
    for case, by in results.items():
        h, b = by["head"], by["base"]
        ratio = statistics.median(x / y for x, y in zip(h, b))
        print(f"{case:<14} {statistics.median(h):>12,.0f} ({min(h):,.0f}-{max(h):,.0f})"
              f" {statistics.median(b):>12,.0f} ({min(b):,.0f}-{max(b):,.0f}) {ratio:>9.2f}")
    out = HERE / "bench-results"
    out.mkdir(exist_ok=True)
    (out / f"handlers-{time.strftime('%Y%m%d-%H%M%S')}.json").write_text(json.dumps(
        {"n": args.n, "reps": args.reps, "hogs": args.hogs, "load_before": before, "load_after": after,
         "rates": results}, indent=1))


if __name__ == "__main__":
    sys.exit(main())
