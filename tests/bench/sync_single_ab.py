#!/usr/bin/env python3
"""Single ``Producer(flush="sync").send`` calls of this checkout against another checkout,
SQLite WAL ``synchronous=FULL`` single-row commits and the C floor. Not a test::

    .venv/bin/python tests/bench/sync_single_ab.py --base /work/main --reps 5 --rounds 10 --hogs 2

Each repetition opens one writer per side, each a process kept open through the repetition
on its own fresh store (database): this checkout's and ``--base``'s sends of 100-byte bodies
(as ``bench_produce.py --rounds`` sends them), SQLite's ``BEGIN; INSERT; COMMIT`` of the same
bodies, and ``fsync_floor.c`` appending 254 bytes (a 100-byte send's record) then
``fdatasync``, or overwriting as many in a file written and synced first. Then ``--rounds``
rounds of ``--round-size`` writes each, one side after the other, the order reversed every
other round (this disk's fsync latency swings 10x within a minute; within a round much less),
so every ratio is taken round by round (both sides under the same disk) and its median
reported. Printed, medians (min-max) over every round of every repetition:

* ``msgs/s``; ``cpu``: µs of CPU a send (user + system, ``getrusage``), and its ``user`` and
  ``sys`` parts; ``vcsw``: voluntary context switches a send (the sleeps inside ``fdatasync``);
* the ratios of this checkout to the base, to SQLite and to the append floor, round by round.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))

from bench_produce import FloorSide, RoundSide  # noqa: E402
from floors import compile_floor  # noqa: E402
from hogs import cpu_hogs, loadavg  # noqa: E402

WORKER = r"""
import json, os, resource, sys, time
kind, path, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
def body_of(i):
    head = b"%010d" % i
    return head + b"x" * (size - len(head))
if kind == "api":
    from store import Producer
    producer = Producer(path, flush="sync")
    producer.send("T", b"first")   # (the store and its topic, untimed)
    send = producer.send
    def write(first, k):
        for i in range(first, first + k):
            send("T", body_of(i))
    close = producer.close
else:
    import sqlite3
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE q (id INTEGER PRIMARY KEY, body BLOB)")
    ex = db.execute
    def write(first, k):
        for i in range(first, first + k):
            ex("BEGIN")
            ex("INSERT INTO q (body) VALUES (?)", (body_of(i),))
            ex("COMMIT")
    close = db.close
print("ready", flush=True)
sent = 0
for line in sys.stdin:
    k = int(line)
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t = time.perf_counter()
    write(sent, k)
    dt = time.perf_counter() - t
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    sent += k
    print(json.dumps({"seconds": dt, "user": r1.ru_utime - r0.ru_utime, "sys": r1.ru_stime - r0.ru_stime,
                      "vcsw": r1.ru_nvcsw - r0.ru_nvcsw}), flush=True)
