#!/usr/bin/env python3
"""The asyncio consumer against the sync one and against redis.asyncio, in one run. Not a test::

    .venv/bin/python tests/bench/bench_aio.py                # about 10 minutes
    .venv/bin/python tests/bench/bench_aio.py --hogs 2       # beside 2 CPU hogs

Every part runs ``--reps`` times, rep-major (each variant once, then again), so the variants
see the same load; medians with min-max, the load average printed with each part.

* throughput: ``store.AsyncConsumer.messages(exit_at_end=True)`` (``async for``, offsets
  committed) and ``AsyncConsumer.run`` with a no-op ``async def`` handler, against
  ``store.Consumer.messages(exit_at_end=True)`` and against redis.asyncio: ``XREADGROUP
  BLOCK`` ``COUNT 1000`` + ``XACK`` of every batch (redis-py + hiredis, a ``redis-server`` of
  our own on 127.0.0.1 with AOF ``everysec``, the machinery of ``bench_produce.py``), over
  the same ``--n`` messages of 100 bytes (8 queues; one stream), a fresh group each; timed
  in-process from the first call. Targets: >= 0.9x the sync iterator, >= 2x redis.asyncio.
  And the CPU time each used per message (the whole process; for redis, its client and the
  server): on a busy machine the sync iterator's two threads get twice the share of the
  cores that one event loop thread gets, which the rates show and the CPU does not.
* latency, store to handler: a thread sends one message every 5 ms (``Producer``, flush
  async) carrying its send time; an idle ``async for`` consumer notes when each arrives:
  p50 / p99 / max. Target on a quiet machine: <= 2 ms / <= 10 ms.
* idle: ``--idle-consumers`` async consumers of as many groups in a process of their own,
  each waiting in ``async for``, beside (at the same time, in other processes) as many
  sync consumers (``store.Consumer.messages``) and, with ``--baseline CHECKOUT``, as many
  async consumers of that checkout (e.g. main's): threads started in the process
  for them, and the CPU time of the whole process over a 60 s window that starts 30 s after
  they started (so it holds two of an idle member's lease renewals, one per 40 s: the most
  a 60 s window can). Target: < 0.1 s and no thread per consumer.

The redis peer runs in ``.bench-venv`` (see ``bench_produce.py``: redis-py there would slow
``mqctl``'s own start-up); without ``redis-server`` (and no apt-get) that part is skipped.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from hogs import cpu_hogs, loadavg

BODY = b"x" * 100


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def spread(xs: list[float], fmt: str) -> str:
    return f"{format(statistics.median(xs), fmt)} ({format(min(xs), fmt)}-{format(max(xs), fmt)})"


# ==============================================================================================
# The redis.asyncio peer: runs in .bench-venv (imports redis, never store)
# ==============================================================================================

async def redis_peer(spec: dict[str, Any]) -> dict[str, Any]:
    import redis.asyncio as aredis
    r = aredis.Redis(host="127.0.0.1", port=spec["port"])
    n = spec["n"]
    try:
        if spec["phase"] == "load":
            for i in range(0, n, 1000):
                p = r.pipeline(transaction=False)
                for _ in range(min(1000, n - i)):
                    p.xadd("s", {"b": BODY})
                await p.execute()
            return {"count": await r.xlen("s")}
        group = spec["group"]
        await r.xgroup_create("s", group, id="0")
        got = 0
        c0, t = cpu_s(), time.perf_counter()
        while got < n:
            res = await r.xreadgroup(group, "c", {"s": ">"}, count=1000, block=1000)
            if not res or not res[0][1]:
                continue
            ids = [mid for mid, _fields in res[0][1]]
            await r.xack("s", group, *ids)
            got += len(ids)
        return {"seconds": time.perf_counter() - t, "cpu_s": cpu_s() - c0, "count": got}
    finally:
        await r.aclose()


class RedisPeer:
    """redis-server and the .bench-venv interpreter, from bench_produce.py; None parts when
    they cannot be had."""

    def __init__(self, workdir: Path, n: int) -> None:
        from bench_produce import RedisServer, ensure_bench_venv, ensure_redis
        self.py = ensure_bench_venv()
        self.server = RedisServer(ensure_redis(), workdir, "everysec")
        self.run({"phase": "load", "n": n})

    def run(self, spec: dict[str, Any]) -> dict[str, Any]:
        spec = {**spec, "port": self.server.port}
        p = subprocess.run([str(self.py), __file__, "--peer-worker", json.dumps(spec)], capture_output=True,
                           timeout=3600)
        if p.returncode != 0:
            raise SystemExit(f"redis.asyncio peer {spec} failed: {p.stderr.decode()[-2000:]}")
        out: dict[str, Any] = json.loads(p.stdout)
        if out["count"] != spec["n"]:
            raise SystemExit(f"redis.asyncio peer {spec}: expected {spec['n']} messages, got {out['count']}")
        return out

    def server_cpu_s(self) -> float:
        """CPU time redis-server has used so far."""
        fields = Path(f"/proc/{self.server.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.server.stop()


# ==============================================================================================
# mqctl's side (imports store)
# ==============================================================================================

def sync_iter(root: Path, group: str) -> int:
    import store
    n = 0
    with store.Consumer("T", group, root, start_from="first") as c:
        for _m in c.messages(exit_at_end=True):
            n += 1
    return n


async def async_iter(root: Path, group: str) -> int:
    import store
    n = 0
    async with store.AsyncConsumer("T", group, root, start_from="first") as c:
        async for _m in c.messages(exit_at_end=True):
            n += 1
    return n


async def async_run(root: Path, group: str) -> int:
    import store
    n = 0

    async def handler(_m: store.Message) -> None:
        nonlocal n
        n += 1
    async with store.AsyncConsumer("T", group, root, start_from="first") as c:
        await c.run(handler, concurrency=4, exit_at_end=True)
    return n


def throughput(root: Path, n: int, reps: int, peer: RedisPeer | None) -> dict[str, list[float]]:
    import store
    with store.Producer(root) as p:
        for i in range(0, n, 1000):
            p.send_many("T", [BODY] * min(1000, n - i))
    secs: dict[str, list[float]] = {"sync iterator": [], "async for": [], "async run": []}
    if peer is not None:
        secs["redis.asyncio XREADGROUP"] = []
    cpus: dict[str, list[float]] = {name: [] for name in secs}
    loads = []
    for rep in range(reps):
        loads.append(loadavg())
        for name in secs:
            group = f"{name.split()[0].replace('.', '-')}-{name.split()[-1]}-{rep}"
            if name.startswith("redis"):
                assert peer is not None
                s0 = peer.server_cpu_s()
                out = peer.run({"phase": "consume", "n": n, "group": group})
                secs[name].append(out["seconds"])
                cpus[name].append(out["cpu_s"] + peer.server_cpu_s() - s0)
                continue
            c0, t0 = cpu_s(), time.perf_counter()
            got = (sync_iter(root, group) if name == "sync iterator"
                   else asyncio.run(async_iter(root, group)) if name == "async for"
                   else asyncio.run(async_run(root, group)))
            secs[name].append(time.perf_counter() - t0)
            cpus[name].append(cpu_s() - c0)
            assert got == n, (name, got, n)
    print(f"throughput, {n:,} messages of 100 bytes, {reps} reps (load {'; '.join(loads)}):")
    for name, ts in secs.items():
        rates = [n / t / 1000 for t in ts]
        vs_sync = [s / t for s, t in zip(secs["sync iterator"], ts)]
        us = [c / n * 1e6 for c in cpus[name]]
        print(f"  {name:26s} {spread(rates, '.0f')} k msg/s   this / sync iterator: x{spread(vs_sync, '.2f')}   "
              f"CPU {spread(us, '.2f')} us/msg")
    if peer is not None:
        for name in ("async for", "async run"):
            ratio = [r / t for r, t in zip(secs["redis.asyncio XREADGROUP"], secs[name])]
            print(f"  {name} / redis.asyncio XREADGROUP: x{spread(ratio, '.2f')}"
                  f"{' (target >= 2)' if name == 'async for' else ''}")
    ratio = [s / t for s, t in zip(secs["sync iterator"], secs["async for"])]
    print(f"  async for / sync iterator: x{spread(ratio, '.2f')} (target >= 0.9)")
    return secs


async def latency_once(root: Path, samples: int, group: str) -> list[float]:
    import store
    lat: list[float] = []

    def produce() -> None:
        with store.Producer(root) as p:
            for _ in range(samples):
                p.send("L", struct.pack("<d", time.perf_counter()), queue=0)
                time.sleep(0.005)
    async with store.AsyncConsumer("L", group, root, start_from="last") as c:
        async def consume() -> None:
            async for m in c.messages():
                lat.append(time.perf_counter() - struct.unpack("<d", m.body)[0])
                if len(lat) >= samples:
                    return
        task = asyncio.get_running_loop().create_task(consume())
        await asyncio.sleep(0.5)   # joined, the queue held
        th = threading.Thread(target=produce)
        th.start()
        await asyncio.wait_for(task, 120)
        th.join()
    return sorted(x * 1000 for x in lat)


def latency(root: Path, samples: int, reps: int) -> None:
    p50, p99, mx, loads = [], [], [], []
    for rep in range(reps):
        loads.append(loadavg())
        ms = asyncio.run(latency_once(root, samples, f"lat{rep}"))
        q = statistics.quantiles(ms, n=100, method="inclusive")
        p50.append(q[49])
        p99.append(q[98])
        mx.append(ms[-1])
    print(f"latency store -> async for, {samples} messages one at a time (5 ms apart), {reps} reps "
          f"(load {'; '.join(loads)}): p50 {spread(p50, '.2f')} ms, p99 {spread(p99, '.2f')} ms, "
          f"max {spread(mx, '.1f')} ms (target <= 2 / <= 10 quiet)")


# -- idle: one process per side ------------------------------------------------------------------

def idle_child(kind: str, count: int, warm_s: float, window_s: float) -> dict[str, Any]:
    import store
    from store.client.runtime import IDLE_RENEW_S
    tmp = Path(tempfile.mkdtemp(prefix=f"mqctl-idle-{kind}-"))
    root = tmp / "s"
    with store.Admin(root) as admin:   # (creates the store)
        admin.create_topic("T", queues=8)
    threads0 = threading.active_count()

    def renewed() -> dict[tuple[str, str, int], int]:
        with store.Admin(root) as admin:
            return {(r.group, r.topic, r.queue_id): r.renewed_at or 0 for r in admin.locks()}

    async def measure(wait: Any) -> tuple[float, int, dict[Any, int], dict[Any, int]]:
        await wait(warm_s)
        threads1, before, c0 = threading.active_count(), renewed(), cpu_s()
        await wait(window_s)
        used = cpu_s() - c0
        return used, threads1, before, renewed()
    if kind == "async":
        async def main() -> tuple[Any, list[str]]:
            consumers = [store.AsyncConsumer("T", f"idle{i}", root, start_from="last") for i in range(count)]

            async def wait_in(c: store.AsyncConsumer) -> None:
                async for _m in c.messages():
                    pass
            tasks = [asyncio.get_running_loop().create_task(wait_in(c)) for c in consumers]
            out = await measure(asyncio.sleep)
            backends = [c._rt.wake.backend for c in consumers]   # (what each watcher got; bench only)
            for c in consumers:
                c.stop()
            await asyncio.gather(*tasks)
            for c in consumers:
                await c.close()
            return out, backends
        (used, threads1, before, after), backends = asyncio.run(main())
    else:
        consumers = [store.Consumer("T", f"idle{i}", root, start_from="last") for i in range(count)]

        def wait_in(c: store.Consumer) -> None:
            for _m in c.messages():
                pass
        for c in consumers:
            threading.Thread(target=wait_in, args=(c,), daemon=True).start()

        async def sleep(s: float) -> None:
            time.sleep(s)
        used, threads1, before, after = asyncio.run(measure(sleep))
        backends = [c._rt.wake.backend for c in consumers]
        for c in consumers:
            c.close()
    shutil.rmtree(tmp, ignore_errors=True)
    renewals = [round((after.get(k, 0) - v) / (IDLE_RENEW_S * 1000)) for k, v in before.items()]
    return {"cpu_s": used, "threads": threads1 - threads0, "window_s": window_s,
            "renewals": statistics.median(renewals) if renewals else 0,
            "inotify": backends.count("inotify"), "poll": backends.count("poll")}


def idle(count: int, reps: int, warm_s: float, window_s: float, baseline: Path | None) -> None:
    res: dict[str, list[dict[str, Any]]] = {"async": [], "sync": []}
    if baseline is not None:
        res["async baseline"] = []
    loads = []
    for _rep in range(reps):
        loads.append(loadavg())
        procs = {}
        for kind in res:   # (all at once: the same load)
            env = dict(os.environ)
            if kind == "async baseline":
                assert baseline is not None
                env["PYTHONPATH"] = str(baseline)
            procs[kind] = subprocess.Popen([sys.executable, __file__, "--idle-child", json.dumps(
                {"kind": kind.split()[0], "count": count, "warm_s": warm_s, "window_s": window_s})],
                stdout=subprocess.PIPE, text=True, env=env, cwd="/tmp")
        for kind, p in procs.items():
            out, _ = p.communicate(timeout=window_s + warm_s + 600)
            if p.returncode != 0:
                raise SystemExit(f"idle {kind} child failed")
            res[kind].append(json.loads(out.strip().splitlines()[-1]))
    print(f"idle: {count} consumers of {count} groups in one process, CPU of the process over "
          f"{window_s:.0f} s from {warm_s:.0f} s after they started, {reps} reps (load {'; '.join(loads)}):")
    for kind, rs in res.items():
        name = {"async": "async for (AsyncConsumer)", "sync": "sync iterator",
                "async baseline": f"async for, {baseline}"}[kind]
        print(f"  {name:26s} CPU {spread([r['cpu_s'] for r in rs], '.3f')} s; threads started "
              f"{spread([float(r['threads']) for r in rs], '.0f')}; lease renewals per member in the window "
              f"{spread([float(r['renewals']) for r in rs], '.0f')}; watchers: {rs[-1]['inotify']} inotify, "
              f"{rs[-1]['poll']} polling")
    print("  (target for async: < 0.1 s, no thread per consumer)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--samples", type=int, default=500)
    ap.add_argument("--idle-consumers", type=int, default=100)
    ap.add_argument("--idle-warm-s", type=float, default=30.0)
    ap.add_argument("--idle-s", type=float, default=60.0)
    ap.add_argument("--skip", default="", help="comma list of parts to skip: throughput,redis,latency,idle")
    ap.add_argument("--hogs", type=int, default=0, help="CPU hogs (yes > /dev/null) beside every part")
    ap.add_argument("--baseline", type=Path, help="a checkout (e.g. of main) whose AsyncConsumer idles beside")
    ap.add_argument("--peer-worker", help=argparse.SUPPRESS)
    ap.add_argument("--idle-child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.peer_worker:
        print(json.dumps(asyncio.run(redis_peer(json.loads(args.peer_worker)))))
        return
    if args.idle_child:
        job = json.loads(args.idle_child)
        print(json.dumps(idle_child(job["kind"], job["count"], job["warm_s"], job["window_s"])))
        return
    import store
    skip = set(args.skip.split(","))
    print(f"bench_aio: {os.cpu_count()} CPUs, {args.hogs} hogs, load at start {loadavg()}")
    tmp = Path(tempfile.mkdtemp(prefix="mqctl-aio-"))
    peer: RedisPeer | None = None
    try:
        with cpu_hogs(args.hogs):
            if "throughput" not in skip and "redis" not in skip:
                try:
                    peer = RedisPeer(tmp, args.n)
                except (SystemExit, OSError, subprocess.SubprocessError) as exc:
                    print(f"redis.asyncio XREADGROUP: skipped ({exc})")
            root = tmp / "s"
            with store.Admin(root) as admin:   # (creates the store)
                admin.create_topic("T", queues=8)
                admin.create_topic("L", queues=1)
            if "throughput" not in skip:
                throughput(root, args.n, args.reps, peer)
            if peer is not None:
                peer.stop()
                peer = None
            if "latency" not in skip:
                latency(root, args.samples, args.reps)
            if "idle" not in skip:
                idle(args.idle_consumers, args.reps, args.idle_warm_s, args.idle_s, args.baseline)
        print(f"load at end {loadavg()}")
    finally:
        if peer is not None:
            peer.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
