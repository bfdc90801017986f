#!/usr/bin/env python3
"""Where a single ``Producer(flush="sync").send`` spends its time: its ``fdatasync`` against
the file system's own, and what the send does around it. Not a test::

    .venv/bin/python tests/bench/sync_send_split.py --sends 3000

One process, one fresh store (and floor files) on the same file system (``--workdir``, default
a temp dir under /tmp). It alternates, write by write, a send of a ``--size`` body and the
floors of ``fsync_floor.c`` done from Python: ``pwrite`` of a record's bytes (254 for 100 B)
then ``fdatasync``, as an overwrite of a file written and synced first, and as an append. The
order of the three rotates every write, so each triple shares the disk's moment (its fsync
latency swings 10x within a minute). ``os.fdatasync`` is timed wherever it is called: the
send's one on its commit-log segment (through the same module attribute the store calls).

Printed, in µs (p25 / p50 / p75 / p90 of every write): each side's whole write and its
``fdatasync``; for the send, the rest (the write minus its ``fdatasync``: the CPU of the send
and the waits beside it); then the medians of the ratios taken triple by triple. A send whose
``fdatasync`` is the overwrite floor's (ratio ~1) spends its extra time outside the disk.

What the ``fdatasync`` writes is the kernel's to say: as root, ``perf stat -e
block:block_bio_queue -e ext4:ext4_sync_file_enter`` around a run of sends counts the block
requests (data, flush, and on an ext4 without a journal the inode-table block whenever it is
dirty; ``perf record -g`` on the same event shows which call wrote each).
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
sys.path.insert(0, str(HERE))

from hogs import loadavg  # noqa: E402


def pct(xs: list[float], q: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(len(xs) * q))] * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sends", type=int, default=3000, help="writes of each side")
    ap.add_argument("--size", type=int, default=100, help="body size (the floors write a record's size)")
    ap.add_argument("--workdir", default=None, help="scratch directory (default: a temp dir under /tmp)")
    a = ap.parse_args()
    from store import Producer
    workdir = Path(a.workdir or tempfile.mkdtemp(prefix="sync-send-split-"))
    workdir.mkdir(parents=True, exist_ok=True)
    n, record = a.sends, a.size + 154   # (a send's record: 154 bytes of header, topic "T" and properties)
    real_fdatasync = os.fdatasync
    took = [0.0]

    def timed_fdatasync(fd: int) -> None:
        t = time.perf_counter()
        real_fdatasync(fd)
        took[0] = time.perf_counter() - t

    producer = Producer(str(workdir / "store"), flush="sync")
    producer.send("T", b"first")   # (the store and its topic, untimed)
    over = os.open(workdir / "overwrite.dat", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    app = os.open(workdir / "append.dat", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    os.pwrite(over, bytes(record * n), 0)
    os.fsync(over)
    os.fsync(app)
    body, rec = b"x" * a.size, b"y" * record
    sides = ("send", "overwrite", "append")
    whole: dict[str, list[float]] = {s: [] for s in sides}
    sync: dict[str, list[float]] = {s: [] for s in sides}
    print(f"load at start {loadavg()}; {n} writes a side, {a.size} B bodies, {record} B floor records")
    os.fdatasync = timed_fdatasync
    try:
        for i in range(n):
            for k in range(3):
                side = sides[(i + k) % 3]
                took[0] = 0.0
                t = time.perf_counter()
                if side == "send":
                    producer.send("T", body)
                else:
                    fd = over if side == "overwrite" else app
                    os.pwrite(fd, rec, i * record)
                    timed_fdatasync(fd)
                whole[side].append(time.perf_counter() - t)
                sync[side].append(took[0])
    finally:
        os.fdatasync = real_fdatasync
        producer.close()
        os.close(over)
        os.close(app)
    print(f"load at end {loadavg()}; µs: p25 / p50 / p75 / p90")
    rows = [(f"{s} write", whole[s]) for s in sides] + [(f"{s} fdatasync", sync[s]) for s in sides]
    rows.append(("send, the rest", [w - f for w, f in zip(whole["send"], sync["send"])]))
    for name, xs in rows:
        print(f"  {name:20s} " + " / ".join(f"{pct(xs, q):7.0f}" for q in (0.25, 0.5, 0.75, 0.9)))
    print("medians of the ratios, write by write:")
    for x, y, what in (("send", "overwrite", sync), ("send", "append", sync), ("overwrite", "append", sync),
                       ("send", "overwrite", whole), ("send", "append", whole)):
        kind = "fdatasync" if what is sync else "write"
        r = statistics.median(p / q for p, q in zip(what[x], what[y]) if q > 0)
        print(f"  {x} / {y} ({kind}): {r:.2f}")
    if not a.workdir:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
