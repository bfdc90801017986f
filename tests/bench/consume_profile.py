#!/usr/bin/env python3
"""Where ``mqctl consume T -g G --from first -e > /dev/null`` spends its CPU. Not a test::

    .venv/bin/python tests/bench/consume_profile.py --sizes 4096,65536 --reps 7
    .venv/bin/python tests/bench/consume_profile.py --base /work/main      # the same, of main too

One store per size (``--mb`` of bodies, a topic of 8 queues, written by ``mqctl send``). Before
each run the store is put back as it was after the send (everything but the commit log, which
a consume does not change), so every run is a new group's first, as in bench_produce.py. Each
repetition runs, in this order and then reversed, this checkout (and ``--base``):

* ``whole``: the real ``mqctl consume`` process, timed as bench_produce.py times it: CPU
  (user + system, from ``wait4``) and wall;
* the same command inside a harness that wraps the consume's phases (thread CPU of the
  loop's thread, ``time.thread_time``; the first phase is the process's CPU since its start):
  ``start`` the interpreter, ``site`` and ``mqctl.entry``'s imports; ``imports`` from there to
  the consumer runtime loaded (``run_consume``'s imports included); ``open+join`` the store
  opened, the member joined, the ends snapshot; ``loop`` the consume loop, split into
  ``reads`` (the store's pulls: shared windows and single pulls, with the C check loop),
  ``checks`` (``nativecheck.check_run`` alone: CRCs, the records read outside a window, the
  columns), ``writes`` (the sink's ``write_raw``) and ``rebalance``; ``shutdown`` the final
  commit, the locks released, the member left; ``exit`` the interpreter's own end (the whole
  process's CPU minus the harness's at its end, or at the quick path's ``os._exit``); and
  ``dataclasses`` the CPU of building the dataclasses loaded (part of ``imports``).

Printed, medians over the repetitions (min-max for ``whole``), with the load.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

HARNESS = r"""
import json, os, sys, time
marks = {"start": time.process_time()}
from mqctl.lazymods import defer
defer()   # (inspect stays unloaded, as on the quick path: dataclasses would load it here)
import dataclasses
_build = dataclasses._process_class
built = [0.0]
def _timed(cls, *a, **k):
    t = time.process_time()
    try:
        return _build(cls, *a, **k)
    finally:
        built[0] += time.process_time() - t
dataclasses._process_class = _timed
import mqctl.entry
marks["entry"] = time.process_time()
spent = {}
def wrap(obj, name, label, clock=time.thread_time):
    orig = getattr(obj, name)
    def timed(*a, **k):
        t = clock()
        try:
            return orig(*a, **k)
        finally:
            spent[label] = spent.get(label, 0.0) + clock() - t
    setattr(obj, name, timed)
import mqctl.consumerun as CR
run_consume = CR.run_consume
def hooked(st, r):
    import store.client.runtime as R
    import store.client.rebalance as RB
    import store.log.messagestore as MS
    import store.log.columns as C
    import mqctl.consumer.stdoutsink as S
    marks["imports"] = time.process_time()
    for meth in ("setup", "_loop", "shutdown"):
        wrap(R.ConsumerRuntime, meth, meth, time.process_time)
    wrap(RB.Rebalancer, "rebalance", "rebalance")
    wrap(MS.Store, "pull_many", "reads")
    wrap(MS.Store, "pull_columns", "reads")
    if C._native is not None:
        wrap(C, "_native", "checks")
    wrap(S.StdoutSink, "write_raw", "writes")
    return run_consume(st, r)
CR.run_consume = hooked
sys.argv = ["mqctl"] + sys.argv[1:]
def report():
    end = time.process_time()
    os.write(int(os.environ["PROFILE_FD"]),
             json.dumps({"marks": marks, "spent": spent, "end": end, "dataclasses": built[0]}).encode())
_exit = os._exit
def reported_exit(code):   # (the quick consume ends with os._exit: mqctl/entry.py)
    report()
    _exit(code)
os._exit = reported_exit
code = 0
try:
    mqctl.entry.main()
except SystemExit as e:
    code = e.code or 0
