"""``store.json`` against the files it describes (real ``mqctl`` processes, real files).

A flipped bit in its commit-log segment size made readers look for records at the wrong
offsets: ``consume`` skipped intact messages as damaged and committed past them, a ``send``
began a segment at a wrong name, and ``store recover`` recorded the intact messages as known
damage. Now ``store.json`` carries a ``crc`` (a damaged copy is passed over for its ``.bak``,
as every checksummed file is), and every open checks the segment size against the segments'
names (bases are multiples of it, no segment outgrows it) — also for a ``store.json`` of an
earlier version, which has no ``crc`` and still opens: a copy that disagrees is passed over
for one that agrees, and when none does every command refuses (exit 5, naming ``store.json``
and what disagrees) until ``store recover`` corrects it from the names, dropping nothing.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.procs import MQ, one_error

N = 600
SEG = 131072


def _store(tmp_path: Path) -> MQ:
    mq = MQ(tmp_path / "store", tmp_path)
    mq.ok("init", "--segment-size", "128KiB", "--max-message-size", "4KiB")
    mq.ok("send", "c", input=("y" * 500 + "\n") * N)
    assert len(list((mq.root / "commitlog").iterdir())) == 3
    return mq


def _flip(path: Path) -> None:
    """One bit: commitlogSegmentSize 131072 -> 131073 ('2' is 0x32, '3' is 0x33)."""
    raw = path.read_bytes()
    at = raw.index(b'"commitlogSegmentSize": 131072') + len(b'"commitlogSegmentSize": 13107')
    path.write_bytes(raw[:at] + bytes([raw[at] ^ 1]) + raw[at + 1:])


def _without_crc(path: Path) -> None:
    """As a store of an earlier version wrote it."""
    obj = json.loads(path.read_bytes())
    obj.pop("crc", None)
    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")


def _consumed(mq: MQ) -> int:
    res = mq.ok("consume", "c", "-g", "grp", "-o", "first", "-e")
    assert "damaged" not in res.stderr, res
    return len(res.stdout.split())


def test_store_json_has_a_crc_and_one_without_it_still_opens(tmp_path: Path) -> None:
    mq = _store(tmp_path)
    for name in ("store.json", "store.json.bak"):
        assert "crc" in json.loads((mq.root / name).read_bytes())
        _without_crc(mq.root / name)
    res = mq.ok("topic", "list")
    assert res.stderr == "", res
    mq.check_clean()
    assert _consumed(mq) == N


@pytest.mark.parametrize("flipped", ["store.json", "store.json.bak"])
def test_one_flipped_copy_is_passed_over_for_the_other(tmp_path: Path, flipped: str) -> None:
    mq = _store(tmp_path)
    _flip(mq.root / flipped)
    res = mq.run("store", "check")
    assert res.returncode == 1 and f"{mq.root / flipped}:0: unreadable: crc mismatch" in res.out, res
    assert _consumed(mq) == N
    res = mq.ok("store", "recover")
    assert " 0 dropped" in res.stderr, res
    assert not (mq.root / "config" / "knownDamage.json").exists()
    for name in ("store.json", "store.json.bak"):
        assert json.loads((mq.root / name).read_bytes())["commitlogSegmentSize"] == SEG
    mq.check_clean()


def test_an_old_store_json_that_disagrees_with_the_segments_gives_way_to_its_bak(tmp_path: Path) -> None:
    mq = _store(tmp_path)
    for name in ("store.json", "store.json.bak"):
        _without_crc(mq.root / name)
    _flip(mq.root / "store.json")
    res = mq.ok("consume", "c", "-g", "grp", "-o", "first", "-e")
    assert len(res.stdout.split()) == N, res
    assert res.stderr.count("mqctl: warning:") == 1 and "131073" in res.stderr \
        and "using store.json.bak, which agrees with the segments" in res.stderr, res
    mq.ok("store", "recover")
    assert json.loads((mq.root / "store.json").read_bytes())["commitlogSegmentSize"] == SEG
    mq.check_clean()


def test_a_segment_size_no_copy_agrees_with_is_refused_until_recover_corrects_it(tmp_path: Path) -> None:
    mq = _store(tmp_path)
    for name in ("store.json", "store.json.bak"):
        _without_crc(mq.root / name)
        _flip(mq.root / name)
    segments = sorted(p.name for p in (mq.root / "commitlog").iterdir())
    for args in (("consume", "c", "-g", "grp", "-o", "first", "-e"), ("send", "c", "x"), ("store", "check"),
                 ("topic", "list")):
        msg = one_error(mq.run(*args), 5)
        assert str(mq.root / "store.json") in msg and "commitlogSegmentSize is 131073" in msg \
            and "the segments' names say 131072" in msg and "mqctl store recover" in msg, msg
    assert sorted(p.name for p in (mq.root / "commitlog").iterdir()) == segments   # (no segment at a wrong name)
    res = mq.run("progress", "-g", "grp")
    assert res.returncode != 0, res   # (nothing was committed past anything)
    res = mq.ok("store", "recover")
    assert "corrected to commitlogSegmentSize 131072 (from the segments' names)" in res.stderr, res
    assert " 0 dropped" in res.stderr and "could not recover" not in res.stderr, res
    assert not (mq.root / "config" / "knownDamage.json").exists()
    for name in ("store.json", "store.json.bak"):
        after = json.loads((mq.root / name).read_bytes())
        assert after["commitlogSegmentSize"] == SEG and after["maxMessageSize"] == 4096, after
    mq.check_clean()
    assert _consumed(mq) == N


def test_a_segment_size_the_last_segment_outgrows_is_refused(tmp_path: Path) -> None:
    """A size below the true one that still divides every base (one segment, at 0)."""
    mq = MQ(tmp_path / "store", tmp_path)
    mq.ok("init", "--segment-size", "128KiB", "--max-message-size", "4KiB")
    mq.ok("send", "c", input=("y" * 500 + "\n") * 100)
    for name in ("store.json", "store.json.bak"):
        p = mq.root / name
        obj = json.loads(p.read_bytes())
        obj.pop("crc", None)
        obj["commitlogSegmentSize"] = 4096 * 8   # (the log's one segment holds ~52 KiB)
        p.write_text(json.dumps(obj))
    msg = one_error(mq.run("send", "c", "x"), 5)
    assert "commitlogSegmentSize is 32768" in msg and "holds" in msg, msg


@pytest.mark.parametrize("which", [0, 1])
def test_bytes_past_a_segments_size_in_a_log_whose_names_agree_are_no_settings_fault(tmp_path: Path, which: int) -> None:
    """Garbage appended to a sealed segment, past its size, in a log whose segments are named
    one size apart: every command refused it (exit 5) as store.json's fault, and store recover
    refused too ("put back a copy of store.json"), so nothing got the store back. The names
    say the size: the bytes past it are no record's, and the store reads on."""
    mq = _store(tmp_path)
    seg = sorted((mq.root / "commitlog").iterdir())[which]
    with open(seg, "ab") as fh:
        fh.write(b"\xa5" * (SEG - seg.stat().st_size + 300))
    assert _consumed(mq) == N
    mq.ok("store", "check")
    mq.ok("send", "c", "after")
    mq.ok("store", "recover")
    assert _consumed(mq) == 1


