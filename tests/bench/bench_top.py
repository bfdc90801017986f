"""``mqctl top``'s cost and delay: CPU per refresh of ``store.Monitor.snapshot`` on a
store of 100 topics x 8 queues and 20 groups, idle and with a producer writing; and the time
from a message being stored to a look showing it (max offset, lag and a non-zero rate).

    .venv/bin/python tests/bench/bench_top.py [--store DIR]
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import store


def build(root: Path, topics: int = 100, queues: int = 8, groups: int = 20) -> None:
    with store.Admin(root) as admin:
        for t in range(topics):
            admin.create_topic(f"t{t:03d}", queues=queues)
    with store.Producer(root) as p:
        for t in range(topics):
            for i in range(queues * 4):
                p.send(f"t{t:03d}", f"m{i}".encode())
    # each group has consumed part of five topics (committed offsets, as a stopped consumer leaves)
    for g in range(groups):
        for t in range(5):
            with store.Consumer(f"t{(g * 5 + t) % topics:03d}", group=f"g{g:02d}", path=root,
                                start_from="first") as c:
                for n, _msg in enumerate(c.messages(exit_at_end=True)):
                    if n >= 10:
                        break


def cpu_per_look(mon: store.Monitor, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.process_time()
        mon.snapshot()
        out.append((time.process_time() - t) * 1000)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--store")
    args = ap.parse_args()
    root = Path(args.store) if args.store else Path(tempfile.mkdtemp()) / "store"
    if not (root / "store.json").exists():
        build(root)
    with store.Monitor(root) as mon:
        snap = mon.snapshot()
        print(f"store: {len(snap.topics)} topics, {sum(t.queues for t in snap.topics)} queues, "
              f"{len(snap.groups)} groups; first look {snap.cost_ms:.1f} ms CPU")
        idle = cpu_per_look(mon, 50)
        print(f"idle store: {statistics.median(idle):.2f} ms CPU per look (median of 50), "
              f"{statistics.median(idle) / 10:.3f} % of a core at 1 Hz")
        import subprocess
        import sys
        writer = subprocess.Popen([sys.executable, "-c", (
            "import store,time,sys\n"
            "p=store.Producer(sys.argv[1])\n"
            "i=0\n"
            "while True:\n"
            "    p.send('t%03d' % (i % 100), b'x'); i+=1; time.sleep(0.001)\n"), str(root)])
        try:
            time.sleep(1)
            busy = []
            for _ in range(20):
                t = time.process_time()
                mon.snapshot()
                busy.append((time.process_time() - t) * 1000)
                time.sleep(0.2)
            print(f"busy store (a producer writing ~1000 msg/s to all topics): "
                  f"{statistics.median(busy):.2f} ms CPU per look (median of 20), "
                  f"{statistics.median(busy) / 10:.3f} % of a core at 1 Hz")
        finally:
            writer.kill()
            writer.wait()
        # delay: looks at 1 Hz as `mqctl top` does; a message stored at a random moment
        # between two looks; the first look that shows it (a new max offset, the group's lag
        # up by one, a rate above 0) ends the measure
        import random
        hist = store.History()
        start = time.monotonic()
        tick = 0

        def look() -> store.Snapshot:
            nonlocal tick
            tick += 1
            time.sleep(max(0.0, start + tick - time.monotonic()))
            snap = mon.snapshot()
            hist.add(snap)
            return snap

        delays = []
        for _ in range(5):
            for _ in range(6):   # rates back to 0 (the rate window is 5 s)
                before = look()
            time.sleep(random.random() * 0.9)
            with store.Producer(root) as p:
                p.send("t000", b"y", queue=0)
                stored_at = time.monotonic()
            while True:
                snap = look()
                t, g = snap.topic("t000"), snap.group("g00")
                bt, bg = before.topic("t000"), before.group("g00")
                assert t and g and bt and bg
                if (t.max_offsets[0] == bt.max_offsets[0] + 1 and g.lag == bg.lag + 1
                        and (hist.topic_rate("t000") or 0) > 0):
                    delays.append(time.monotonic() - stored_at)
                    break
        print(f"stored -> shown (new max offset, lag + 1, rate > 0) at 1 Hz: "
              f"max {max(delays):.2f} s, median {statistics.median(delays):.2f} s")


if __name__ == "__main__":
    main()
