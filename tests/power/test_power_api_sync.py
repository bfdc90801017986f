"""Power cuts under Python programs sending single ``Producer(flush="sync").send`` calls: each
call is fsynced under the write lock by the caller (no group commit, no ``mqctl send``), and
the writer moves the durable point of the consume queues and key index itself every 2 s in the
background. Every send that returned survives, and the store recovers by itself.
"""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.power.powerlib import Power, wait_for

pytestmark = [pytest.mark.power, pytest.mark.slow]

SMALL = ["--max-message-size", "4096", "--segment-size", "73728"]


def test_acknowledged_api_sync_sends_survive_cuts(power: Power) -> None:
    power.ok("init", *SMALL)
    power.ok("topic", "create", "api", "--queues", "4")
    g = power.group("readers", "api")
    for r in range(2):
        producers = [power.start_api_producer("api", f"r{r}p{i}", 5000) for i in range(2)]
        power.start_consumer(g)
        # past a periodic flush of derived files (due once the last one is 2 s old: the
        # store's creation or the previous round's), then cut while both keep sending
        for p in producers:
            wait_for(lambda p=p: p.proc.stdout().count(b"\n") >= 50, timeout=60,
                     what="an API producer to acknowledge 50 sends")
        power.fs.checkpoint(wait=False)
        time.sleep(2.5)
        power.power_cut()
        n = power.collect(producers)
        print(f"round {r}: {n} sends returned before the cut")
        assert n >= 100
        power.verify(["api"])
        power.send_after_cut_and_deliver(["api"], n=12)
        power.power_cut()
        power.verify(["api"])
        power.send_after_cut_and_deliver(["api"], n=12)


def test_sync_sends_over_zeros_written_ahead_and_an_async_writer_survive_cuts(power: Power) -> None:
    """Sync writers write zeros ahead of their records (default segments: up to the next MiB)
    and each send overwrites them; an async ``mqctl send`` appends over them too. Cut while all
    write: every sync-acknowledged send survives, the zeros that the cut left are no damage
    (``store check`` is clean), and the writers after the cut go on where the records end.
    (Before, the segment ended with its last record: the wait for zeros ahead fails.)"""
    power.ok("init")
    power.ok("topic", "create", "za", "--queues", "2")
    for r in range(2):
        producers = [power.start_api_producer("za", f"z{r}p{i}", 5000) for i in range(2)]
        for p in producers:
            wait_for(lambda p=p: p.proc.stdout().count(b"\n") >= 50, timeout=60,
                     what="an API producer to acknowledge 50 sends")
        seg = sorted((power.root / "commitlog").iterdir())[-1]

        def zeros_ahead(seg: Path = seg) -> bool:
            with open(seg, "rb") as fh:
                size = fh.seek(0, 2)
                return size > 0 and size % (1 << 20) == 0 and fh.seek(size - 1) >= 0 and fh.read(1) == b"\0"
        wait_for(zeros_ahead, timeout=30, what="zeros written ahead of the sync writers' records")
        producers.append(power.start_producer("za", f"z{r}a", 4000, sync=False, batch=4))
        power.fs.checkpoint(wait=False)
        time.sleep(2.5)
        power.power_cut()
        n = power.collect(producers)
        print(f"round {r}: {n} sends returned before the cut")
        power.verify(["za"])
        power.send_after_cut_and_deliver(["za"], n=12)