def test_a_consume_queue_segment_size_the_queues_disagree_with_is_refused_until_recover_corrects_it(
        tmp_path: Path) -> None:
    """cqSegmentEntries 20 -> 21 (one bit) in a store of an earlier version: the queue's
    segments (of 20 entries: at bytes 0, 400, 800, ...) are not at multiples of 21 entries."""
    from store.log.messagestore import Store
    from store.log.settings import StoreSettings
    mq = MQ(tmp_path / "store", tmp_path)
    Store.open(mq.root, create=True, settings=StoreSettings(cq_segment_entries=20)).close()
    mq.ok("topic", "create", "c", "--queues", "1")
    mq.ok("send", "c", input="".join(f"{i}\n" for i in range(100)))
    assert len(list((mq.root / "consumequeue" / "c" / "0").iterdir())) == 5
    for name in ("store.json", "store.json.bak"):
        p = mq.root / name
        obj = json.loads(p.read_bytes())
        obj.pop("crc", None)
        obj["cqSegmentEntries"] = 21
        p.write_text(json.dumps(obj))
    for args in (("consume", "c", "-g", "grp", "-o", "first", "-e"), ("send", "c", "x")):
        msg = one_error(mq.run(*args), 5)
        assert str(mq.root / "store.json") in msg and "cqSegmentEntries is 21" in msg \
            and "the segments' names say 20" in msg and "mqctl store recover" in msg, msg
    res = mq.ok("store", "recover")
    assert "corrected to cqSegmentEntries 20 (from the segments' names)" in res.stderr, res
    assert " 0 dropped" in res.stderr and "could not recover" not in res.stderr, res
    assert json.loads((mq.root / "store.json").read_bytes())["cqSegmentEntries"] == 20
    mq.check_clean()
    got = mq.ok("consume", "c", "-g", "grp", "-o", "first", "-e").stdout.split()
    assert got == [str(i).encode() for i in range(100)], got


@pytest.mark.parametrize("crc", [True, False])
def test_the_offset_commit_reader_takes_the_segment_size_the_store_opens_with(tmp_path: Path, crc: bool) -> None:
    """The reader of stages' offset-commit records (``offsetcommits``) opens the commit log
    itself: with store.json flipped it read the default 64 MiB segments (a wrong crc) or the
    flipped size (no crc), and records past the first segment read as missing, while the
    store, reading the .bak, used the real size."""
    from store.layout import Layout
    from store.log import offsetcommits
    mq = _store(tmp_path)
    if not crc:
        for p in (mq.root / "store.json", mq.root / "store.json.bak"):
            _without_crc(p)
    _flip(mq.root / "store.json")
    assert offsetcommits._commitlog(Layout(mq.root)).segment_size == SEG
    assert _consumed(mq) == N
