#!/usr/bin/env python3
"""What the members of a consumer group cost each other and what idle consumers
cost, this checkout against a baseline checkout in the same run. Not a test::

    .venv/bin/python tests/bench/bench_members.py --baseline ../members-base [--hog]

* throughput: ``--members`` counts of ``mqctl consume`` processes of one group on a topic of
  ``--queues`` queues, ``--count`` 100-byte messages stored at once after the group settled,
  read from the members' stdout (as ``mqctl bench consume``): msgs/s (median and spread of
  ``--reps``), the ratio to one member, and the CPU the members spent per message (all of
  them together, from ``/proc``: the gain on more cores is the ratio of these);
* settle: 16 members started together: seconds from the launch until every one has joined,
  and from the last join until every queue is held by exactly one member (all consuming);
  then, one of them stopped and the 15 left holding every queue, a new member joining: seconds
  from its join (its member record written, the moment it starts consuming) until the split
  gives it its queue;
* floor: what any program of this shape reaches on this machine, with none of mqctl's work (no
  group, no offsets, no wake-ups): ``--count`` messages stored first, then ``--queues``
  processes each reading one queue's consume-queue entries and its records from the store's
  files (mmap) and writing each body as a line to stdout, against one such process reading
  every queue; msgs/s from a go sent to all of them (after each has started and mapped the
  files) to the last line out, and their CPU per message. Records are framed (size, body
  length) but their CRCs not checked: a floor, not a reader;
* idle: ``--idle-consumers`` consumers of as many groups in one process, sync
  (``store.Consumer.messages()`` in a thread each) and asyncio (``async for``), waiting:
  CPU of the process over ``--idle-s`` seconds (from 5 s after they started; the process's
  own CPU with no consumer is not subtracted).

Every measurement runs once for each checkout, interleaved (baseline first), in a child
process whose ``PYTHONPATH`` is that checkout. ``--hog`` runs ``yes > /dev/null`` on every
core throughout. The machine's load (``uptime``) is printed before and after.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import selectors
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[2]


def cpu_of(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def own_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


# -- the child: one measurement with the checkout on PYTHONPATH --------------------------------

def rate(members: int, queues: int, count: int) -> dict[str, Any]:
    from mqctl import benchrun as br
    with br.Scratch(None) as scratch:
        st = scratch.open()
        st.create_topic("B", queues)
        ms = br.Members(scratch.root, "B", "G", False)
        try:
            for _ in range(members):
                ms.start()
            ms.wait_split(queues, members)
            time.sleep(0.5)   # past the members' first commits and looks
            cpu0 = sum(cpu_of(p.pid) for p in ms.procs)
            st.put_bodies("B", [b"x" * 100] * count)
            stored = time.perf_counter()   # (one batch: no member sees any of it before)
            first, last = read_lines(ms.procs, count)
            time.sleep(0.3)   # their last commits
            cpu1 = sum(cpu_of(p.pid) for p in ms.procs)
        finally:
            ms.stop()
            st.close()
    return {"rate": count / max(last - first, 1e-9), "rate_stored": count / max(last - stored, 1e-9),
            "cpu_us_per_msg": (cpu1 - cpu0) / count * 1e6}


def read_lines(procs: list[subprocess.Popen[bytes]], count: int) -> tuple[float, float]:
    """Read the members' stdout until ``count`` lines came out: when the first and the last
    came (``time.perf_counter``)."""
    from mqctl import benchrun as br
    sel = selectors.DefaultSelector()
    for p in procs:
        assert p.stdout is not None
        os.set_blocking(p.stdout.fileno(), False)
        sel.register(p.stdout.fileno(), selectors.EVENT_READ)
    lines, first, last = 0, 0.0, 0.0
    while lines < count:
        for _fd, data in br.ready_chunks(sel, 1.0):
            last = time.perf_counter()
            first = first or last
            lines += data.count(b"\n")
    sel.close()
    return first, last


def floor(procs: int, queues: int, count: int) -> dict[str, Any]:
    from mqctl import benchrun as br
    with br.Scratch(None) as scratch:
        st = scratch.open()
        st.create_topic("B", queues)
        st.put_bodies("B", [b"x" * 100] * count)
        st.close()
        share = [list(range(queues))[i::procs] for i in range(procs)]
        children = [subprocess.Popen([sys.executable, __file__, "--child", json.dumps(
            {"what": "floor-reader", "root": str(scratch.root), "queues": qs})],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE) for qs in share]
        for c in children:
            assert c.stdout is not None and c.stdout.read(1) == b"R"   # started, files mapped
        cpu0 = sum(cpu_of(c.pid) for c in children)
        sel = selectors.DefaultSelector()
        for c in children:
            assert c.stdout is not None
            os.set_blocking(c.stdout.fileno(), False)
            sel.register(c.stdout.fileno(), selectors.EVENT_READ)
        t0 = time.perf_counter()
        for c in children:
            assert c.stdin is not None
            c.stdin.write(b"g")
            c.stdin.close()
        lines, last = 0, t0
        while lines < count:
            for _fd, data in br.ready_chunks(sel, 1.0):
                last = time.perf_counter()
                lines += data.count(b"\n")
        cpu1 = sum(cpu_of(c.pid) for c in children)   # (they wait for the pipe's end meanwhile)
        for c in children:
            c.wait()
        sel.close()
    return {"rate": count / max(last - t0, 1e-9), "cpu_us_per_msg": (cpu1 - cpu0) / count * 1e6}


def floor_reader(root: Path, queues: list[int]) -> None:
    """One process of the floor: every record of ``queues`` of topic B, body per line."""
    import bisect
    import mmap
    import struct
    entry = struct.Struct(">qiq")
    blen_at = struct.Struct(">i").unpack_from
    logdir = root / "commitlog"
    bases = sorted(int(n) for n in os.listdir(logdir) if n.isdigit())
    maps = []
    for b in bases:
        with open(logdir / f"{b:020d}", "rb") as f:
            maps.append(mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ))
    out = os.fdopen(1, "wb", buffering=0)
    out.write(b"R")
    sys.stdin.buffer.read(1)
    for q in queues:
        qdir = root / "consumequeue" / "B" / str(q)
        data = b"".join((qdir / n).read_bytes() for n in sorted(os.listdir(qdir), key=int))
        lines: list[bytes] = []
        for phys, size, _tag in entry.iter_unpack(data):
            if size <= 0:
                break   # the file's preallocated end
            i = bisect.bisect_right(bases, phys) - 1
            rec = maps[i][phys - bases[i]:phys - bases[i] + size]
            n = blen_at(rec, 84)[0]   # BODYLENGTH (format.py: the body follows the 88-byte header)
            if len(rec) != size or n < 0 or 88 + n > size:
                raise SystemExit(f"bad record at {phys}")
            lines.append(rec[88:88 + n])
            if len(lines) == 256:
                out.write(b"\n".join(lines) + b"\n")
                lines = []
        if lines:
            out.write(b"\n".join(lines) + b"\n")


def settle(members: int, queues: int) -> dict[str, Any]:
    from mqctl import benchrun as br
    with br.Scratch(None) as scratch:
        st = scratch.open()
        st.create_topic("B", queues)
        st.close()
        ms = br.Members(scratch.root, "B", "G", False)
        d = scratch.root / "consumers" / "G"
        try:
            t0 = time.monotonic()
            for _ in range(members):
                ms.start()
            joined = None
            while True:
                if joined is None and len([n for n in _names(d) if n.endswith(".json")]) == members:
                    joined = time.monotonic()
                if joined is not None:
                    got = ms.split(queues)
                    if got is not None and len(got) == min(members, queues):
                        break
                time.sleep(0.002)
            settled = time.monotonic()
            # a joiner that gets queues: one member leaves first, and its queues are shared
            ms.procs[0].terminate()
            ms.procs[0].wait()
            ms.wait_split(queues, members - 1, poll=0.002)
            p = ms.start()
            while f"{os.uname().nodename}@{p.pid}.json" not in _names(d):
                time.sleep(0.001)
            j0 = time.monotonic()
            ms.wait_split(queues, members, poll=0.002)
            j1 = time.monotonic()
        finally:
            ms.stop()
    return {"join_all": joined - t0, "settle": settled - joined, "from_launch": settled - t0,
            "joiner": j1 - j0}


def _names(d: Path) -> list[str]:
    try:
        return os.listdir(d)
    except FileNotFoundError:
        return []


def idle(kind: str, count: int, idle_s: float) -> dict[str, Any]:
    import tempfile

    import store
    tmp = Path(tempfile.mkdtemp(prefix="mqctl-idle-"))
    root = tmp / "s"
    with store.Admin(root) as admin:
        admin.create_topic("T", queues=8)
    threads0 = threading.active_count()
    if kind == "async":
        used = asyncio.run(_idle_async(root, count, idle_s))
    else:
        used = _idle_sync(root, count, idle_s)
    import shutil
    shutil.rmtree(tmp, ignore_errors=True)
    return {"cpu_s": used[0], "threads": used[1] - threads0, "seconds": idle_s}


def _idle_sync(root: Path, count: int, idle_s: float) -> tuple[float, int]:
    import store
    consumers = [store.Consumer("T", f"idle{i}", root, start_from="last") for i in range(count)]

    def wait_in(c: Any) -> None:
        for _m in c.messages():
            pass
    threads = [threading.Thread(target=wait_in, args=(c,), daemon=True) for c in consumers]
    for t in threads:
        t.start()
    time.sleep(5)
    n = threading.active_count()
    c0 = own_cpu()
    time.sleep(idle_s)
    used = own_cpu() - c0
    for c in consumers:
        c.close()
    return used, n


async def _idle_async(root: Path, count: int, idle_s: float) -> tuple[float, int]:
    import store
    consumers = [store.AsyncConsumer("T", f"idle{i}", root, start_from="last") for i in range(count)]

    async def wait_in(c: Any) -> None:
        async for _m in c.messages():
            pass
    tasks = [asyncio.get_running_loop().create_task(wait_in(c)) for c in consumers]
    await asyncio.sleep(5)
    n = threading.active_count()
    c0 = own_cpu()
    await asyncio.sleep(idle_s)
    used = own_cpu() - c0
    for c in consumers:
        c.stop()
    await asyncio.gather(*tasks)
    for c in consumers:
        await c.close()
    return used, n


def child(args: argparse.Namespace) -> None:
    job = json.loads(args.child)
    if job["what"] == "rate":
        out = rate(job["members"], args.queues, args.count)
    elif job["what"] == "settle":
        out = settle(16, args.queues)
    elif job["what"] == "floor":
        out = floor(job["procs"], args.queues, args.count)
    elif job["what"] == "floor-reader":
        floor_reader(Path(job["root"]), job["queues"])
        return
    else:
        out = idle(job["kind"], args.idle_consumers, args.idle_s)
    print(json.dumps(out))


# -- the parent --------------------------------------------------------------------------------

def run_child(checkout: Path, job: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)   # as a user runs it: compiled modules cached
    cmd = [sys.executable, __file__, "--child", json.dumps(job), "--queues", str(args.queues),
           "--count", str(args.count), "--idle-consumers", str(args.idle_consumers),
           "--idle-s", str(args.idle_s)]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd="/tmp")
    if r.returncode != 0:
        raise RuntimeError(f"{checkout}: {job}: {r.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(r.stdout.strip().splitlines()[-1])
    return result


def spread(xs: list[float], fmt: str) -> str:
    med = statistics.median(xs)
    return f"{format(med, fmt)} ({format(min(xs), fmt)}-{format(max(xs), fmt)})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", type=Path, help="a checkout to compare with (e.g. of main)")
    ap.add_argument("--members", default="1,2,4,8,16")
    ap.add_argument("--queues", type=int, default=16)
    ap.add_argument("--count", type=int, default=200_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--idle-consumers", type=int, default=100)
    ap.add_argument("--idle-s", type=float, default=60.0)
    ap.add_argument("--skip", default="", help="comma list of parts to skip: rate,floor,settle,idle")
    ap.add_argument("--hog", action="store_true", help="yes > /dev/null on every core meanwhile")
    ap.add_argument("--hogs", type=int, default=0, help="this many yes > /dev/null meanwhile (--hog: one a core)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    checkouts = ([("baseline", args.baseline.resolve())] if args.baseline else []) + [("this", HERE)]
    skip = set(args.skip.split(","))
    nhogs = (os.cpu_count() or 1) if args.hog else args.hogs
    hogs = [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) for _ in range(nhogs)]
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    result: dict[str, Any] = {"started": started, "hogs": nhogs, "queues": args.queues, "count": args.count,
                              "reps": args.reps, "load_start": load()}
    print(f"load before: {result['load_start']}{f' (with {nhogs} CPU hogs)' if hogs else ''}", flush=True)
    try:
        result |= _measure(args, checkouts, skip)
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    result["load_end"] = load()
    print(f"load after: {result['load_end']}")
    out = HERE / "bench-results" / f"members-{started.replace(':', '')}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written to {out}")


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def summary(xs: list[float]) -> dict[str, Any]:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "runs": xs}


def _measure(args: argparse.Namespace, checkouts: list[tuple[str, Path]], skip: set[str]) -> dict[str, Any]:
    """Every part not skipped, printed; returns them (per checkout: rate per member count,
    settle), medians and spreads, for ``bench_all.py``."""
    counts = [int(x) for x in args.members.split(",")]
    out: dict[str, Any] = {}
    if "rate" not in skip:
        res: dict[tuple[str, int], list[dict[str, Any]]] = {}
        for rep in range(args.reps):
            for n in counts:
                for name, path in checkouts:
                    res.setdefault((name, n), []).append(run_child(path, {"what": "rate", "members": n}, args))
            print(f"  rate rep {rep + 1}/{args.reps} done", flush=True)
        print(f"\nthroughput, {args.count:,} x 100 B, {args.queues} queues, median (min-max) of {args.reps}; "
              f"msgs/s from the first line out to the last, and from the messages stored (one batch) to the "
              f"last line out (what a user waits: a member's start-up, numpy's import, counts there)")
        print(f"{'checkout':10} {'members':>7} {'msgs/s first-last':>28} {'x 1':>5} {'msgs/s stored-last':>28} "
              f"{'x 1':>5} {'CPU us/msg (all members)':>26}")
        for name, _path in checkouts:
            one = statistics.median(r["rate"] for r in res[(name, counts[0])])
            one_stored = statistics.median(r["rate_stored"] for r in res[(name, counts[0])])
            for n in counts:
                rows = res[(name, n)]
                rates, stored = [r["rate"] for r in rows], [r["rate_stored"] for r in rows]
                print(f"{name:10} {n:7} {spread(rates, ',.0f'):>28} {statistics.median(rates) / one:5.2f} "
                      f"{spread(stored, ',.0f'):>28} {statistics.median(stored) / one_stored:5.2f} "
                      f"{spread([r['cpu_us_per_msg'] for r in rows], '.2f'):>26}")
                out.setdefault("rate", {}).setdefault(name, {})[str(n)] = {
                    "rate": summary(rates), "rate_stored": summary(stored),
                    "cpu_us_per_msg": summary([r["cpu_us_per_msg"] for r in rows])}
    if "floor" not in skip:
        fres: dict[int, list[dict[str, Any]]] = {}
        for _rep in range(args.reps):
            for n in (1, args.queues):
                fres.setdefault(n, []).append(run_child(HERE, {"what": "floor", "procs": n}, args))
        print(f"\nfloor: processes reading their queues' records from the store's files, a line per message, "
              f"no offsets; {args.count:,} x 100 B, median (min-max) of {args.reps}:")
        print(f"{'processes':>9} {'msgs/s':>28} {'x 1':>5} {'CPU us/msg (all)':>26}")
        one = statistics.median(r["rate"] for r in fres[1])
        for n, rows in fres.items():
            rates = [r["rate"] for r in rows]
            print(f"{n:9} {spread(rates, ',.0f'):>28} {statistics.median(rates) / one:5.2f} "
                  f"{spread([r['cpu_us_per_msg'] for r in rows], '.2f'):>26}")
            out.setdefault("floor", {})[str(n)] = {"rate": summary(rates),
                                                   "cpu_us_per_msg": summary([r["cpu_us_per_msg"] for r in rows])}
    if "settle" not in skip:
        sres: dict[str, list[dict[str, Any]]] = {}
        for _rep in range(args.reps):
            for name, path in checkouts:
                sres.setdefault(name, []).append(run_child(path, {"what": "settle"}, args))
        print(f"\n16 members started together; then one leaves and a new one joins; seconds, "
              f"median (min-max) of {args.reps}:")
        print(f"{'checkout':10} {'all joined':>20} {'settled after':>20} {'from launch':>20} {'joiner':>20}")
        for name, _path in checkouts:
            rows = sres[name]
            print(f"{name:10} " + " ".join(f"{spread([r[k] for r in rows], '.2f'):>20}"
                                          for k in ("join_all", "settle", "from_launch", "joiner")))
            out.setdefault("settle", {})[name] = {k: summary([r[k] for r in rows])
                                                  for k in ("join_all", "settle", "from_launch", "joiner")}
    if "idle" not in skip:
        print(f"\n{args.idle_consumers} idle consumers of as many groups in one process, CPU over {args.idle_s:g} s:")
        for kind in ("sync", "async"):
            for name, path in checkouts:
                r = run_child(path, {"what": "idle", "kind": kind}, args)
                print(f"{name:10} {kind:6} CPU {r['cpu_s']:.3f} s, threads started {r['threads']}", flush=True)
                out.setdefault("idle", {}).setdefault(name, {})[kind] = r
    return out


if __name__ == "__main__":
    main()
