#!/usr/bin/env python3
"""The Python API against the CLI, in one run: produce and consume rates of 100-byte messages.

Not a test. Each variant runs ``--reps`` times, interleaved, and the medians are reported with
the ratio API / CLI::

    .venv/bin/python tests/bench/bench_api.py --n 300000 --reps 3

* produce: ``store.Producer.send_many`` in batches of 1,000 (in-process) against ``mqctl send T``
  fed the same lines from a file (the whole process timed); wall time and CPU time (the CLI
  process's, the API's own);
* consume: ``store.Consumer.messages(exit_at_end=True)`` (at-least-once iteration, offsets
  committed) against ``mqctl consume T -g G --from first -e > /dev/null``;
* and the push style, ``Consumer.run`` with a no-op handler;
  for consuming too, wall time and CPU time (the CLI process's, the API's own).
"""
from __future__ import annotations

import argparse
import itertools
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import store

MQCTL = str(Path(sys.executable).parent / "mqctl")


def children_cpu() -> float:
    """CPU seconds (user + system) of this process's waited-for children so far."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=300_000)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    n = args.n
    tmp = Path(tempfile.mkdtemp(prefix="mqctl-api-"))
    lines = tmp / "lines.txt"
    bodies = [b"%010d" % i + b"x" * 90 for i in range(n)]
    lines.write_bytes(b"\n".join(bodies) + b"\n")
    t: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}   # CPU seconds (the CLI's process, the API's own)
    try:
        for rep in range(args.reps):
            api_root, cli_root = tmp / f"api{rep}", tmp / f"cli{rep}"
            env = dict(os.environ, MQCTL_STORE=str(cli_root))
            subprocess.run([MQCTL, "init"], env=env, check=True, capture_output=True)
            t0, c0 = time.perf_counter(), children_cpu()
            with open(lines, "rb") as fh:
                subprocess.run([MQCTL, "send", "T"], stdin=fh, env=env, check=True, capture_output=True)
            t.setdefault("produce cli", []).append(time.perf_counter() - t0)
            cpu.setdefault("produce cli", []).append(children_cpu() - c0)
            t0, c0 = time.perf_counter(), time.process_time()
            with store.Producer(api_root) as p:
                for i in range(0, n, 1000):
                    p.send_many("T", bodies[i:i + 1000])
            t.setdefault("produce api", []).append(time.perf_counter() - t0)
            cpu.setdefault("produce api", []).append(time.process_time() - c0)
            t0, c0 = time.perf_counter(), children_cpu()
            subprocess.run([MQCTL, "consume", "T", "-g", "G", "--from", "first", "-e"], env=env, check=True,
                           stdout=subprocess.DEVNULL)
            t.setdefault("consume cli", []).append(time.perf_counter() - t0)
            cpu.setdefault("consume cli", []).append(children_cpu() - c0)
            t0, c0 = time.perf_counter(), time.process_time()
            got = 0
            with store.Consumer("T", group="G", path=api_root, start_from="first") as c:
                for _m in c.messages(exit_at_end=True):
                    got += 1
            t.setdefault("consume api (iterator)", []).append(time.perf_counter() - t0)
            cpu.setdefault("consume api (iterator)", []).append(time.process_time() - c0)
            assert got == n, (got, n)
            handled = itertools.count()   # next() on it is atomic: the handler threads share it
            t0, c0 = time.perf_counter(), time.process_time()
            with store.Consumer("T", group="H", path=api_root, start_from="first") as c:
                c.run(lambda _m, h=handled: next(h), exit_at_end=True)
            t.setdefault("consume api (push)", []).append(time.perf_counter() - t0)
            cpu.setdefault("consume api (push)", []).append(time.process_time() - c0)
            assert next(handled) == n
            shutil.rmtree(api_root)
            shutil.rmtree(cli_root)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    rate = {k: n / statistics.median(v) for k, v in t.items()}
    print(f"{n} messages of 100 B, medians of {args.reps} (load average {os.getloadavg()[0]:.2f})")
    for k, r in rate.items():
        base = rate["produce cli"] if k.startswith("produce") else rate["consume cli"]
        runs = ", ".join(f"{n / x:,.0f}" for x in t[k])
        print(f"{k:26} {r:12,.0f} msg/s   {r / base:5.2f}x the CLI   (runs: {runs})")
    for k, v in cpu.items():
        c = statistics.median(v)
        cli_cpu = statistics.median(cpu["produce cli" if k.startswith("produce") else "consume cli"])
        print(f"{k + ' (CPU)':26} {c:10.3f} s       {cli_cpu / c:5.2f}x the CLI")


if __name__ == "__main__":
    main()
