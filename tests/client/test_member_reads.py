"""What a group member pays to read its queues: numpy's import (60-85 ms of CPU, more than
the array check saves on a member's share of a big group's backlog) only for backlogs that
pay for it (store/log/columns.py)."""
from __future__ import annotations

from pathlib import Path

from store import Store
from tests.procs import MQ, wait_for


def _maps(pid: int) -> str:
    return Path(f"/proc/{pid}/maps").read_text()


def test_a_member_with_a_backlog_too_small_to_pay_for_numpy_reads_without_it(mq: MQ) -> None:
    """A member of 4 queues with 30,000 messages waiting (an eighth of a group's 240,000):
    the array check would save it ~5 ms and its import costs 60-85 ms, so it reads them all
    without ever loading numpy."""
    with Store.open(mq.root) as st:
        st.create_topic("T", 4)
        st.put_bodies("T", [b"%05d" % i for i in range(30_000)])
    p = mq.start("consume", "T", "-g", "G", "--from", "first")
    wait_for(lambda: len(p.lines()) == 30_000, 60.0, what="the 30,000 messages")
    assert "numpy" not in _maps(p.pid)
    assert sorted(p.lines()) == [b"%05d" % i for i in range(30_000)]
    assert p.stop() == 0
