#!/usr/bin/env python3
"""Consume throughput at big bodies: this checkout against another (``--base``, e.g. main) and
Redis Streams, interleaved in one run.

Not a test (no ``test_`` prefix). Run from the repository::

    .venv/bin/python tests/bench/bench_consume.py --base /work/main --hogs 2 --reps 5
    .venv/bin/python tests/bench/bench_consume.py --quick      # a smoke run of the script

One store per size (``--sizes``, ``--mb`` of bodies each, made once with this checkout's
``mqctl send``) and one Redis stream per size (XADD pipelined 1000 at a time, AOF
``appendfsync everysec``, as ``bench_produce.py``). Each repetition then consumes every one
of them with a new group, in an order that turns each repetition:

* ``mqctl consume T -g G --from first -e`` of each checkout, its stdout the sink
  (``--sink``: ``null`` is /dev/null; ``file`` a file in the scratch directory; ``pipe`` a
  pipe read by ``cat > /dev/null``). The whole process is timed, start-up included.
* the Python API of each checkout: ``store.Consumer(...).messages(exit_at_end=True)``,
  timed from the Consumer's creation (the library's import excluded, as ``import redis`` is
  on the other side: ``store`` loads ``Consumer`` on first use), each body's length read.
* the floor of the Python API (``api_floor.py``, this checkout's store): one thread reads
  the queues with the store's checked reads and builds a ``store.Message`` a record, timed
  from the store's opening; no group, no member thread, no hand-over (``--api`` only).
* with ``--aio``, the asyncio iterator of each checkout: ``store.AsyncConsumer(...).messages(
  exit_at_end=True)`` in ``asyncio.run``, timed from the consumer's creation as the above.
* Redis: XREADGROUP COUNT 1000 + XACK of every batch (redis-py + hiredis), timed from the
  first call (the group's creation); it writes every body and a newline to the same kind of
  sink (one ``writev`` per 1,024 buffers; /dev/null with ``--sink null``), so both sides do
  the same output work.

Besides the rate, the CPU each side spent per message: mqctl's process (start-up included),
the API worker from the Consumer's creation, Redis's client in its timed part plus the
server's meanwhile. On a loaded machine the CPU decides the wall time.

``--hogs N`` runs N ``yes > /dev/null`` beside everything. Prints medians, min-max and the
ratios to Redis taken per repetition; the JSON goes to ``bench-results/consume-*.json``.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_produce import (
    RedisServer,
    body_of,
    ensure_bench_venv,
    ensure_redis,
    fmt,
    summarise,
    write_input,
)
from hogs import cpu_hogs, loadavg

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
RESULTS = REPO / "bench-results"

# The Python API side, run with a checkout's own interpreter (its store package).
API_WORKER = """
import json, sys, time
spec = json.loads(sys.argv[1])
import store
store.Consumer   # the library loaded before the clock starts, as redis is on the other side
t = time.perf_counter()
cpu = time.process_time()
got = nbytes = 0
with store.Consumer("T", group=spec["group"], path=spec["path"], start_from="first") as c:
    for m in c.messages(exit_at_end=True):
        got += 1
        nbytes += len(m.body)
print(json.dumps({"seconds": time.perf_counter() - t, "count": got, "bytes": nbytes,
                  "cpu_seconds": time.process_time() - cpu}))
"""

# The asyncio iterator (``--aio``): ``store.AsyncConsumer(...).messages(exit_at_end=True)``, timed
# the same way (its runtime on the event loop's thread: one thread, not two).
AIO_WORKER = """
import asyncio, json, sys, time
spec = json.loads(sys.argv[1])
import store
store.AsyncConsumer

async def main():
    t = time.perf_counter()
    cpu = time.process_time()
    got = nbytes = 0
    async with store.AsyncConsumer("T", group=spec["group"], path=spec["path"], start_from="first") as c:
        async for m in c.messages(exit_at_end=True):
            got += 1
            nbytes += len(m.body)
    return {"seconds": time.perf_counter() - t, "count": got, "bytes": nbytes,
            "cpu_seconds": time.process_time() - cpu}

