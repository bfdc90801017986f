#!/usr/bin/env python3
"""``store check``'s per-entry path: a store whose damage keeps check off the vectorised
comparison of consume-queue runs, checked by this checkout and another, interleaved.

Not a test. Builds (once, in ``--workdir``) a store of N 100-byte messages over 8 queues
(``mqctl send T --flush async``) and damages it (``--damage``):

- ``records``: a byte in the middle of every ``--every``-th record of the log is flipped (its
  record CRC fails). Check names each, and each one's entry, which no valid record claims; a
  run of a queue's records with such a gap (a window of the log's pass holds a few thousand
  per queue) is compared with the queue entry by entry (``checkderived.QueueCursors.claim``),
  so with ``--every`` below a run's length the whole store goes through the per-entry path.
- ``tags``: the tag code of every ``--every``-th entry of every queue (the entry's TAGS field,
  bytes 12-19) is changed; check names each such entry.

Then runs ``mqctl store check`` of this checkout and of ``--base`` (run with ``PYTHONPATH`` at
it, same interpreter), alternating which goes first, ``--reps`` times each, and reports each
one's median wall and CPU time, its spread, and the load average before and after::

    .venv/bin/python tests/bench/bench_check_entries.py --base /path/to/other/checkout --reps 7
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from store.log import format as F

REPO = Path(__file__).resolve().parents[2]
MQCTL = [sys.executable, "-m", "mqctl"]
ENTRY = F.CQ_ENTRY_SIZE
TAGS_AT = 12        # a consume-queue entry's TAGS field (format.py's table)
MAGIC = F.MAGIC_V1.to_bytes(4, "big")   # a record's MAGICCODE, after its TOTALSIZE


def env_for(store: Path, code: Path) -> dict[str, str]:
    env = dict(os.environ, MQCTL_STORE=str(store), NO_COLOR="1", PYTHONPATH=str(code))
    env.pop("MQCTL_FAILPOINTS", None)
    return env


def build(store: Path, n: int, every: int, damage: str) -> int:
    """The store, its damage made; returns how many records or entries were damaged."""
    done = store / ".bench-built"
    if done.exists():
        return int(done.read_text())
    shutil.rmtree(store, ignore_errors=True)
    env = env_for(store, REPO)
    subprocess.run([*MQCTL, "topic", "create", "T", "--queues", "8"], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    p = subprocess.Popen([*MQCTL, "send", "T", "--flush", "async"], stdin=subprocess.PIPE,
                         stdout=subprocess.DEVNULL, env=env)
    assert p.stdin is not None
    pad = b"x" * 90
    p.stdin.write(b"".join(b"%010d" % i + pad + b"\n" for i in range(n)))
    p.stdin.close()
    if p.wait() != 0:
        raise SystemExit("building the store failed")
    changed = records(store, every) if damage == "records" else tags(store, every)
    done.write_text(str(changed))
    return changed


def records(store: Path, every: int) -> int:
    """Flip a byte in the middle of every ``every``-th record of the log."""
    changed = i = 0
    for seg in sorted((store / "commitlog").iterdir()):
        data = bytearray(seg.read_bytes())
        at = 0
        while at + 8 <= len(data):
            total = int.from_bytes(data[at:at + 4], "big")
            if total <= 0 or data[at + 4:at + 8] != MAGIC:   # (the end, or a segment's trailer)
                break
            if i % every == every // 2:
                data[at + total // 2] ^= 0x10
                changed += 1
            at, i = at + total, i + 1
        seg.write_bytes(bytes(data))
    return changed


def tags(store: Path, every: int) -> int:
    """Change the tag code of every ``every``-th entry of each queue."""
    changed = 0
    for qdir in sorted(d for d in (store / "consumequeue" / "T").iterdir() if d.name.isdigit()):
        for seg in sorted(qdir.iterdir()):   # (one segment per queue at these sizes)
            data = bytearray(seg.read_bytes())
            for k in range(every // 2, len(data) // ENTRY, every):
                data[k * ENTRY + TAGS_AT + 7] ^= 1
                changed += 1
            seg.write_bytes(bytes(data))
    return changed


def timed(store: Path, code: Path) -> tuple[float, float, int]:
    """One ``mqctl store check``: wall and CPU seconds, and the problems it printed."""
    t0, c0 = time.perf_counter(), os.times()
    p = subprocess.run([*MQCTL, "store", "check"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                       env=env_for(store, code), cwd=code, timeout=3600)
    c1 = os.times()
    wall = time.perf_counter() - t0
    if p.returncode != 1:
        raise SystemExit(f"store check of {code} exited {p.returncode}, expected 1 (damage found)")
    return wall, c1.children_user + c1.children_system - c0.children_user - c0.children_system, \
        p.stdout.count(b"\n")


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--damage", choices=("records", "tags"), default="records")
    ap.add_argument("--every", type=int, default=1000, help="damage every N-th record or entry")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--workdir", default="/tmp/mqctl-bench-check-entries")
    ap.add_argument("--base", type=Path, required=True, help="the other checkout")
    ap.add_argument("--keep", action="store_true", help="keep the store for the next run")
    args = ap.parse_args()
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    store = work / f"store-{args.messages}-{args.damage}-{args.every}"
    try:
        changed = build(store, args.messages, args.every, args.damage)
        log_mb = sum(f.stat().st_size for f in (store / "commitlog").iterdir()) / 1e6
        what = "records damaged (every {}th of the log)" if args.damage == "records" else \
            "entries' tag code changed (every {}th of each queue)"
        print(f"# {args.messages:,} messages, 8 queues, {log_mb:.0f} MB of log; {changed} "
              f"{what.format(args.every)}", flush=True)
        codes = {"this": REPO, "base": args.base.resolve()}
        runs: dict[str, list[tuple[float, float, int]]] = {k: [] for k in codes}
        load0 = loadavg()
        for rep in range(args.reps):
            order = list(codes.items()) if rep % 2 == 0 else list(codes.items())[::-1]
            for name, code in order:
                runs[name].append(timed(store, code))
            print(f"  rep {rep + 1}: " + ", ".join(f"{k} {v[-1][0]:.2f} s" for k, v in runs.items()), flush=True)
        print(f"  load before {load0}, after {loadavg()}")
        for name, rs in runs.items():
            wall, cpu = [r[0] for r in rs], [r[1] for r in rs]
            print(f"  {name}: wall median {statistics.median(wall):.2f} s ({min(wall):.2f}-{max(wall):.2f}), "
                  f"cpu median {statistics.median(cpu):.2f} s, {rs[0][2]} lines of output ({codes[name]})")
    finally:
        if not args.keep:
            shutil.rmtree(store, ignore_errors=True)


if __name__ == "__main__":
    main()
