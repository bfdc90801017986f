#!/usr/bin/env python3
"""``Consumer.messages()`` against Redis Streams, and this checkout against another, on a busy
machine: wall, CPU and thread switches per message. Not a test::

    .venv/bin/python tests/bench/iter_ab.py --sizes 1024 --reps 7 --hogs 2 --base /work/main

One store per size (``--mb`` of bodies, ``Producer.send_many`` of 1000 into a topic of 8
queues, as ``bench_produce.py --api`` writes it) and one Redis stream of the same bodies (a
server of our own, ``appendfsync everysec``). Each repetition runs, interleaved, each in a
fresh process: the iterator of this checkout (and of ``--base``), a new group,
``exit_at_end``, timed from the Consumer's creation to the end of its ``with`` block as
``bench_produce.py`` times it; and redis-py + hiredis reading a new group with XREADGROUP
COUNT 1000 + XACK (timed from the group's creation to the last XACK). Printed, medians
(min-max) over the repetitions:

* ``msgs/s`` and its ratio to Redis's in the same repetition;
* ``cpu``: us of CPU a message, the whole process (Redis: client + server);
* ``member`` / ``main``: the member thread's and the iterating thread's share of it;
* ``vcsw`` / ``icsw``: voluntary and involuntary context switches of the process (all threads)
  per 1000 messages; ``slices``: the threads' time slices (``schedstat``) per 1000 messages.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))

from bench_produce import RedisServer, body_of, ensure_bench_venv, ensure_redis  # noqa: E402
from hogs import cpu_hogs, loadavg  # noqa: E402

WORKER = r"""
import json, os, resource, sys, threading, time
import store
store.Consumer

def slices():
    n = 0
    for t in os.listdir("/proc/self/task"):
        try:
            n += int(open(f"/proc/self/task/{t}/schedstat").read().split()[2])
        except OSError:
            pass
    return n

member = {}
orig = threading.Thread.run
def run(self):
    try:
        orig(self)
    finally:
        if self.name.startswith("mq-"):
            member["cpu"] = member.get("cpu", 0.0) + time.thread_time()
threading.Thread.run = run
P = time.process_time
r0, s0 = resource.getrusage(resource.RUSAGE_SELF), slices()
main0, c0, t0 = time.thread_time(), P(), time.perf_counter()
n = 0
with store.Consumer("T", group="g" + os.urandom(8).hex(), path=sys.argv[1], start_from="first") as c:
    for m in c.messages(exit_at_end=True):
        n += 1
    s1 = slices()   # (before the member thread ends and leaves /proc/self/task)
wall, cpu, main = time.perf_counter() - t0, P() - c0, time.thread_time() - main0
r1 = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"n": n, "seconds": wall, "cpu": cpu / n * 1e6, "main": main / n * 1e6,
                  "member": member.get("cpu", 0.0) / n * 1e6,
                  "vcsw": (r1.ru_nvcsw - r0.ru_nvcsw) / n * 1e3, "icsw": (r1.ru_nivcsw - r0.ru_nivcsw) / n * 1e3,
                  "slices": (s1 - s0) / n * 1e3}))
"""

REDIS = r"""
import json, os, resource, sys, time
import redis
port, pid = int(sys.argv[1]), int(sys.argv[2])
def server_cpu():
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
r = redis.Redis(host="127.0.0.1", port=port)
g = "g" + os.urandom(8).hex()
r0 = resource.getrusage(resource.RUSAGE_SELF)
sv0, c0, t = server_cpu(), time.process_time(), time.perf_counter()
r.xgroup_create("s", g, id="0")
got = 0
while True:
    res = r.xreadgroup(g, "c", {"s": ">"}, count=1000)
    if not res or not res[0][1]:
        break
    batch = res[0][1]
    for _mid, fields in batch:
        len(fields[b"b"])
    r.xack("s", g, *[mid for mid, _ in batch])
    got += len(batch)
wall, cpu = time.perf_counter() - t, time.process_time() - c0
sv = server_cpu() - sv0
r.xgroup_destroy("s", g)
r1 = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"n": got, "seconds": wall, "cpu": (cpu + sv) / got * 1e6, "main": cpu / got * 1e6,
                  "member": sv / got * 1e6, "vcsw": (r1.ru_nvcsw - r0.ru_nvcsw) / got * 1e3,
                  "icsw": (r1.ru_nivcsw - r0.ru_nivcsw) / got * 1e3}))
