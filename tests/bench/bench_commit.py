#!/usr/bin/env python3
"""What one group member's offset commit costs, this checkout against a baseline
checkout in the same run (each process runs in its checkout). Not a test::

    .venv/bin/python tests/bench/bench_commit.py --baseline /work/main [--procs 1,16] [--hogs 2]

``--procs`` processes commit to one store's offset table at once, each for a queue of its own
of one group, ``--count`` commits each, as a member's offset writer does
(``ClusterOffsetStore.commit``, increase-only, with the reset epochs it loaded; a checkout
without ``journal_only`` commits as its members did: ``publish_as``). Printed per checkout
and process count, medians (min-max) of ``--reps`` runs, interleaved (baseline first): the
wall time (median and 90th percentile over every commit of every process: a commit that waits
for the table's lock is in the tail) and the thread CPU time of one commit in microseconds,
and the commits per second of all processes together (over the longest process's loop).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parents[2]

# Run by each committing process, with the checkout's directory first on sys.path.
_COMMITTER = """
import inspect, json, sys, time
from pathlib import Path
from store.layout import Layout
from store.log.offsets import ClusterOffsetStore
root, queue, count = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
cs = ClusterOffsetStore(Layout(root))
kw = ({"journal_only": True} if "journal_only" in inspect.signature(cs.commit).parameters
      else {"publish_as": f"host@{queue}"})
walls, cpus = [], []
start = time.monotonic()
for i in range(1, count + 1):
    w, c = time.perf_counter(), time.thread_time()
    cs.commit("g", {("T", queue): i}, expected_epochs={}, **kw)
    walls.append(time.perf_counter() - w)
    cpus.append(time.thread_time() - c)
print(json.dumps({"walls": walls, "cpus": cpus, "s": time.monotonic() - start}))
"""


def run(checkout: Path, procs: int, count: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "store"
        env = {**os.environ, "PYTHONPATH": str(checkout)}
        py = str(checkout / ".venv" / "bin" / "python")
        subprocess.run([py, "-c", "from pathlib import Path; from store.layout import Layout; "
                        "from store.log.offsets import ClusterOffsetStore; import sys; "
                        "ClusterOffsetStore(Layout(Path(sys.argv[1]))).commit('g', {('T', q): 0 for q in range(64)})",
                        str(root)], env=env, cwd=checkout, check=True)
        children = [subprocess.Popen([py, "-c", _COMMITTER, str(root), str(q), str(count)], env=env,
                                     cwd=checkout, stdout=subprocess.PIPE, text=True) for q in range(procs)]
        outs = [json.loads(c.communicate()[0]) for c in children]
    walls = sorted(w for o in outs for w in o["walls"])
    cpus = [c for o in outs for c in o["cpus"]]
    return {"wall_us": statistics.median(walls) * 1e6, "wall90_us": walls[len(walls) * 9 // 10] * 1e6,
            "cpu_us": statistics.median(cpus) * 1e6, "per_s": len(walls) / max(o["s"] for o in outs)}


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", type=Path, help="a checkout to compare with (e.g. of main)")
    ap.add_argument("--procs", default="1,16")
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--hogs", type=int, default=0, help="this many yes > /dev/null meanwhile")
    args = ap.parse_args()
    checkouts = ([("baseline", args.baseline.resolve())] if args.baseline else []) + [("this", HERE)]
    hogs = [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) for _ in range(args.hogs)]
    print(f"load before: {load()}{f' (with {args.hogs} CPU hogs)' if hogs else ''}", flush=True)
    got: dict[tuple[str, int], list[dict[str, float]]] = {}
    try:
        for _rep in range(args.reps):
            for procs in [int(p) for p in args.procs.split(",")]:
                for name, checkout in checkouts:
                    got.setdefault((name, procs), []).append(run(checkout, procs, args.count))
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    print(f"one commit, median (min-max) of {args.reps}; {args.count} commits per process")
    print(f"{'checkout':9} {'procs':>5} {'wall us':>20} {'wall us p90':>22} {'CPU us':>20} {'commits/s (all)':>24}")
    for (name, procs), runs in got.items():
        cells = []
        for k in ("wall_us", "wall90_us", "cpu_us", "per_s"):
            v = sorted(r[k] for r in runs)
            cells.append(f"{statistics.median(v):,.0f} ({v[0]:,.0f}-{v[-1]:,.0f})")
        print(f"{name:9} {procs:>5} {cells[0]:>20} {cells[1]:>22} {cells[2]:>20} {cells[3]:>24}")
    print(f"load after: {load()}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
