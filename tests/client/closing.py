"""What the tests of closing a consumer while it consumes share (``test_consumer_close``,
``test_aio_close``): a program run in a child process with a time limit (a close that hangs
would hang it: the limit makes that a failure, and faulthandler says where it was stuck), its
store of one queue holding m0..m4, and what a clean leave leaves behind."""
from __future__ import annotations

import json
import subprocess
from typing import Any

import store
from tests.procs import MQ, finish, python

# The start of a sync child's program: the store's path and the mode from its arguments, what
# its handler records, and its consumer of "Q" in group "G" (the tests' prologues go on from here).
SYNC_START = """
    import datetime, faulthandler, json, os, pathlib, signal, sys, threading
    import store
    faulthandler.dump_traceback_later(90, exit=True)   # (a hang: its stacks, then exit)
    path, orderly = sys.argv[1], sys.argv[2] == "orderly"
    started, handled = [], []

    def consumer():
        return store.Consumer("Q", "G", path, start_from="first", orderly=orderly)
"""


def child(prologue: str, path: str, mode: str, body: str) -> dict[str, Any]:
    """Run ``prologue + body`` (``sys.argv``: the store's path, the mode); what it printed as JSON."""
    proc = python(prologue + body, path, mode, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out: dict[str, Any] = json.loads(finish(proc, timeout=120)[0])
    return out


def one_queue_of_five(mq: MQ) -> str:
    """The store's path, with a one-queue topic "Q" of five messages m0..m4."""
    store.Admin(str(mq.root)).create_topic("Q", queues=1)
    mq.send_lines("Q", [f"m{i}" for i in range(5)])
    return str(mq.root)


def left_cleanly(mq: MQ, consumed: list[str]) -> None:
    """What was consumed is committed and nothing else; the member left, its locks released;
    the rest is delivered to the next member."""
    assert consumed == [f"m{i}" for i in range(len(consumed))]
    assert mq.offsets("G", "Q").get(("Q", 0), 0) == len(consumed)
    assert mq.members("G") == []
    assert mq.locks("G") == []
    assert [e["body"] for e in mq.drain("Q", "G")] == [f"m{i}" for i in range(len(consumed), 5)]