close()
"""


class Writer(RoundSide):
    """One side: a worker process of ``python`` (``api``: ``import store`` from its venv)."""

    def __init__(self, name: str, python: str, kind: str, path: Path, size: int, tree: str | None = None) -> None:
        env = dict(os.environ)
        env.pop("MQCTL_FAILPOINTS", None)
        if tree is not None:   # (a checkout without a venv: its ``store`` first on the path)
            env["PYTHONPATH"] = tree
        self.start(name, [python, "-c", WORKER, kind, str(path), str(size)], env, cwd="/")


def med(xs: list[float]) -> str:
    if not xs:
        return "-"
    m = statistics.median(xs)
    digits = 2 if m < 10 else 0
    return f"{m:,.{digits}f} ({min(xs):,.{digits}f}-{max(xs):,.{digits}f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", default=None,
                    help="another checkout with its .venv (e.g. /work/main), or without one (e.g. a `git archive "
                         "main` unpacked, its C module built or copied in): run by this venv's python with the "
                         "checkout first on PYTHONPATH")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=10, help="rounds a repetition")
    ap.add_argument("--round-size", type=int, default=100, help="sends (commits, floor writes) a round")
    ap.add_argument("--size", type=int, default=100, help="body size (the floor writes a record's 254 B)")
    ap.add_argument("--hogs", type=int, default=0, help="CPU hogs (yes > /dev/null) beside every side")
    ap.add_argument("--no-sqlite", action="store_true")
    ap.add_argument("--workdir", default=None, help="scratch directory (default: a temp dir under /tmp)")
    a = ap.parse_args()
    workdir = Path(a.workdir or tempfile.mkdtemp(prefix="sync-single-ab-"))
    workdir.mkdir(parents=True, exist_ok=True)
    floor = compile_floor("fsync_floor", workdir, print)
    sides: list[tuple[str, str, str | None]] = [("this", str(REPO / ".venv" / "bin" / "python"), None)]
    if a.base:
        venv = Path(a.base) / ".venv" / "bin" / "python"
        sides.append(("base", str(venv), None) if venv.exists() else
                     ("base", str(REPO / ".venv" / "bin" / "python"), str(Path(a.base).resolve())))
    record = a.size + 154   # (a send's record: 154 bytes of header, topic "T" and properties)
    rounds: dict[str, list[dict]] = {}
    print(f"load at start {loadavg()}; {a.reps} reps x {a.rounds} rounds x {a.round_size}; hogs {a.hogs}")
    with cpu_hogs(a.hogs):
        for rep in range(a.reps):
            opened: list[Writer | FloorSide] = []
            try:
                order = sides if rep % 2 == 0 else sides[::-1]
                for name, py, tree in order:
                    store = workdir / f"{name}-store"
                    shutil.rmtree(store, ignore_errors=True)
                    opened.append(Writer(name, py, "api", store, a.size, tree))
                if not a.no_sqlite:
                    for f in workdir.glob("sqlite.db*"):
                        f.unlink()
                    opened.append(Writer("sqlite", sys.executable, "sqlite", workdir / "sqlite.db", a.size))
                if floor is not None:
                    for mode in ("append", "overwrite"):
                        opened.append(FloorSide(f"floor_{mode}", floor, mode, record, workdir / "floor.dat"))
                os.sync()
                for r in range(a.rounds):
                    for s in (opened if r % 2 == 0 else opened[::-1]):
                        rounds.setdefault(s.name, []).append(s.round(a.round_size))
            finally:
                for s in opened:
                    s.close()
            print(f"  rep {rep + 1}: load {loadavg()}; " + "; ".join(
                f"{n} {statistics.median(a.round_size / r['seconds'] for r in rs[-a.rounds:]):,.0f}/s"
                for n, rs in rounds.items()), flush=True)
    n = a.round_size
    print(f"\nload at end {loadavg()}; medians (min-max) of {a.reps * a.rounds} rounds of {n}")
    print(f"{'side':16s} {'msgs/s':>24s} {'cpu us/send':>22s} {'user':>8s} {'sys':>8s} {'vcsw':>6s}")
    for name, rs in rounds.items():
        cpu = [(r["user"] + r["sys"]) / n * 1e6 for r in rs if "user" in r]
        print(f"{name:16s} {med([n / r['seconds'] for r in rs]):>24s} {med(cpu):>22s} "
              + (f"{statistics.median(r['user'] / n * 1e6 for r in rs):8.1f} "
                 f"{statistics.median(r['sys'] / n * 1e6 for r in rs):8.1f} "
                 f"{statistics.median(r['vcsw'] / n for r in rs):6.2f}" if cpu else ""))
    print("ratios, round by round (rate of the first over the second in the same round):")
    for x, y in [("this", "base"), ("this", "sqlite"), ("base", "sqlite"), ("this", "floor_append"),
                 ("base", "floor_append"), ("sqlite", "floor_append"), ("floor_overwrite", "floor_append")]:
        if x in rounds and y in rounds:
            print(f"  {x + '_vs_' + y:32s} "
                  f"{med([yr['seconds'] / xr['seconds'] for xr, yr in zip(rounds[x], rounds[y])])}")
    if not a.workdir:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
