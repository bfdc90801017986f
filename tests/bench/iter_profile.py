#!/usr/bin/env python3
"""Where ``Consumer.messages()`` spends its CPU, against its floor. Not a test::

    .venv/bin/python tests/bench/iter_profile.py --sizes 4096,65536 --reps 7
    .venv/bin/python tests/bench/iter_profile.py --base /work/main      # the same, of main too

One store per size (``--mb`` of bodies, 8 queues, written with ``Producer.send_many``). Each
repetition runs, each in a fresh process (``store`` imported before the clock, as
bench_consume.py does): the iterator of this checkout (and of ``--base``), with a new group,
``exit_at_end``, each body's length read; and ``api_floor.py`` (one thread, the same checked
reads, a Message each). Printed, medians over the repetitions, per message unless said:

* ``cpu``: the process's CPU from the Consumer's creation to the end of its ``with`` block;
  ``member`` the member thread's share (its loop), ``main`` the iterating thread's;
* ``create`` / ``first`` / ``close``: CPU (ms, whole process) to create the Consumer, from
  then to the first message, and of leaving the ``with`` block: fixed costs, paid per Consumer;
* ``checks``: the member's time in the C check loop (``nativecheck.check_run``: the records'
  reads outside a shared window, their CRCs, the columns); ``reads``: in the store's pulls all
  told (the shared windows' ``pread`` included); ``handover``: handing batches out and
  collecting their outcomes (``Dispatcher.dispatch_all`` + ``collect``).
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent

WORKER = r"""
import json, sys, threading, time, uuid
import store
store.Consumer
from store.client import dispatch, runtime
from store.log import columns, messagestore
spent = {}

def timed(owner, name, label, member_only=True):
    f = getattr(owner, name)
    def w(*a, **k):
        t = time.thread_time()
        try:
            return f(*a, **k)
        finally:
            if not member_only or threading.current_thread().name.startswith("mq-"):
                spent[label] = spent.get(label, 0.0) + time.thread_time() - t
    setattr(owner, name, w)

timed(columns, "_native", "checks")
timed(messagestore.Store, "pull_records", "reads")
timed(messagestore.Store, "pull_many", "reads")
timed(dispatch.Dispatcher, "dispatch_all", "handover")
timed(dispatch.Dispatcher, "collect", "handover")
timed(runtime.ConsumerRuntime, "_loop", "member", member_only=False)
P = time.process_time
main0, c0 = time.thread_time(), P()
n = nbytes = 0
with store.Consumer("T", group="g" + uuid.uuid4().hex, path=sys.argv[1], start_from="first") as c:
    c1 = P()
    for m in c.messages(exit_at_end=True):
        if not n:
            c2 = P()
        n += 1
        nbytes += len(m.body)
    c3 = P()
c4 = P()
out = {k: v / n * 1e6 for k, v in spent.items()}
out.update(cpu=(c4 - c0) / n * 1e6, main=(time.thread_time() - main0) / n * 1e6, n=n,
           create=(c1 - c0) * 1e3, first=(c2 - c1) * 1e3, close=(c4 - c3) * 1e3)
print(json.dumps(out))
"""

COLUMNS = ("cpu", "member", "main", "checks", "reads", "handover", "create", "first", "close")


def make_store(root: Path, size: int, mb: float) -> int:
    """A store of ``mb`` MB of ``size``-byte bodies on a topic of 8 queues; the message count."""
    import store
    n = max(100, int(mb * 1e6 / size))
    with store.Admin(root) as admin:
        admin.create_topic("T", queues=8)
    with store.Producer(root) as p:
        for i in range(0, n, 500):
            p.send_many("T", [(b"%010d" % k).ljust(size, b"x") for k in range(i, min(n, i + 500))])
    return n


def run(py: Path, args: list[str], cwd: Path) -> dict:
    p = subprocess.run([str(py), *args], capture_output=True, text=True, cwd=cwd, timeout=600)
    if p.returncode != 0:
        raise SystemExit(f"{args[:2]} failed: {p.stderr[-2000:]}")
    return dict(json.loads(p.stdout))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="4096,65536")
    ap.add_argument("--mb", type=float, default=100.0)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--base", type=Path, help="another checkout with its own .venv (e.g. /work/main)")
    a = ap.parse_args()
    sides = {"this": REPO} | ({"base": a.base.resolve()} if a.base else {})
    with tempfile.TemporaryDirectory(prefix="mqctl-iter-profile-") as tmp:
        for size in (int(s) for s in a.sizes.split(",")):
            root = Path(tmp) / f"s{size}"
            n = make_store(root, size, a.mb)
            rows: dict[str, list[dict]] = {}
            for _rep in range(a.reps):   # interleaved: every side sees the same load
                for side, repo in sides.items():
                    rows.setdefault(side, []).append(run(repo / ".venv" / "bin" / "python",
                                                         ["-c", WORKER, str(root)], repo))
                floor = run(REPO / ".venv" / "bin" / "python", [str(HERE / "api_floor.py"), str(root)], REPO)
                rows.setdefault("floor", []).append({"cpu": floor["cpu_seconds"] / floor["count"] * 1e6})
            uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
            print(f"\n{size} B bodies, {n} messages, {a.reps} repetitions; at the end: {uptime}")
            print(f"{'':6s}" + "".join(f"{c:>10s}" for c in COLUMNS) + "   (us a message; create/first/close ms)")
            for side, runs in rows.items():
                cells = [statistics.median(r[c] for r in runs) if c in runs[0] else None for c in COLUMNS]
                print(f"{side:6s}" + "".join(f"{'':>10s}" if v is None else f"{v:10.2f}" for v in cells))


if __name__ == "__main__":
    main()
