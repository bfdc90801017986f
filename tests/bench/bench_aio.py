#!/usr/bin/env python3
"""The asyncio consumer against the sync one, in one run. Not a test::

    .venv/bin/python tests/bench/bench_aio.py --n 200000 --reps 3 --idle-s 60

* throughput: ``store.AsyncConsumer.messages(exit_at_end=True)`` (``async for``, offsets
  committed) and ``AsyncConsumer.run`` with a no-op ``async def`` handler, against
  ``store.Consumer.messages(exit_at_end=True)``, over the same backlog of 100-byte messages
  (a fresh group each); medians of ``--reps``, and the ratio async / sync;
* latency, store to handler: a thread sends one message every 5 ms (``Producer``, flush
  async) carrying its send time; an idle ``async for`` consumer notes when each arrives:
  p50 / p99 / max;
* idle: ``--idle-consumers`` async consumers of as many groups in one process, each waiting
  in ``async for``: threads started for them, CPU time of the process over ``--idle-s``
  seconds (from 8 s after they started), and which wait each one's watcher uses (inotify, or polling when the per-user
  inotify limit is reached).

redis.asyncio ``XREADGROUP`` is compared when the ``redis`` package and a ``redis-server`` on
``--redis-url`` are there (not installed here: skipped, and said so).
"""
from __future__ import annotations

import argparse
import asyncio
import resource
import shutil
import statistics
import struct
import tempfile
import threading
import time
from pathlib import Path

import store


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def sync_iter(root: Path, group: str) -> int:
    n = 0
    with store.Consumer("T", group, root, start_from="first") as c:
        for _m in c.messages(exit_at_end=True):
            n += 1
    return n


async def async_iter(root: Path, group: str) -> int:
    n = 0
    async with store.AsyncConsumer("T", group, root, start_from="first") as c:
        async for _m in c.messages(exit_at_end=True):
            n += 1
    return n


async def async_run(root: Path, group: str) -> int:
    n = 0

    async def handler(_m: store.Message) -> None:
        nonlocal n
        n += 1
    async with store.AsyncConsumer("T", group, root, start_from="first") as c:
        await c.run(handler, concurrency=4, exit_at_end=True)
    return n


def throughput(root: Path, n: int, reps: int) -> None:
    with store.Producer(root) as p:
        body = b"x" * 100
        for i in range(0, n, 1000):
            p.send_many("T", [body] * min(1000, n - i))
    t: dict[str, list[float]] = {"sync iterator": [], "async for": [], "async run": []}
    for rep in range(reps):
        for name, fn in (("sync iterator", lambda g: sync_iter(root, g)),
                         ("async for", lambda g: asyncio.run(async_iter(root, g))),
                         ("async run", lambda g: asyncio.run(async_run(root, g)))):
            t0 = time.perf_counter()
            got = fn(f"{name.replace(' ', '-')}-{rep}")
            t[name].append(time.perf_counter() - t0)
            assert got == n, (name, got, n)
    base = statistics.median(t["sync iterator"])
    print(f"throughput, {n} messages of 100 bytes, median of {reps}:")
    for name, ts in t.items():
        med = statistics.median(ts)
        print(f"  {name:14s} {n / med:>10,.0f} msg/s   x{base / med:.2f} of the sync iterator")


async def latency(root: Path, samples: int) -> None:
    lat: list[float] = []
    ready = asyncio.Event()

    def produce() -> None:
        with store.Producer(root) as p:
            for _ in range(samples):
                p.send("L", struct.pack("<d", time.perf_counter()), queue=0)
                time.sleep(0.005)
    async with store.AsyncConsumer("L", "lat", root, start_from="last") as c:
        async def consume() -> None:
            async for m in c.messages():
                lat.append(time.perf_counter() - struct.unpack("<d", m.body)[0])
                if len(lat) >= samples:
                    return
        task = asyncio.get_running_loop().create_task(consume())
        ready.set()
        await asyncio.sleep(0.5)   # joined, the queue held
        th = threading.Thread(target=produce)
        th.start()
        await asyncio.wait_for(task, 120)
        th.join()
    ms = sorted(x * 1000 for x in lat)
    q = statistics.quantiles(ms, n=100)
    print(f"latency store -> handler, {samples} messages one at a time (5 ms apart), "
          f"one async for consumer: p50 {q[49]:.2f} ms, p99 {q[98]:.2f} ms, max {ms[-1]:.2f} ms")


async def idle(root: Path, count: int, idle_s: float) -> None:
    threads0 = threading.active_count()
    consumers = [store.AsyncConsumer("T", f"idle{i}", root, start_from="last") for i in range(count)]

    async def wait_in(c: store.AsyncConsumer) -> None:
        async for _m in c.messages():
            pass
    tasks = [asyncio.get_running_loop().create_task(wait_in(c)) for c in consumers]
    # every one joined, rebalanced and past its first look at the offsets file (each reads
    # it once after joining, when it may have changed): from here on they only wait
    await asyncio.sleep(8)
    threads1 = threading.active_count()
    backends = [c._rt.wake.backend for c in consumers]   # (what the watcher got; bench only)
    c0, w0 = cpu_s(), time.perf_counter()
    await asyncio.sleep(idle_s)
    c1, w1 = cpu_s(), time.perf_counter()
    for c in consumers:
        c.stop()
    await asyncio.gather(*tasks)
    for c in consumers:
        await c.close()
    print(f"idle: {count} async consumers of {count} groups, one process: threads {threads0} -> "
          f"{threads1} ({threads1 - threads0} started); CPU {c1 - c0:.3f} s over {w1 - w0:.0f} s; "
          f"watchers: {backends.count('inotify')} inotify, {backends.count('poll')} polling")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--samples", type=int, default=500)
    ap.add_argument("--idle-consumers", type=int, default=100)
    ap.add_argument("--idle-s", type=float, default=60.0)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="mqctl-aio-"))
    try:
        root = tmp / "s"
        store.Producer(root).close()   # (creates the store)
        with store.Admin(root) as admin:
            admin.create_topic("T", queues=8)
            admin.create_topic("L", queues=1)
        throughput(root, args.n, args.reps)
        asyncio.run(latency(root, args.samples))
        asyncio.run(idle(root, args.idle_consumers, args.idle_s))
        try:
            import redis.asyncio  # noqa: F401
        except ImportError:
            print("redis.asyncio XREADGROUP: skipped (no redis package / server here)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
