"""What only the fault tests (tests/faults/) need; running ``mqctl`` (``MQ``, ``run_inprocess``,
``one_error``, failpoints through ``MQ.run(failpoints=…)``) is ``tests/procs.py``'s.

* :func:`is_dirty` — the checkpoint disagrees with the commit log: a writer died in a batch.
* :data:`LOGGING_HANDLER`, :func:`read_handler_log`, :func:`drop_torn_by_kills` — a handler
  that logs every delivery, and reading that log back after consumers were killed.
* :func:`keyed_lines`, :func:`assert_key_order` — keyed input, and the per-key order check.
* :func:`small_tmpfs`, :func:`fill_fs`, :func:`mount`, :func:`umount` — a small real file
  system to fill (a tmpfs: needs root where ``mount`` is allowed; the test is skipped, saying
  why, where it is not).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Iterable

import pytest


def is_dirty(root: Path) -> bool:
    """The checkpoint disagrees with the commit log: a writer died inside a batch."""
    from store.layout import Layout
    from store.log import checkpoint as ckpt
    from store.log.commitlog import CommitLog
    lay = Layout(root)
    cp = ckpt.read(lay.checkpoint)
    return cp is None or cp.written_end != CommitLog(lay.commitlog_dir).end()


# A handler for --exec: logs "consumerPid topic queueId queueOffset msgId body" (one O_APPEND
# write, so lines of concurrent handlers never interleave), then sleeps $HANDLER_SLEEP.
LOGGING_HANDLER = r"""
#!/bin/sh
body=$(cat)
printf '%s %s %s %s %s %s\n' "$PPID" "$MQ_TOPIC" "$MQ_QUEUE_ID" "$MQ_QUEUE_OFFSET" "$MQ_MSG_ID" "$body" >> "$HANDLER_LOG"
[ -n "$HANDLER_SLEEP" ] && sleep "$HANDLER_SLEEP"
exit 0
"""


def read_handler_log(path: Path, with_pid: bool = False) -> list[tuple]:
    """The handler log's lines as (topic, queueId, queueOffset, msgId, body), or with the
    consumer's pid first."""
    out: list[tuple] = []
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        parts = line.split(" ", 5)
        if len(parts) == 6 and parts[0].isdigit():
            row = (parts[1], int(parts[2]), int(parts[3]), parts[4], parts[5])
            out.append((int(parts[0]), *row) if with_pid else row)
    return out


def drop_torn_by_kills(rows: list[tuple], bodies: set[str], killed: set[int]) -> tuple[list[tuple], int]:
    """Handler-log rows (with pids) without the ones whose body is not a sent body; each of
    those must come from a consumer that was killed: a SIGKILLed consumer closes the pipe to a
    handler it just started before the kernel sends the handler its death signal, so the
    handler may run on with a truncated body (reported: mqctl/consumer/handlers.py). Returns
    the rows kept and how many were dropped; an unknown body from a live consumer fails."""
    kept, torn = [], 0
    for row in rows:
        if row[-1] in bodies:
            kept.append(row[1:])
        else:
            assert row[0] in killed, f"a handler of a consumer that was not killed got a body never sent: {row}"
            torn += 1
    return kept, torn


def keyed_lines(keys: list[str], start: dict[str, int], n: int) -> list[str]:
    """``n`` lines ``KEY:KEY-SEQ`` spread over ``keys``, each key's SEQ counting up from ``start``."""
    out = []
    for i in range(n):
        k = keys[i % len(keys)]
        start[k] = start.get(k, 0) + 1
        out.append(f"{k}:{k}-{start[k]}")
    return out


def assert_key_order(envs: Iterable[dict]) -> None:
    """Per queue in queue-offset order, each key's sequence numbers only go up."""
    by_queue: dict[tuple[str, int], list[dict]] = {}
    for e in envs:
        by_queue.setdefault((e["topic"], e["queueId"]), []).append(e)
    for q, rows in by_queue.items():
        last: dict[str, int] = {}
        for e in sorted(rows, key=lambda r: r["queueOffset"]):
            key, _, seq = e["body"].rpartition("-")
            assert int(seq) > last.get(key, 0), f"order of key {key} broken in queue {q}: {e}"
            last[key] = int(seq)


# -- small file systems ---------------------------------------------------------------------------

def mount(args: list[str]) -> str | None:
    """Run ``mount ARGS``; None on success, else why not."""
    if shutil.which("mount") is None:
        return "no mount(8) on this machine"
    cp = subprocess.run(["mount", *args], capture_output=True, text=True)
    if cp.returncode != 0:
        return f"`mount {' '.join(args)}` failed: {cp.stderr.strip() or cp.returncode}"
    return None


def umount(path: Path) -> None:
    for _ in range(20):
        if subprocess.run(["umount", str(path)], capture_output=True).returncode == 0:
            return
        time.sleep(0.2)
    subprocess.run(["umount", "-l", str(path)], capture_output=True)


def small_tmpfs(tmp_path: Path, size: str) -> Iterator[Path]:
    """(A fixture's body.) A tmpfs of ``size`` mounted at ``tmp_path/small``, unmounted after;
    the test is skipped when it cannot be mounted."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    why = mount(["-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(mnt)])
    if why is not None:
        pytest.skip(f"cannot make a small file system (tried a {size} tmpfs as uid {os.getuid()}): {why}")
    try:
        yield mnt
    finally:
        umount(mnt)


def fill_fs(fs: Path) -> None:
    """Fill the file system to its last byte with ``fs/filler`` (it may be full before the
    filler gets one)."""
    try:
        with open(fs / "filler", "wb") as fh:
            while True:
                fh.write(b"\0" * 65536)
                fh.flush()
    except OSError:
        pass
