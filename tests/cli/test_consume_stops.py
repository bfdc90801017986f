"""How a long-running ``mqctl consume`` goes on and stops: a ``--no-group`` read of a backlog
reads it back to back (``--idle-timeout`` counts only time with nothing new), a stop signal
ends a write blocked on a reader that does not read, and a stop that waits for handlers says
so at once. Real ``mqctl`` processes on a real store."""
from __future__ import annotations

import json
import os
import signal

import pytest

from tests.procs import MQ, handler_script, pid_running, wait_for


def backlog(mq: MQ, n: int, size: int = 8) -> None:
    mq.ok("topic", "create", "T", "--queues", "1")
    st = mq.store()
    try:
        st.put_bodies("T", [b"%08d" % i + b"x" * max(0, size - 8) for i in range(n)])
    finally:
        st.close()


# -- --no-group: a backlog of several pull batches ----------------------------------------------

@pytest.mark.parametrize("fmt", [[], ["--json"]])
def test_no_group_reads_a_backlog_of_many_batches_whole(mq: MQ, fmt: list[str]) -> None:
    """Each pull batch after the first waited for a commit that a read without a group never
    makes, until the persist interval's look (~5 s a batch): an ``--idle-timeout`` shorter than
    that, given with ``-e``, ended the read after its first batch."""
    backlog(mq, 3000)
    res = mq.ok("consume", "T", "--no-group", "-o", "beginning", "-e", "--idle-timeout", "3", *fmt, timeout=120)
    lines = res.stdout.splitlines()
    got = [json.loads(x)["body"] for x in lines] if fmt else [x.decode() for x in lines]
    assert got == ["%08d" % i for i in range(3000)]


@pytest.mark.parametrize("fmt", [[], ["--json"]])
def test_idle_timeout_counts_only_time_with_nothing_new(mq: MQ, fmt: list[str]) -> None:
    """A backlog waiting is not idle: every message is read before ``--idle-timeout`` ends the
    run (it ended after the first pull batch, 256 of 600, exit 0, when the next pull stood
    still for longer than the timeout)."""
    backlog(mq, 2500)
    res = mq.ok("consume", "T", "--no-group", "-o", "beginning", "--idle-timeout", "2", *fmt, timeout=120)
    assert len(res.stdout.splitlines()) == 2500
    res = mq.ok("consume", "T", "--no-group", "-o", "-300", "--idle-timeout", "2", *fmt, timeout=120)
    assert len(res.stdout.splitlines()) == 300