"""

COLUMNS = ("cpu", "member", "main", "vcsw", "icsw", "slices")


def make_store(root: Path, size: int, n: int) -> None:
    import store
    with store.Admin(root) as admin:
        admin.create_topic("T", queues=8)
    with store.Producer(root) as p:
        for i in range(0, n, 1000):
            p.send_many("T", [body_of(k, size) for k in range(i, min(n, i + 1000))])


def fill_redis(peer_py: Path, port: int, size: int, n: int) -> None:
    code = (f"import redis, sys; sys.path.insert(0, {str(HERE)!r}); from bench_produce import body_of\n"
            f"r = redis.Redis(port={port}); p = r.pipeline(transaction=False)\n"
            f"for i in range({n}):\n    p.xadd('s', {{'b': body_of(i, {size})}})\n"
            f"    if i % 1000 == 999: p.execute()\np.execute()\n")
    subprocess.run([str(peer_py), "-c", code], check=True)


def run(args: list[str], cwd: Path, n: int) -> dict:
    p = subprocess.run(args, capture_output=True, text=True, cwd=cwd, timeout=900)
    if p.returncode != 0:
        raise SystemExit(f"{args[:2]} failed: {p.stderr[-2000:]}")
    out = dict(json.loads(p.stdout))
    if out["n"] != n:
        raise SystemExit(f"{args[:2]}: {out['n']} messages, expected {n}")
    out["rate"] = n / out["seconds"]
    return out


def summary(xs: list[float]) -> str:
    return f"{statistics.median(xs):9.2f} ({min(xs):.2f}-{max(xs):.2f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1024")
    ap.add_argument("--mb", type=float, default=100.0)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--hogs", type=int, default=2, help="CPU hogs (yes > /dev/null) through every repetition")
    ap.add_argument("--base", type=Path, help="another checkout with its own .venv (e.g. /work/main)")
    a = ap.parse_args()
    sides = {"this": REPO} | ({"base": a.base.resolve()} if a.base else {})
    peer_py = ensure_bench_venv()
    redis_exe = ensure_redis()
    with tempfile.TemporaryDirectory(prefix="mqctl-iter-ab-") as tmp:
        for size in (int(s) for s in a.sizes.split(",")):
            n = max(100, int(a.mb * 1e6 / size)) if size < 65536 else max(100, int(a.mb * 1e6 / size))
            root = Path(tmp) / f"s{size}"
            make_store(root, size, n)
            srv = RedisServer(redis_exe, Path(tmp), "everysec")
            loads = []
            rows: dict[str, list[dict]] = {}
            try:
                fill_redis(peer_py, srv.port, size, n)
                with cpu_hogs(a.hogs):
                    for rep in range(a.reps):   # interleaved, the order turned each time
                        order = list(sides.items()) + [("redis", None)]
                        for side, repo in (order if rep % 2 == 0 else order[::-1]):
                            if repo is None:
                                r = run([str(peer_py), "-c", REDIS, str(srv.port), str(srv.proc.pid)], Path(tmp), n)
                            else:
                                r = run([str(repo / ".venv" / "bin" / "python"), "-c", WORKER, str(root)], repo, n)
                            rows.setdefault(side, []).append(r)
                        loads.append(loadavg())
            finally:
                srv.stop()
            print(f"\n{size} B bodies, {n} messages, {a.reps} repetitions, {a.hogs} hogs; load per repetition: "
                  f"{', '.join(loads)}")
            print(f"{'':6s}{'msgs/s':>22s}{'x redis':>22s}" + "".join(f"{c:>22s}" for c in COLUMNS))
            for side, runs in rows.items():
                ratio = [r["rate"] / x["rate"] for r, x in zip(runs, rows["redis"])]
                cells = [summary([r["rate"] for r in runs]), summary(ratio)]
                cells += [summary([r[c] for r in runs]) if c in runs[0] else f"{'':>22s}" for c in COLUMNS]
                print(f"{side:6s}" + "".join(f"{c:>22s}" for c in cells))
            if "base" in rows:
                ab = [t["rate"] / b["rate"] for t, b in zip(rows["this"], rows["base"])]
                cpu = [t["cpu"] / b["cpu"] for t, b in zip(rows["this"], rows["base"])]
                print(f"this/base msgs/s {summary(ab)}   cpu {summary(cpu)}")
            print(f"(redis: member = server CPU, main = client CPU; {time.strftime('%H:%M:%S')})")


if __name__ == "__main__":
    main()
