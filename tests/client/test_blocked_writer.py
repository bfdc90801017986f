"""A member whose stdout is a pipe its reader stopped reading is blocked in a write: past the
member expiry the group shares its queue without it and its new owner delivers the backlog.
When the pipe moves again the blocked member finishes the batch in its write (its queue's lock
was valid when the write began), then delivers nothing more from the queue: it notices the
lock is gone, says so, and rejoins. Real ``mqctl consume`` processes, a pipe the test holds,
leases scaled down (``MQCTL_TEST_LEASE_SCALE``: member expiry 6 s, lock lease 3 s).

Before, an ``--orderly`` member wrote the queue's whole backlog a second time: the commit after
its blocked write set the group's offset back (orderly commits were not increase-only) from the
new owner's end to the end of its own batch, and when it rejoined (its client id sorts first,
so the queue was its own again) it started there."""
from __future__ import annotations

import fcntl
import json
import struct
import termios
import threading

import pytest

from tests.procs import MQ, wait_for

SCALED = {"MQCTL_TEST_LEASE_SCALE": "0.05"}
N = 3000
BATCH_MAX = 1024   # the most one write of an inline sink carries (a raw pull: 1000)


def _unread(fd: int) -> int:
    return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, struct.pack("i", 0)))[0]


@pytest.mark.parametrize("mode", [["--orderly"], ["--orderly", "--json"], []],
                         ids=["orderly", "orderly-json", "concurrent"])
@pytest.mark.slow
def test_a_member_blocked_on_its_stdout_delivers_nothing_more_of_the_queue_it_lost(
        mq: MQ, mode: list[str]) -> None:
    import os
    mq.ok("topic", "create", "T", "--queues", "1")
    pad = "x" * 1000
    mq.send_lines("T", [f"{i:05d} {pad}" for i in range(N)])
    r, w = os.pipe()
    fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, 65536)   # (what fills it, whatever the page size)
    try:
        a = mq.start("consume", "T", "-g", "G", "--from", "first", "--client-id", "A", *mode,
                     stdout=w, extra_env=SCALED)
    finally:
        os.close(w)
    got = bytearray()
    reader = threading.Thread(target=lambda: _read_all(r, got), daemon=True)
    try:
        # A wrote until the pipe was full, and is blocked in its first batch's write
        wait_for(lambda: _unread(r) >= 65536, what="A to fill the pipe")
        b = mq.start("consume", "T", "-g", "G", "--from", "first", "--client-id", "B", *mode, extra_env=SCALED)
        # A stops counting, B breaks its expired lock and delivers the queue, committing its end
        wait_for(lambda: len(b.lines()) == N and mq.offsets("G", "T") == {("T", 0): N}, timeout=90,
                 what="B to take the queue over and deliver it all")
        reader.start()   # the pipe moves again
        wait_for(lambda: "rejoining" in a.stderr(), timeout=60, what="A to notice and rejoin")
        # A's id sorts first: the queue is its own again (taken from its offset, then published)
        wait_for(lambda: mq.member_queues("G", "T").get("A") == {0}, timeout=60, what="A to hold the queue again")
        wait_for(lambda: mq.offsets("G", "T") == {("T", 0): N}, timeout=60, what="the queue's offset at its end")
        assert a.stop() == 0 and b.stop() == 0
        reader.join(30)
    finally:
        if not reader.is_alive():
            os.close(r)
    lines = bytes(got).splitlines()
    offsets = [int((json.loads(ln)["body"] if "--json" in mode else ln.decode())[:5]) for ln in lines]
    assert offsets == list(range(len(offsets))), "A wrote its messages in order, once"
    assert 0 < len(offsets) <= BATCH_MAX, (
        f"A wrote {len(offsets)} of {N} lines: more than the batch in its write\n{a.stderr()}")
    assert "lost the lock on queue T:0 of group G" in a.stderr(), a.stderr()
    assert mq.offsets("G", "T") == {("T", 0): N}
    assert len(b.lines()) == N


def _read_all(fd: int, into: bytearray) -> None:
    import os
    while chunk := os.read(fd, 1 << 16):
        into += chunk
