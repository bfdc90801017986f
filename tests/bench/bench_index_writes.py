#!/usr/bin/env python3
"""What the key index's writes cost a producer: this checkout against another (``--baseline``,
its ``.venv``), interleaved repetition by repetition so both see the same load.

Not a test (pytest does not collect it). Run from the repository::

    .venv/bin/python tests/bench/bench_index_writes.py --baseline /work/main [--hogs 2]

Each repetition, for each side, in a fresh process and a fresh store (topic made untimed):
``Producer.send_many`` of ``--n`` bodies of ``--size`` bytes in batches of ``--batch``
(every message's unique key is indexed), and ``--single`` single ``Producer.send`` calls (a
batch of one key each). Reported: messages per second of wall time and of the process's CPU
time (``_cpu``: less moved by other load on the machine), median and min-max, and the median
of the per-repetition ratios this/baseline.
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.bench.hogs import CpuHogs, loadavg  # noqa: E402

_WORKER = r"""
import json, sys, time
from store import Producer
root, n, size, batch, single = sys.argv[1], *map(int, sys.argv[2:6])
bodies = [b"x" * size] * n
p = Producer(root)
p.send("T", b"first")   # (the store and its topic made untimed)
t, c = time.perf_counter(), time.process_time()
for i in range(0, n, batch):
    p.send_many("T", bodies[i:i + batch])
many, many_cpu = n / (time.perf_counter() - t), n / (time.process_time() - c)
t, c = time.perf_counter(), time.process_time()
for _ in range(single):
    p.send("T", bodies[0])
one, one_cpu = single / (time.perf_counter() - t), single / (time.process_time() - c)
p.close()
print(json.dumps({"send_many": many, "send_many_cpu": many_cpu, "send": one, "send_cpu": one_cpu}))
"""


def _run(python: str, work: Path, a: argparse.Namespace) -> dict[str, float]:
    root = work / "s"
    shutil.rmtree(root, ignore_errors=True)
    out = subprocess.run([python, "-c", _WORKER, str(root), str(a.n), str(a.size), str(a.batch), str(a.single)],
                         check=True, capture_output=True, text=True).stdout
    shutil.rmtree(root, ignore_errors=True)
    return dict(json.loads(out))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", required=True, metavar="DIR")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--single", type=int, default=20_000)
    ap.add_argument("--hogs", type=int, default=0)
    a = ap.parse_args()
    sides = {"this": str(Path(".venv/bin/python").resolve()),
             "base": str(Path(a.baseline, ".venv/bin/python"))}
    runs: dict[str, list[dict[str, float]]] = {s: [] for s in sides}
    print(f"load before: {loadavg()}")
    with tempfile.TemporaryDirectory() as tmp, CpuHogs(a.hogs):
        for rep in range(a.reps):
            for side in (sides if rep % 2 == 0 else reversed(list(sides))):
                runs[side].append(_run(sides[side], Path(tmp), a))
    print(f"load after: {loadavg()}; hogs: {a.hogs}; {a.n} x {a.size} B in batches of {a.batch}, "
          f"{a.single} single sends; {a.reps} reps")
    for what in ("send_many", "send_many_cpu", "send", "send_cpu"):
        for side in sides:
            xs = [r[what] for r in runs[side]]
            print(f"{what:13} {side}: median {statistics.median(xs):,.0f} msg/s (min {min(xs):,.0f}, max {max(xs):,.0f})")
        ratios = [t[what] / b[what] for t, b in zip(runs["this"], runs["base"])]
        print(f"{what:13} this/base: median {statistics.median(ratios):.3f} "
              f"(min {min(ratios):.3f}, max {max(ratios):.3f})")


if __name__ == "__main__":
    main()