report()
sys.exit(code)
"""


def restore(store: Path, pristine: Path) -> None:
    """The store as it was after the send (the commit log is never changed by a consume)."""
    for p in store.iterdir():
        if p.name != "commitlog":
            shutil.rmtree(p) if p.is_dir() else p.unlink()
    for p in pristine.iterdir():
        shutil.copytree(p, store / p.name) if p.is_dir() else shutil.copy2(p, store / p.name)


def env_for(store: Path) -> dict[str, str]:
    env = dict(os.environ, MQCTL_STORE=str(store), NO_COLOR="1")
    env.pop("PYTHONDONTWRITEBYTECODE", None)   # (as a user runs it: the modules' .pyc files are used)
    return env


ARGS = ["consume", "T", "-g", "bench", "--from", "first", "-e"]


def whole(root: Path, store: Path, pristine: Path) -> tuple[float, float]:
    restore(store, pristine)
    t = time.perf_counter()
    p = subprocess.Popen([str(root / ".venv/bin/mqctl"), *ARGS], stdout=subprocess.DEVNULL, env=env_for(store))
    _, status, ru = os.wait4(p.pid, 0)
    if status:
        raise SystemExit(f"mqctl consume failed ({status})")
    return (ru.ru_utime + ru.ru_stime) * 1000, (time.perf_counter() - t) * 1000


def phases(root: Path, store: Path, pristine: Path) -> dict[str, float]:
    restore(store, pristine)
    r, w = os.pipe()
    env = env_for(store) | {"PROFILE_FD": str(w)}
    # (in the checkout: ``python -c`` imports from the working directory first)
    p = subprocess.Popen([str(root / ".venv/bin/python"), "-c", HARNESS, *ARGS], stdout=subprocess.DEVNULL,
                         env=env, pass_fds=(w,), cwd=root)
    os.close(w)
    _, status, ru = os.wait4(p.pid, 0)
    data = json.loads(os.read(r, 1 << 16) or b"{}")
    os.close(r)
    if status or not data:
        raise SystemExit(f"the harness failed ({status})")
    m, s = data["marks"], data["spent"]
    return {"start": m["entry"] * 1000, "imports": (m["imports"] - m["entry"]) * 1000,
            "open+join": s.get("setup", 0) * 1000, "loop": s.get("_loop", 0) * 1000,
            "reads": s.get("reads", 0) * 1000, "checks": s.get("checks", 0) * 1000,
            "writes": s.get("writes", 0) * 1000, "rebalance": s.get("rebalance", 0) * 1000,
            "shutdown": s.get("shutdown", 0) * 1000,
            "exit": ((ru.ru_utime + ru.ru_stime) - data["end"]) * 1000, "dataclasses": data["dataclasses"] * 1000}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="4096,65536")
    ap.add_argument("--mb", type=float, default=100.0)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--base", type=Path, help="another checkout (with its .venv), profiled beside this one")
    a = ap.parse_args()
    roots = [REPO] + ([a.base.resolve()] if a.base else [])
    work = Path(tempfile.mkdtemp(prefix="consume-profile-"))
    try:
        stores = {}
        for size in map(int, a.sizes.split(",")):
            n = int(a.mb * 1e6) // size
            store, data = work / f"s{size}", work / f"in{size}"
            with open(data, "wb") as fh:
                for i in range(n):
                    fh.write(b"%010d" % i + b"x" * (size - 10) + b"\n")
            env = env_for(store)
            subprocess.run([str(REPO / ".venv/bin/mqctl"), "topic", "create", "T"], env=env, check=True,
                           capture_output=True)
            with open(data, "rb") as fh:
                subprocess.run([str(REPO / ".venv/bin/mqctl"), "send", "T"], stdin=fh, env=env, check=True,
                               capture_output=True)
            data.unlink()
            pristine = work / f"s{size}.pristine"
            pristine.mkdir()
            for p in store.iterdir():
                if p.name != "commitlog":
                    shutil.copytree(p, pristine / p.name) if p.is_dir() else shutil.copy2(p, pristine / p.name)
            stores[size] = (store, pristine, n)
        loads: list[str] = []
        got: dict[tuple[int, Path], dict[str, list[float]]] = {}
        for rep in range(a.reps):
            loads.append(open("/proc/loadavg").read().split()[0])
            for size, (store, pristine, _n) in stores.items():
                for root in roots if rep % 2 == 0 else roots[::-1]:
                    row = got.setdefault((size, root), {})
                    cpu, wall = whole(root, store, pristine)
                    row.setdefault("whole cpu", []).append(cpu)
                    row.setdefault("whole wall", []).append(wall)
                    for k, v in phases(root, store, pristine).items():
                        row.setdefault(k, []).append(v)
        print(f"mqctl consume -e > /dev/null, {a.mb:g} MB per size, {a.reps} repetitions; load (1 min) "
              f"at each: {' '.join(loads)}; ms of CPU unless said (medians)")
        for (size, root), row in got.items():
            cells = []
            for k, v in row.items():
                med = statistics.median(v)
                cells.append(f"{k} {med:.1f}" + (f" ({min(v):.0f}-{max(v):.0f})" if k.startswith("whole") else ""))
            print(f"{size} B, {stores[size][2]} msgs, {root}:\n  " + "; ".join(cells))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
