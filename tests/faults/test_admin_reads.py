"""Admin reads over damaged files: ``progress`` and ``topic status`` take a message's store time
only from a record that checks out; an error reading a consume-queue segment names the file;
a broadcast client's offsets beyond reading fail ``offsets show`` and ``progress`` as the
clustering table's do (exit 5), not "no committed offsets"."""
from __future__ import annotations

import os

import pytest

from store.layout import Layout
from store.log import format as F
from tests.procs import MQ, one_error


def _three_sent_two_consumed(mq: MQ) -> list[int]:
    """Topic t (one queue) with 3 messages, group g past the first 2; their commit-log offsets."""
    mq.ok("topic", "create", "t", "--queues", "1")
    mq.ok("send", "t", input="1\n2\n3\n")
    mq.ok("consume", "t", "-g", "g", "--from", "first", "-c", "2")
    envs = mq.ok("consume", "t", "--no-group", "--from", "first", "-e", "--json").json_lines()
    return [e["commitLogOffset"] for e in envs]


def _damage_time(mq: MQ, phys: int, raw: bytes) -> None:
    """Write ``raw`` over the store timestamp of the record at ``phys`` (its CRC then fails)."""
    with open(Layout(mq.root).commitlog_dir / F.segment_name(0), "r+b") as fh:
        fh.seek(phys + F.OFF_STORE_TIMESTAMP)
        fh.write(raw)


def _one_warning(stderr: str, phys: int) -> None:
    warned = [ln for ln in stderr.splitlines() if ln.startswith("mqctl: warning: ")]
    assert len(warned) == 1, stderr
    assert f"{F.segment_name(0)} at offset {phys}: damaged message" in warned[0], warned


# a byte that made the time overflow (exit 1, "internal error"), and zeros that made it 1970
@pytest.mark.parametrize("raw", [b"\x7f", bytes(8)], ids=["overflow", "zeros"])
def test_progress_takes_no_time_from_a_damaged_record(mq: MQ, raw: bytes) -> None:
    phys = _three_sent_two_consumed(mq)
    _damage_time(mq, phys[1], raw)   # the last message g consumed
    res = mq.run("progress", "-g", "g", "--json")
    assert res.returncode == 0, str(res)
    (row,) = res.json_lines()
    assert row["lastTimestamp"] is None and row["lastTime"] is None and row["lag"] == 1, row
    _one_warning(res.stderr, phys[1])
    res = mq.run("progress", "-g", "g", "--utc")
    assert res.returncode == 0 and "1970" not in res.out, str(res)
    head, line = res.out.splitlines()[:2]
    assert line.split()[head.split().index("LAST-CONSUMED")] == "-", res.out
    _one_warning(res.stderr, phys[1])


@pytest.mark.parametrize("raw", [b"\x7f", bytes(8)], ids=["overflow", "zeros"])
def test_topic_status_takes_no_time_from_a_damaged_record(mq: MQ, raw: bytes) -> None:
    phys = _three_sent_two_consumed(mq)
    _damage_time(mq, phys[2], raw)   # the queue's last message
    res = mq.run("topic", "status", "t", "--json")
    assert res.returncode == 0, str(res)
    (row,) = res.json_lines()
    assert row["lastStoreTimestamp"] is None and row["lastStoreTime"] is None and row["messages"] == 3, row
    _one_warning(res.stderr, phys[2])
    res = mq.run("topic", "status", "t", "--utc")
    assert res.returncode == 0 and "1970" not in res.out, str(res)
    assert res.out.splitlines()[1].split()[-1] == "-", res.out
    ok = mq.ok("progress", "-g", "g", "--json")   # (its record intact: its time is served)
    assert ok.json_lines()[0]["lastTimestamp"] > 0 and "warning" not in ok.stderr, str(ok)


def test_a_queue_segment_that_is_a_directory_is_named(mq: MQ) -> None:
    _three_sent_two_consumed(mq)
    seg = Layout(mq.root).queue_dir("t", 0) / F.segment_name(0)
    seg.unlink()
    os.mkdir(seg)
    for args in (["progress", "-g", "g"], ["store", "check"], ["consume", "t", "-g", "g", "-c", "1"]):
        line = one_error(mq.run(*args, timeout=60), 1, allow_warnings=True)
        assert str(seg) in line and "Is a directory" in line, line


def test_broadcast_offsets_beyond_reading_fail_as_clustering_ones_do(mq: MQ) -> None:
    mq.ok("topic", "create", "t", "--queues", "1")
    mq.ok("send", "t", input="1\n2\n3\n")
    mq.ok("consume", "t", "-g", "gb", "--broadcast", "--client-id", "bc1", "--from", "first", "-c", "2")
    path = Layout(mq.root).broadcast_offsets("bc1", "gb")
    for p in (path, path.with_name(path.name + ".bak")):
        p.write_bytes(b"garbage")
    for args in (["offsets", "show", "-g", "gb"], ["offsets", "show", "-g", "gb", "--json"],
                 ["progress", "-g", "gb"], ["progress", "-g", "gb", "--json"]):
        res = mq.run(*args)
        line = one_error(res, 5, allow_warnings=True)
        assert str(path) in line and res.stdout == b"", str(res)
    one_error(mq.run("consume", "t", "-g", "gb", "--broadcast", "--client-id", "bc1", "-c", "1"), 5,
              allow_warnings=True)


def test_a_log_segment_that_is_a_directory_is_named(mq: MQ) -> None:
    """As a queue segment's: a read of a commit-log segment (its records' end, a record) said
    "cannot complete the operation: Is a directory", naming no file."""
    _three_sent_two_consumed(mq)
    seg = Layout(mq.root).commitlog_dir / F.segment_name(0)
    seg.unlink()
    os.mkdir(seg)
    for args in (["progress", "-g", "g"], ["store", "check"], ["store", "recover"], ["topic", "status", "t"],
                 ["consume", "t", "-g", "g", "-c", "1"], ["send", "t", "x"]):
        line = one_error(mq.run(*args, timeout=60), 1, allow_warnings=True)
        assert f"cannot access {seg}: Is a directory" in line, (args, line)
