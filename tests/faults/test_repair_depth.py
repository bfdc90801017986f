"""Repairs at the right depth, as a user meets them (real ``mqctl`` processes, real files).

* A damaged consume-queue entry never costs an intact message: the reader finds the record in
  the commit log and delivers it (in order, none missing, none skipped past).
* A commit log cut below its durable (synced) end is loss, not a torn tail: ``store check``
  says so (exit 1, segment and bytes), and ``store check`` never writes a byte.
* ``topic delete`` killed between its steps, and ``store recover`` killed after it set out to
  rebuild the key index, leave a store that the next run finishes: no orphan queue, no old
  messages under a re-created topic, no "no message with id" for a message that exists.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import stat
from pathlib import Path

import pytest

from store.layout import Layout
from tests.procs import MQ, one_error


def _flip(path: Path, byte: int, mask: int) -> None:
    data = bytearray(path.read_bytes())
    data[byte] ^= mask
    path.write_bytes(bytes(data))


def _one_queue_topic(mq: MQ, n: int) -> None:
    mq.ok("topic", "create", "t", "--queues", "1")
    mq.ok("send", "t", "--flush", "sync", input="".join(f"{i}\n" for i in range(1, n + 1)))


# (byte of the 6th entry, bit): its commit-log offset's low bit, a size bit, a high offset
# bit, the size's sign bit (an invalid entry), the offset's sign bit
ENTRY_DAMAGE = [(7, 0x01), (11, 0x01), (4, 0x10), (8, 0x80), (0, 0x80)]


@pytest.mark.parametrize("byte,mask", ENTRY_DAMAGE)
def test_damaged_queue_entry_is_read_from_the_log(mq: MQ, byte: int, mask: int) -> None:
    _one_queue_topic(mq, 10)
    assert mq.ok("consume", "t", "-g", "g", "--from", "first", "-c", "3").out.split() == ["1", "2", "3"]
    cq = Layout(mq.root).queue_dir("t", 0) / f"{0:020d}"
    _flip(cq, 5 * 20 + byte, mask)
    res = mq.ok("consume", "t", "-g", "g", "-e")
    assert res.out.split() == [str(i) for i in range(4, 11)], str(res)
    assert "skipping" not in res.stderr, str(res)
    # the group is at the end, and every message is there for a new group too
    assert mq.ok("consume", "t", "-g", "g", "-e").out == ""
    assert mq.ok("consume", "t", "-g", "other", "--from", "first", "-e").out.split() == [
        str(i) for i in range(1, 11)]
    # check names the bad entry, recover rebuilds it from the log
    assert mq.run("store", "check").returncode == 1
    mq.ok("store", "recover")
    mq.ok("store", "check")
