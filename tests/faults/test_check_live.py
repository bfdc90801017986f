"""``mqctl store check`` beside live writers: it never reports damage that is not there, and
still reports what is (real ``mqctl`` processes on a real store).

Before, the check measured the log's end first and read the key index and the consume queues
later: a producer writing meanwhile made most checks fail with ``header says records up to
offset N are indexed, past the end of the commit log`` and ``entry K points at commit-log
offset N, where no valid record ... starts`` on a healthy store (exit 1).

No timing is asserted: the checks are repeated until enough of them ran while batches were
being written (a batch acknowledged between a check's start and its end)."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Callable

import pytest

from store.layout import Layout
from store.log import format as F
from tests.procs import MQ, Feeder, Result

OVERLAPPED = 8     # checks that must have run while batches were written
MOST_CHECKS = 40   # a bound on the loop (a check that ends before a batch is written is not counted)
MOST_BATCHES = 100  # written during one check


class _Writer:
    """Batches of keyed messages fed to one ``mqctl send --json``, one at a time."""

    def __init__(self, feeder: Feeder) -> None:
        self.feeder = feeder
        self.sent = 0

    def batch(self) -> None:
        lines = [f"live-{self.sent + i:06d}" for i in range(40)]
        assert self.feeder.batch(lines, timeout=120), self.feeder.stderr
        self.sent += len(lines)

    def close(self) -> None:
        assert self.feeder.close() == 0, self.feeder.stderr


def _summary(res: Result) -> tuple[int, list[tuple[str, int, str]], str]:
    *lines, summary = res.json_lines()
    return res.returncode, sorted((p["file"], p["offset"], p["reason"]) for p in lines), summary["status"]


def _checks_beside_writes(mq: MQ, writer: _Writer, between: Callable[[], object] | None = None,
                          ) -> list[tuple[int, list[tuple[str, int, str]], str]]:
    """``store check`` again and again, batches written while it runs (and ``between`` them,
    every fourth), until ``OVERLAPPED`` checks had batches written while they ran; the
    results of those."""
    seen = []
    for _ in range(MOST_CHECKS):
        check = mq.start("store", "check", "--json")
        batches = 0
        while check.alive() and batches < MOST_BATCHES:
            writer.batch()
            batches += 1
            if between is not None and batches % 4 == 0:
                between()
            try:   # the check runs a little between batches: the store stays small
                check.p.wait(timeout=0.02)
            except subprocess.TimeoutExpired:
                pass
        rc = check.wait()
        if batches:
            seen.append(_summary(Result(["store", "check"], rc, check.stdout(), check.stderr())))
            if len(seen) == OVERLAPPED:
                return seen
    raise AssertionError(f"only {len(seen)} of {MOST_CHECKS} checks ran while batches were written")


@pytest.mark.slow
def test_check_beside_a_live_writer_reports_nothing(mq: MQ) -> None:
    mq.ok("topic", "create", "sc", "--queues", "4")
    mq.send_lines("sc", (f"first-{i}" for i in range(400)), "--keys", "early")
    writer = _Writer(mq.feed("sc", "--keys", "live"))
    for got in _checks_beside_writes(mq, writer):
        assert got == (0, [], "OK"), got
    writer.close()
    mq.check_clean()


@pytest.mark.slow
def test_check_beside_a_live_writer_and_retention_reports_nothing(tmp_path: Path) -> None:
    """Segments (and the queue and index files pointing into them) removed by ``store clean``
    while the check runs: what went is gone, not damaged."""
    mq = MQ(tmp_path / "small", tmp_path)
    try:
        mq.ok("init", "--max-message-size", "4096", "--segment-size", "69632")
        mq.ok("topic", "create", "sc", "--queues", "4")
        writer = _Writer(mq.feed("sc", "--keys", "live"))
        for got in _checks_beside_writes(mq, writer, lambda: mq.ok("store", "clean", "--older-than", "0",
                                                                   "--force")):
            assert got == (0, [], "OK"), got
        writer.close()
        assert not (mq.root / "commitlog" / F.segment_name(0)).exists(), "retention removed nothing"
        mq.check_clean()
    finally:
        mq.cleanup()


def _damage_below_the_end(mq: MQ) -> None:
    """A flipped body byte in an early record, and a consume-queue entry moved into the middle
    of the record it names (garbage below the log's end)."""
    seg = sorted((mq.root / "commitlog").iterdir())[0]
    data = bytearray(seg.read_bytes())
    data[data.index(b"first-0007")] ^= 0x01
    seg.write_bytes(bytes(data))
    cq = Layout(mq.root).queue_dir("sc", 1) / F.segment_name(0)
    raw = bytearray(cq.read_bytes())
    at = 5 * F.CQ_ENTRY_SIZE
    phys, size, tags = F.CQ_ENTRY.unpack_from(raw, at)
    F.CQ_ENTRY.pack_into(raw, at, phys + 40, size, tags)
    cq.write_bytes(bytes(raw))


@pytest.mark.slow
def test_check_beside_a_live_writer_still_reports_real_damage(mq: MQ) -> None:
    mq.ok("topic", "create", "sc", "--queues", "4")
    mq.send_lines("sc", (f"first-{i:04d}" for i in range(400)), "--keys", "early")
    _damage_below_the_end(mq)
    quiet = _summary(mq.check())
    assert quiet[0] == 1 and quiet[2] == "DAMAGED", quiet
    files = [f for f, _, _ in quiet[1]]
    assert any("/commitlog/" in f for f in files) and any("/consumequeue/sc/1/" in f for f in files), quiet
    writer = _Writer(mq.feed("sc", "--keys", "live"))
    for got in _checks_beside_writes(mq, writer):
        assert got == quiet, got   # the same problems, and only those
    writer.close()


def test_a_torn_tail_is_still_reported(mq: MQ) -> None:
    """A writer killed inside its append leaves the log's last record cut short: that is damage
    (the next writable open cuts it), not a record being written, once writers are held off."""
    mq.ok("topic", "create", "sc", "--queues", "2")
    mq.send_lines("sc", (f"m-{i}" for i in range(50)))
    seg = sorted((mq.root / "commitlog").iterdir())[-1]
    os.truncate(seg, seg.stat().st_size - 7)
    rc, problems, status = _summary(mq.check())
    assert rc == 1 and status == "DAMAGED", problems
    assert any(f == str(seg) for f, _, _ in problems), problems


def test_an_index_header_past_a_short_log_is_still_reported(mq: MQ) -> None:
    mq.ok("topic", "create", "sc", "--queues", "2")
    mq.send_lines("sc", (f"m-{i}" for i in range(50)), "--keys", "k")
    idx = sorted(Layout(mq.root).index_dir.iterdir())[-1]
    log_end = sum(p.stat().st_size for p in (mq.root / "commitlog").iterdir())
    raw = bytearray(idx.read_bytes())
    hdr = list(F.INDEX_HEADER.unpack_from(raw, 0))
    hdr[3] = log_end + 1000
    F.INDEX_HEADER.pack_into(raw, 0, *hdr)
    idx.write_bytes(bytes(raw))
    rc, problems, _ = _summary(mq.check())
    assert rc == 1 and any(f == str(idx) and "past the end of the commit log" in why for f, _, why in problems), \
        problems