print(json.dumps(asyncio.run(main())))
"""


def redis_worker(spec: dict) -> dict:
    """(In the peers' venv.) Produce a stream, or read it with a new group into a sink."""
    import redis
    r = redis.Redis(host="127.0.0.1", port=spec["port"])
    key, n, size = spec["stream"], spec["n"], spec["size"]
    if spec["phase"] == "produce":
        p = r.pipeline(transaction=False)
        for i in range(n):
            p.xadd(key, {"b": body_of(i, size)})
            if (i + 1) % 1000 == 0:
                p.execute()
        p.execute()
        return {"count": r.xlen(key)}
    out = spec.get("out")
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600) if out else -1
    nl = b"\n"
    t = time.perf_counter()
    cpu = time.process_time()
    r.xgroup_create(key, spec["group"], id="0")   # (timed: mqctl's join of a new group is)
    got = 0
    try:
        while True:
            res = r.xreadgroup(spec["group"], "c", {key: ">"}, count=1000)
            if not res or not res[0][1]:
                break
            batch = res[0][1]
            if fd >= 0:
                iov: list[bytes] = []
                for _mid, fields in batch:
                    iov += (fields[b"b"], nl)
                for i in range(0, len(iov), 1024):
                    os.writev(fd, iov[i:i + 1024])
            r.xack(key, spec["group"], *[mid for mid, _ in batch])
            got += len(batch)
    finally:
        if fd >= 0:
            os.close(fd)
    return {"seconds": time.perf_counter() - t, "count": got, "cpu_seconds": time.process_time() - cpu}


def server_cpu(pid: int) -> float:
    """CPU seconds (user + system) the process ``pid`` has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_json(cmd: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> dict:
    p = subprocess.run(cmd, capture_output=True, timeout=3600, env=env, cwd=cwd)
    if p.returncode != 0:
        raise SystemExit(f"{cmd[:3]} failed: {p.stderr.decode()[-2000:]}")
    return dict(json.loads(p.stdout))


class Sink:
    """Where a run's output goes: /dev/null, a file (truncated each run) or a pipe to cat."""

    def __init__(self, kind: str, workdir: Path) -> None:
        self.kind = kind
        self.path = workdir / "out" if kind == "file" else None
        self.fifo = workdir / "fifo"

    def open(self) -> tuple[int, subprocess.Popen[bytes] | None]:
        if self.kind == "null":
            return os.open(os.devnull, os.O_WRONLY), None
        if self.kind == "file":
            assert self.path is not None
            return os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), None
        cat = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
        assert cat.stdin is not None
        return os.dup(cat.stdin.fileno()), cat

    def redis_target(self) -> tuple[str | None, subprocess.Popen[bytes] | None]:
        """What the Redis worker writes to: a path (the fifo, read by cat) or None."""
        if self.kind == "null":
            return os.devnull, None   # (mqctl writes its bodies there too)
        if self.kind == "file":
            return str(self.path), None
        if not self.fifo.exists():
            os.mkfifo(self.fifo)
        cat = subprocess.Popen(["cat", str(self.fifo)], stdout=subprocess.DEVNULL)
        return str(self.fifo), cat

    @staticmethod
    def close(fd: int, cat: subprocess.Popen[bytes] | None) -> None:
        if fd >= 0:
            os.close(fd)
        if cat is not None:
            if cat.stdin is not None:
                cat.stdin.close()
            cat.wait()


