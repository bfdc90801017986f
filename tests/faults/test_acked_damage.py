"""Damage to records that were acknowledged loses those records only (real ``mqctl`` processes,
bytes flipped or cut in the commit log). Recovery cuts a batch without its end record whole
only when the end is missing past what the checkpoint says was acknowledged (its synced end;
on the same boot its written end too): that is a torn write of a batch no sender was told of.

Before, ``store recover`` took a damaged last record of a finished ``send`` (or a log cut by
one byte) for a torn tail and cut the whole batch it ended: 1000 intact messages gone, and
a summary saying "recovered 999 records up to offset 0". And after a non-last segment was
cut or removed, ``store check`` kept reporting the consume-queue entries pointing into it as
new damage (exit 1, "run mqctl store recover") however often recover ran."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from store.log import checkpoint as ckpt
from tests.procs import MQ, mqctl_env


def _init(mq: MQ, *args: str) -> None:
    """The store made anew with these settings (the fixture's has its own)."""
    shutil.rmtree(mq.root)
    mq.ok("init", "--max-message-size", "64KiB", *args)


def _segments(mq: MQ) -> list[Path]:
    return sorted((mq.root / "commitlog").iterdir())


def _log_end(mq: MQ) -> int:
    last = _segments(mq)[-1]
    return int(last.name) + last.stat().st_size


def _consumed(mq: MQ, group: str) -> list[str]:
    return mq.ok("consume", "t", "-g", group, "--from", "first", "-e").out.split()


def _check_settled(mq: MQ) -> dict:
    """``store check`` exits 0, every problem it lists known (reported by a recover)."""
    res = mq.run("store", "check", "--json")
    assert res.returncode == 0, str(res)
    *problems, summary = res.json_lines()
    assert summary["problems"] == 0 and all(p["known"] for p in problems), (summary, problems)
    return summary


@pytest.mark.parametrize("flush", ["sync", "async"])
@pytest.mark.parametrize("segment", ["1GiB", "128KiB"])   # one segment; one batch across 7
def test_a_damaged_last_record_of_a_finished_send_loses_that_record_only(mq: MQ, flush: str, segment: str) -> None:
    _init(mq, "--segment-size", segment)
    n = 3000
    mq.ok("send", "t", "--flush", flush, input="".join(f"msg-{i:05d}\n" for i in range(1, n + 1)))
    assert len(_segments(mq)) == (1 if segment == "1GiB" else 4)
    end = _log_end(mq)
    seg = _segments(mq)[-1]
    data = bytearray(seg.read_bytes())
    data[data.rindex(b"msg-%05d" % n) + 5] ^= 1
    seg.write_bytes(bytes(data))
    want = [f"msg-{i:05d}" for i in range(1, n)]
    assert sorted(_consumed(mq, "before")) == want

    rec = mq.ok("store", "recover", "--json")
    report = json.loads(rec.stdout)
    assert report["end"] == end and report["records"] == n - 1 and report["truncatedBytes"] == 0, report
    assert [d["reason"] for d in report["damage"]] == ["record CRC mismatch"], report
    assert "power cut" not in rec.stderr and "gone" not in rec.stderr, rec.stderr
    assert _log_end(mq) == end
    assert sorted(_consumed(mq, "after")) == want
    _check_settled(mq)
    # the log goes on after the damaged record, left in place and never served
    mq.ok("send", "t", "next")
    assert sorted(_consumed(mq, "later")) == sorted(want + ["next"])
    assert _consumed(mq, "before") == ["next"]   # (no offset given to another message)
    text = mq.ok("store", "recover").stderr
    assert f"recovered {n} records up to offset {_log_end(mq)}:" in text, text
    _check_settled(mq)


def test_a_synced_send_cut_by_one_byte_loses_the_cut_record_only(mq: MQ) -> None:
    _init(mq, "--segment-size", "128KiB")
    n = 3000
    mq.ok("send", "t", "--flush", "sync", input="".join(f"msg-{i:05d}\n" for i in range(1, n + 1)))
    last = _segments(mq)[-1]
    end = _log_end(mq)
    size = last.stat().st_size
    data = last.read_bytes()
    body_at = data.rindex(b"msg-%05d" % n)
    last.write_bytes(data[:size - 1])
    rec = mq.ok("store", "recover", "--json")
    report = json.loads(rec.stdout)
    assert report["records"] == n - 1 and int(last.name) < report["end"] < end, report
    assert report["end"] <= int(last.name) + body_at and len(_segments(mq)) > 1, report
    assert "power cut" not in rec.stderr, rec.stderr
    assert sorted(_consumed(mq, "g")) == [f"msg-{i:05d}" for i in range(1, n)]
    _check_settled(mq)


@pytest.mark.parametrize("how", ["cut", "removed"])
@pytest.mark.slow
def test_check_settles_after_recover_of_a_damaged_segment_that_is_not_the_last(mq: MQ, how: str) -> None:
    _init(mq, "--segment-size", "128KiB")
    for b in range(1, 7):
        mq.ok("send", "d", input="".join(f"b{b}-{i:05d}-" + "x" * 100 + "\n" for i in range(500)))
    seg = mq.root / "commitlog" / "00000000000000262144"
    assert seg in _segments(mq)[:-1]
    if how == "cut":
        with open(seg, "r+b") as f:
            f.truncate(70000)
    else:
        seg.unlink()
    kept = mq.ok("consume", "d", "-g", "before", "--from", "first", "-e").out.split()
    assert 2000 < len(kept) < 3000
    assert mq.run("store", "check").returncode == 1
    for _ in range(2):
        mq.ok("store", "recover")
        summary = _check_settled(mq)
        assert summary["knownProblems"] > 0
    after = mq.ok("consume", "d", "-g", "after", "--from", "first", "-e").out.split()
    assert sorted(after) == sorted(kept)   # no message the log still has is lost


_BATCH_SENDER = """
import sys
import store
with store.Producer(flush="async") as p:
    p.send_many("t", [(b"b-%03d-" % i).ljust(65000, b"x") for i in range(40)], queue=0)
"""


@pytest.mark.parametrize("how", ["recover", "reboot"])
def test_an_unfinished_batch_after_an_acknowledged_one_with_a_damaged_end_cuts_only_itself(
        mq: MQ, how: str) -> None:
    # The acknowledged batch's damaged end record leaves it looking open, and the killed
    # batch after it (no end record of its own) continued it: recovery cut both from the first
    # one's start, its 499 intact messages and the group's offsets with them.
    _init(mq)
    mq.ok("topic", "create", "t", "--queues", "1")
    mq.ok("send", "t", "--flush", "sync", input="".join(f"a-{i:03d}\n" for i in range(500)))
    seg = _segments(mq)[-1]
    data = bytearray(seg.read_bytes())
    data[data.rindex(b"a-499") + 3] ^= 1
    seg.write_bytes(bytes(data))
    if how == "recover":
        mq.ok("store", "recover")
    mq.ok("consume", "t", "-g", "G", "--from", "first", "-e")
    child = subprocess.run([sys.executable, "-c", _BATCH_SENDER], env=mqctl_env(mq.root, "log-between-pieces:1"),
                           capture_output=True, text=True, timeout=120)
    assert child.returncode == -9 and "failpoint log-between-pieces" in child.stderr, child.stderr
    if how == "reboot":   # (the next open is on another boot: only the synced end is acknowledged)
        cp_path = mq.root / "checkpoint"
        cp = ckpt.read(cp_path)
        assert cp is not None
        cp.boot_id = b"\x01" * 16
        cp_path.write_bytes(cp.pack())
    rec = mq.run("store", "recover")
    assert "power cut" not in rec.stderr and "gone" not in rec.stderr, rec.stderr
    assert _consumed(mq, "all") == [f"a-{i:03d}" for i in range(499)]
    assert _consumed(mq, "G") == []   # (its offsets kept: nothing handed out again)
    _check_settled(mq)
