#!/usr/bin/env python3
"""What one group member's offset commit costs as the group grows. Not a test::

    .venv/bin/python tests/bench/bench_commits.py [--members 1,4,8,16] [--rounds 25] [--reps 5]

In one process, ``--members`` offset stores of one group (as many members' processes would
hold), a queue each, commit in turns, ``--rounds`` times each: every commit is one journal
record and reads the records the other members appended since its own last one. Printed per
member count: CPU microseconds per commit (median and spread of ``--reps``) and how many
journal payloads a commit decoded. No snapshot is written by age meanwhile (the snapshot's
period is set past the run), so what is measured is the commit alone.

A tight loop in one process keeps the caches warm: a member among 16 on 2 cores pays several
times these figures per commit (``member_profile.py`` measures that); the ratio between the
counts is what this shows. Run it with ``PYTHONPATH`` set to another checkout to compare.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[2]


class _Counting:
    """The offsets journal's ``json``, counting the payloads decoded."""

    def __init__(self) -> None:
        self.loads_calls = 0

    def loads(self, text: Any) -> Any:
        self.loads_calls += 1
        return json.loads(text)

    def dumps(self, obj: Any, **kw: Any) -> str:
        return json.dumps(obj, **kw)


def run(members: int, rounds: int) -> tuple[float, float]:
    """CPU microseconds per commit and payloads decoded per commit, for one group."""
    import store
    from store.layout import Layout
    from store.log import offsetjournal, offsetview
    from store.log.offsets import ClusterOffsetStore
    offsetview.SNAPSHOT_S = 1e9   # (the commits alone: no snapshot because a second went by)
    tmp = Path(tempfile.mkdtemp(prefix="mqctl-commits-"))
    try:
        with store.Admin(tmp / "s") as admin:
            admin.create_topic("T", queues=members)
        layout = Layout(tmp / "s")
        stores = [ClusterOffsetStore(layout) for _ in range(members)]
        stores[0].commit("g", {("T", q): 0 for q in range(members)})
        for q, st in enumerate(stores):   # each member's view loaded
            st.commit("g", {("T", q): 1}, expected_epochs={}, journal_only=True)
        counting = _Counting()
        real = vars(offsetjournal)["json"]
        vars(offsetjournal)["json"] = counting
        try:
            t0 = time.process_time()
            for r in range(2, rounds + 2):
                for q, st in enumerate(stores):
                    st.commit("g", {("T", q): r * 1000}, expected_epochs={}, journal_only=True)
            used = time.process_time() - t0
        finally:
            vars(offsetjournal)["json"] = real
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    commits = rounds * members
    return used / commits * 1e6, counting.loads_calls / commits


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--members", default="1,4,8,16")
    ap.add_argument("--rounds", type=int, default=25)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    if str(HERE) not in sys.path and "PYTHONPATH" not in os.environ:
        sys.path.insert(0, str(HERE))
    import store
    print(f"store from {Path(store.__file__).parent.parent}; load {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'members':>7} {'CPU us/commit':>24} {'payloads decoded/commit':>24}")
    for n in (int(x) for x in args.members.split(",")):
        got = [run(n, args.rounds) for _ in range(args.reps)]
        us = [g[0] for g in got]
        print(f"{n:7} {statistics.median(us):10.1f} ({min(us):.1f}-{max(us):.1f}) {statistics.median(g[1] for g in got):24.1f}",
              flush=True)
    print(f"load after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
