#!/usr/bin/env python3
"""``Producer.send_many`` (``flush="async"``, batches of 1,000) against another checkout, the C
and Python floors and Redis, with the CPU each took per message, user and system apart.

Not a test (no ``test_`` prefix). Run from the repository::

    .venv/bin/python tests/bench/bench_api_write.py --baseline /work/main --hogs 2   # ~10 minutes
    .venv/bin/python tests/bench/bench_api_write.py --sizes 65536 --reps 3            # one size

Each repetition runs, per size, every variant once (the order reversed every other repetition):

* ``api``, ``base_api``: ``bench_produce.api_worker`` (``Producer.send_many`` of ``--mb`` MB in
  batches of 1,000, timed from the producer's open, its pages recycled first) with this
  checkout's venv and with ``--baseline``'s; user and system CPU from the worker's rusage, and
  the time it waited for a CPU (schedstat: what a loaded machine adds to the wall time);
* ``c_floor``, ``py_floor`` (4 KiB and up): ``cat FILE | pipe_floor OUT`` and the Python floor
  of ``bench_produce.py``, as it runs them (a new file, after a sync and the page recycling),
  with the floor process's own rusage (``wait4``; cat's apart, ``cat_*``);
* ``redis`` (``--redis``): pipelined ``XADD``, 1,000 a pipeline, ``appendfsync everysec``, a new
  server each run (the peers' venv of ``bench_produce.py``).

Reported: the median and min-max of msgs/s and of user and system µs per message, and the
per-repetition ratios (``api`` / each other). ``--hogs N`` runs N ``yes > /dev/null`` through
it all. Results go to ``bench-results/api-write-<UTC time>.json`` and a table on stdout.
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

import bench_produce as bp
from hogs import cpu_hogs, loadavg

REPO = bp.REPO


def floor_run(cmd: list[str], stdin_path: Path, out: Path) -> dict:
    """``cat FILE | CMD`` timed as ``bench_produce.c_floor_seconds`` times it (a sync and the page
    recycling first), with the floor's own rusage and cat's, each from ``wait4``."""
    os.sync()
    bp.recycle_pages(out.parent, stdin_path.stat().st_size * 9 // 8)
    t = time.perf_counter()
    cat = subprocess.Popen(["cat", str(stdin_path)], stdout=subprocess.PIPE)
    assert cat.stdout is not None
    floor = subprocess.Popen(cmd, stdin=cat.stdout, stdout=subprocess.DEVNULL)
    cat.stdout.close()
    _, status, ru = os.wait4(floor.pid, 0)
    _, _, cat_ru = os.wait4(cat.pid, 0)
    dt = time.perf_counter() - t
    floor.returncode = cat.returncode = 0   # (reaped here: Popen must not wait for them)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{cmd[0]} failed: {status}")
    out.unlink()
    return {"seconds": dt, "user": ru.ru_utime, "sys": ru.ru_stime, "cat_user": cat_ru.ru_utime,
            "cat_sys": cat_ru.ru_stime}


def api_run(exe: Path, store: Path, n: int, size: int) -> dict:
    shutil.rmtree(store, ignore_errors=True)
    bp.run_mqctl(["topic", "create", "T"], store, exe=exe)   # (untimed, as in bench_produce.py)
    os.sync()
    r = bp.run_api({"n": n, "size": size, "path": str(store), "phase": "produce"}, exe)
    shutil.rmtree(store, ignore_errors=True)
    return {"seconds": r["seconds"], "user": r["cpu_timed_seconds"] - r["sys_seconds"], "sys": r["sys_seconds"],
            "runq": r["runq_seconds"]}


def redis_run(redis_exe: str, peer_py: Path, workdir: Path, n: int, size: int) -> dict:
    srv = bp.RedisServer(redis_exe, workdir, "everysec")
    try:
        p = bp.run_peer(peer_py, {"kind": "redis", "phase": "produce", "port": srv.port, "n": n, "size": size,
                                  "pipeline": 1000, "scratch": str(workdir)})
    finally:
        srv.stop()
    return {"seconds": p["seconds"]}


def spread(values: list[float]) -> str:
    med = statistics.median(values)
    return f"{med:12,.1f}  ({min(values):,.1f}-{max(values):,.1f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", type=Path, help="another checkout (with its .venv): variant base_api")
    ap.add_argument("--sizes", default="100,1024,4096,65536")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--mb", type=float, default=100.0, help="MB sent per run (at most --nmax messages)")
    ap.add_argument("--nmax", type=int, default=500_000)
    ap.add_argument("--hogs", type=int, default=0)
    ap.add_argument("--redis", action="store_true", help="Redis pipelined XADD too (the peers' venv)")
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    counts = {s: min(a.nmax, int(a.mb * 1e6 / s)) for s in sizes}
    workdir = Path(tempfile.mkdtemp(prefix="bench-api-write-"))
    runs: dict[str, list[dict]] = {}
    loads: list[str] = []
    try:
        inputs = {}
        for s in sizes:
            if s >= 4096:
                inputs[s] = workdir / f"in-{s}"
                bp.write_input(inputs[s], counts[s], s)
        floor_exe = bp.compile_crc_floor("pipe_floor", workdir)
        py = bp.MQCTL.parent / "python"
        redis_exe = bp.ensure_redis() if a.redis else ""
        peer_py = bp.ensure_bench_venv() if a.redis else py
        sides = [("api", bp.MQCTL)] + ([("base_api", a.baseline / ".venv" / "bin" / "mqctl")] if a.baseline else [])
        exes = dict(sides)
        with cpu_hogs(a.hogs):
            for rep in range(a.reps):
                loads.append(loadavg())
                bp.log(f"repetition {rep + 1}/{a.reps}; load {loads[-1]}")
                for s in sizes:
                    n, tag = counts[s], (f"{s // 1024}k" if s >= 1024 else str(s))
                    plan = [name for name, _ in sides] + (["c_floor", "py_floor"] if s in inputs and floor_exe else [])
                    plan += ["redis"] if a.redis else []
                    for name in (plan if rep % 2 == 0 else plan[::-1]):
                        out = workdir / "floor.out"
                        if name in exes:
                            r = api_run(exes[name], workdir / "store", n, s)
                        elif name == "c_floor":
                            r = floor_run([str(floor_exe), str(out)], inputs[s], out)
                        elif name == "py_floor":
                            r = floor_run([str(py), "-c", bp._PY_FLOOR, str(out)], inputs[s], out)
                        else:
                            r = redis_run(redis_exe, peer_py, workdir, n, s)
                        r["msgs_s"] = n / r["seconds"]
                        for k in ("user", "sys", "cat_user", "cat_sys", "runq"):
                            if k in r:
                                r[f"{k}_us"] = r.pop(k) / n * 1e6
                        runs.setdefault(f"{name}_{tag}", []).append(r)
                        bp.log(f"  {name}_{tag}: {r['msgs_s']:,.0f} msgs/s "
                               + " ".join(f"{k} {v:.1f}" for k, v in r.items() if k.endswith("_us")))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"Producer.send_many against its floors, {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}; "
          f"{a.hogs} CPU hogs; load per repetition: {'; '.join(loads)}")
    print(f"{'':24}{'msgs/s':>30}{'user us/msg':>32}{'sys us/msg':>32}{'run-queue wait us/msg':>32}")
    for name, rs in runs.items():
        cols = [spread([r["msgs_s"] for r in rs])] + [spread([r[k] for r in rs]) if k in rs[0] else ""
                                                      for k in ("user_us", "sys_us", "runq_us")]
        print(f"  {name:22}" + "".join(f"{c:>32}" for c in cols))
    ratios = {}
    for name in runs:
        if not name.startswith("api_"):
            continue
        tag = name[4:]
        for other in ("base_api", "c_floor", "py_floor", "redis"):
            theirs = runs.get(f"{other}_{tag}")
            if theirs:
                per = [x["msgs_s"] / y["msgs_s"] for x, y in zip(runs[name], theirs)]
                ratios[f"{name}_vs_{other}"] = per
                print(f"  {name}_vs_{other}: {statistics.median(per):.2f} ({min(per):.2f}-{max(per):.2f})")
        if f"base_api_{tag}" in runs and f"redis_{tag}" in runs:
            per = [x["msgs_s"] / y["msgs_s"] for x, y in zip(runs[f"base_api_{tag}"], runs[f"redis_{tag}"])]
            ratios[f"base_api_{tag}_vs_redis"] = per
            print(f"  base_api_{tag}_vs_redis: {statistics.median(per):.2f} ({min(per):.2f}-{max(per):.2f})")
    bp.RESULTS.mkdir(exist_ok=True)
    out_path = bp.RESULTS / f"api-write-{time.strftime('%Y-%m-%dT%H%M%SZ', time.gmtime())}.json"
    out_path.write_text(json.dumps({"args": vars(a) | {"baseline": str(a.baseline)}, "counts": counts,
                                    "loads": loads, "runs": runs, "ratios": ratios}, indent=1))
    print(f"results: {out_path}")


if __name__ == "__main__":
    main()