def mqctl_consume(repo: Path, store: Path, group: str, sink: Sink) -> dict:
    env = dict(os.environ, MQCTL_STORE=str(store), NO_COLOR="1")
    env.pop("MQCTL_FAILPOINTS", None)
    fd, cat = sink.open()
    before = os.times()
    t = time.perf_counter()
    try:
        p = subprocess.run([str(repo / ".venv" / "bin" / "mqctl"), "consume", "T", "-g", group, "--from", "first",
                            "-e"], stdout=fd, stderr=subprocess.PIPE, env=env, timeout=3600)
        dt = time.perf_counter() - t
    finally:
        Sink.close(fd, cat)
    after = os.times()
    if p.returncode != 0:
        raise SystemExit(f"mqctl consume ({repo}) failed ({p.returncode}): {p.stderr.decode()[-2000:]}")
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return {"seconds": dt, "cpu_seconds": cpu}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--redis-worker", help=argparse.SUPPRESS)
    ap.add_argument("--base", default=None, help="another checkout with its own .venv (e.g. /work/main)")
    ap.add_argument("--hogs", type=int, default=0, help="CPU hogs (yes > /dev/null) through every repetition")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--sizes", default="1024,4096,65536", help="body sizes in bytes, comma separated")
    ap.add_argument("--mb", type=float, default=100.0, help="MB of bodies per size")
    ap.add_argument("--sink", choices=("null", "file", "pipe"), default="null")
    ap.add_argument("--api", action=argparse.BooleanOptionalAction, default=True, help="the Python iterator too")
    ap.add_argument("--cli", action=argparse.BooleanOptionalAction, default=True, help="mqctl consume")
    ap.add_argument("--aio", action="store_true", help="the asyncio iterator (AsyncConsumer) of each checkout too")
    ap.add_argument("--quick", action="store_true", help="tiny sizes: check that the script works")
    a = ap.parse_args()
    if a.redis_worker:
        print(json.dumps(redis_worker(json.loads(a.redis_worker))))
        return
    if a.quick:
        a.reps, a.mb = 1, 4.0
    sides = {"this": REPO}
    if a.base:
        sides["base"] = Path(a.base).resolve()
    import compileall
    for repo in sides.values():   # timed as installed: bytecode compiled once, not per process
        for pkg in ("mqctl", "store"):
            compileall.compile_dir(repo / pkg, quiet=1)
    sizes = [int(x) for x in a.sizes.split(",") if x]
    counts = {s: max(100, int(a.mb * 1e6 / s)) for s in sizes}
    peer_py = ensure_bench_venv()
    redis_exe = ensure_redis()
    workdir = Path(tempfile.mkdtemp(prefix="mqctl-bench-consume-"))
    sink = Sink(a.sink, workdir)
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    uptime_start = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    stores: dict[int, Path] = {}
    for s in sizes:
        inp = workdir / f"in{s}"
        write_input(inp, counts[s], s)
        stores[s] = workdir / f"store{s}"
        with open(inp, "rb") as fh:
            subprocess.run([str(REPO / ".venv" / "bin" / "mqctl"), "send", "T"], stdin=fh, check=True,
                           env=dict(os.environ, MQCTL_STORE=str(stores[s])), stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
        inp.unlink()
    srv = RedisServer(redis_exe, workdir, "everysec")
    runs: dict[str, list[float]] = {}
    cpu_us: dict[str, list[float]] = {}   # CPU microseconds per message, each run
    loads: list[str] = []
    try:
        for s in sizes:
            run_json([str(peer_py), __file__, "--redis-worker", json.dumps(
                {"phase": "produce", "port": srv.port, "stream": f"s{s}", "n": counts[s], "size": s})])
        hogs = cpu_hogs(a.hogs).start()
        try:
            for rep in range(a.reps):
                loads.append(loadavg())
                sys.stderr.write(f"[bench] repetition {rep + 1}/{a.reps}; load {loads[-1]}\n")
                for s in sizes:
                    tag = f"{s // 1024}k" if s >= 1024 else str(s)
                    jobs: list[tuple[str, object]] = [("redis", None)]
                    for side, repo in sides.items():
                        if a.cli:
                            jobs.append((f"cli_{side}", repo))
                        if a.api:
                            jobs.append((f"api_{side}", repo))
                        if a.aio:
                            jobs.append((f"aio_{side}", repo))
                    if a.api:
                        jobs.append(("apifloor", REPO))
                    k = rep % len(jobs)
                    for name, repo in jobs[k:] + jobs[:k]:
                        group = f"r{rep}-{name}"
                        if name == "redis":
                            out, cat = sink.redis_target()
                            before = server_cpu(srv.proc.pid)
                            try:
                                r = run_json([str(peer_py), __file__, "--redis-worker", json.dumps(
                                    {"phase": "consume", "port": srv.port, "stream": f"s{s}", "n": counts[s],
                                     "size": s, "group": group, "out": out})])
                            finally:
                                Sink.close(-1, cat)
                            # the client's CPU in its timed part and the server's meanwhile
                            r["cpu_seconds"] += server_cpu(srv.proc.pid) - before
                        elif name.startswith("cli"):
                            assert isinstance(repo, Path)
                            r = mqctl_consume(repo, stores[s], group, sink)
                        elif name == "apifloor":
                            r = run_json([str(REPO / ".venv" / "bin" / "python"), str(HERE / "api_floor.py"),
                                          str(stores[s])], env=dict(os.environ, NO_COLOR="1"))
                            if r["count"] != counts[s]:
                                raise SystemExit(f"{name} {tag}: {r['count']} of {counts[s]} messages")
                        else:
                            assert isinstance(repo, Path)
                            r = run_json([str(repo / ".venv" / "bin" / "python"), "-c",
                                          AIO_WORKER if name.startswith("aio") else API_WORKER,
                                          json.dumps({"group": group, "path": str(stores[s])})],
                                         env=dict(os.environ, NO_COLOR="1"), cwd=repo)   # `-c` imports from the cwd
                            if r["count"] != counts[s]:
                                raise SystemExit(f"{name} {tag}: {r['count']} of {counts[s]} messages")
                        runs.setdefault(f"{name}_{tag}", []).append(counts[s] / r["seconds"])
                        cpu_us.setdefault(f"{name}_{tag}", []).append(r["cpu_seconds"] / counts[s] * 1e6)
                        sys.stderr.write(f"[bench]   {name}_{tag}: {fmt(counts[s] / r['seconds'])} msgs/s\n")
        finally:
            hogs.stop()
    finally:
        srv.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    uptime_end = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    med = {k: summarise(v) for k, v in runs.items()}
    cpu = {k: summarise(v) for k, v in cpu_us.items()}
    ratios = {}
    for k in runs:
        if k.startswith("redis"):
            continue
        tag = k.rsplit("_", 1)[1]
        rs = [x / y for x, y in zip(runs[k], runs[f"redis_{tag}"])]
        ratios[f"{k} / redis (target >= 2)"] = summarise(rs)
        if k.startswith(("api_", "aio_")) and f"apifloor_{tag}" in runs:   # how near the iterator is to its floor
            ratios[f"{k} / apifloor"] = summarise([x / y for x, y in zip(runs[k], runs[f"apifloor_{tag}"])])
    result = {"started": started, "uptime_start": uptime_start, "uptime_end": uptime_end, "loads": loads,
              "args": vars(a), "counts": counts, "medians": med, "cpu_us_per_msg": cpu, "ratios": ratios}
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"consume-{started.replace(':', '')}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nconsume benchmark {started}; sink {a.sink}; hogs {a.hogs}; {a.reps} repetitions; "
          f"{a.mb:g} MB per size\n{uptime_start}\n{uptime_end}\nloads per repetition: {', '.join(loads)}\n")
    print(f"{'variant':28s} {'median msgs/s':>14s} {'min-max':>20s} {'MB/s':>8s} {'CPU us/msg':>11s}")
    for k, v in sorted(med.items()):
        size = next(s for s in sizes if k.endswith(f"_{s // 1024}k" if s >= 1024 else f"_{s}"))
        print(f"{k:28s} {fmt(v['median']):>14s} {fmt(v['min']) + '-' + fmt(v['max']):>20s}"
              f" {v['median'] * size / 1e6:8.0f} {cpu[k]['median']:11.2f}")
    print()
    for k, v in sorted(ratios.items()):
        print(f"{k:40s} {v['median']:6.2f}  ({v['min']:.2f}-{v['max']:.2f})")
    print(f"\nwritten to {out}")


if __name__ == "__main__":
    main()
