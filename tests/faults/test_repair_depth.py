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
import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from store import fsutil
from store.layout import Layout
from store.log import format as F
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


def _tree(root: Path) -> dict[str, tuple[int, bytes]]:
    """Every file and directory under ``root``: mode and content hash (mtimes aside)."""
    out: dict[str, tuple[int, bytes]] = {}
    for d, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(d) / name
            st = p.lstat()
            data = p.read_bytes() if stat.S_ISREG(st.st_mode) else b""
            out[str(p.relative_to(root))] = (st.st_mode, hashlib.sha256(data).digest() + st.st_mtime_ns.to_bytes(8, "big"))
    return out


def test_log_cut_below_its_durable_end_is_loss_and_check_never_writes(mq: MQ, tmp_path: Path) -> None:
    mq.ok("send", "t", "--flush", "sync", input="".join(f"{i}\n" for i in range(1, 301)))
    assert len(mq.ok("consume", "t", "-g", "g", "--from", "first", "-c", "200").out.split()) == 200
    seg = Layout(mq.root).commitlog_dir / f"{0:020d}"
    os.truncate(seg, 5000)
    # check on a read-only copy: it reports the loss, and not one byte or mtime changes
    ro = tmp_path / "ro"
    shutil.copytree(mq.root, ro, symlinks=True)
    for d, dirs, files in os.walk(ro):
        for name in dirs + files + [""]:
            p = Path(d) / name
            p.chmod(p.stat().st_mode & ~0o222)
    before = _tree(ro)
    try:
        res = mq.run("--store", str(ro), "store", "check")
        after = _tree(ro)
    finally:
        for d, _dirs, files in os.walk(ro):
            for name in files + [""]:
                p = Path(d) / name
                p.chmod(p.stat().st_mode | 0o200)
    assert res.returncode == 1, str(res)
    assert f"{seg.name}:" in res.out and "bytes short of its durable end" in res.out, str(res)
    assert after == before
    # the same on the store itself: nothing is repaired by a check, the offsets stay
    first = mq.run("store", "check")
    assert first.returncode == 1 and mq.run("store", "check").out == first.out
    # nor by any other command: each refuses (exit 5) rather than accept the loss unasked
    offsets = mq.offsets("g", "t")
    for args in (("topic", "list"), ("consume", "t", "-g", "g", "-e"), ("send", "t", "x")):
        refused = mq.run(*args)
        assert refused.returncode == 5 and "bytes short of its durable end" in refused.stderr, str(refused)
    assert mq.offsets("g", "t") == offsets
    assert mq.run("store", "check").out == first.out
    # recovery makes the store usable and says what was lost
    rec = mq.run("store", "recover")
    assert rec.returncode == 0, str(rec)
    assert "bytes short of its durable end" in rec.stderr and seg.name in rec.stderr, str(rec)
    mq.ok("store", "check")
    mq.ok("send", "t", "--flush", "sync", input="late\n")
    assert "late" in mq.ok("consume", "t", "-g", "g", "-e").out.split()


@pytest.mark.parametrize("point", ["topic-delete-after-mark", "topic-delete-after-queues",
                                   "topic-delete-after-offsets"])
@pytest.mark.parametrize("then", ["recover", "create"])
def test_topic_delete_killed_between_steps_is_finished(mq: MQ, point: str, then: str) -> None:
    mq.ok("topic", "create", "t", "--queues", "2")
    mq.ok("send", "t", input="".join(f"old{i}\n" for i in range(50)))
    mq.ok("consume", "t", "-g", "g", "--from", "first", "-c", "10")
    killed = mq.run("topic", "delete", "t", "--yes", failpoints=point)
    assert killed.returncode < 0 or killed.returncode == 137, str(killed)
    assert mq.run("store", "check").returncode == 1
    if then == "recover":
        rec = mq.ok("store", "recover")
        assert "deletion of topic 't'" in rec.stderr, str(rec)
        mq.ok("store", "check")
        one_error(mq.run("topic", "delete", "t", "--yes"), 3)
    mq.ok("topic", "create", "t", "--queues", "2")
    mq.ok("store", "check")
    assert mq.ok("consume", "t", "-g", "g2", "--from", "first", "-e").out == ""
    mq.ok("send", "t", input="new\n")
    assert mq.ok("consume", "t", "-g", "g", "--from", "first", "-e").out.split() == ["new"]


def test_recover_killed_after_dropping_the_index(mq: MQ) -> None:
    sent = mq.ok("send", "t", "--json", input="".join(f"{i}\n" for i in range(50))).json_lines()
    ids = [e["msgId"] for e in sent]
    killed = mq.run("store", "recover", failpoints="recover-after-index-drop")
    assert killed.returncode < 0 or killed.returncode == 137, str(killed)
    assert mq.run("store", "check").returncode == 1
    for mid in (ids[0], ids[-1]):
        shown = mq.run("msg", "show", mid, "--json")
        assert shown.returncode == 0 and shown.json_lines()[0]["msgId"] == mid, str(shown)
    mq.ok("store", "check")   # the open above finished the rebuild


def test_truncated_index_file_is_repaired_by_the_lookup(mq: MQ) -> None:
    """(``tests/faults/test_cut_derived.py`` has every way of cutting it.)"""
    sent = mq.ok("send", "t", "--json", input="".join(f"{i}\n" for i in range(50))).json_lines()
    idx = Layout(mq.root).index_dir / f"{0:020d}"
    os.truncate(idx, 30)
    res = mq.ok("msg", "show", sent[10]["msgId"], "--json")
    assert res.json_lines()[0]["body"] == "10", str(res)
    assert res.stderr.startswith(f"mqctl: warning: key index ({idx.parent}) file {idx.name} shorter (30 bytes)")
    assert res.stderr.count("\n") == 1, str(res)
    mq.ok("store", "check")


def test_index_entry_pointing_4_gib_away_is_found_by_check(mq: MQ) -> None:
    """An index entry whose offset lost a bit of its high half: ``store check`` must say so (it
    compared offsets modulo 2**32 and said OK); ``msg show`` of that message, which used to miss
    it, finds the entry leads past the log's end and repairs the index."""
    sent = mq.ok("send", "t", "--json", input="".join(f"{i}\n" for i in range(50))).json_lines()
    idx = Layout(mq.root).index_dir / f"{0:020d}"
    entry = F.INDEX_HEADER_SIZE + F.INDEX_SLOTS * 4 + 10 * F.INDEX_ENTRY_SIZE
    _key_hash, phys, _td, _prev = F.INDEX_ENTRY.unpack_from(idx.read_bytes(), entry)
    mid = next(e["msgId"] for e in sent if e["commitLogOffset"] == phys)
    _flip(idx, entry + 4 + 2, 0x20)   # bit 45 of the entry's commit-log offset
    res = mq.run("store", "check")
    assert res.returncode == 1 and "1 key(s) of records are not found in the key index" in res.out, str(res)
    assert f"commit-log offset {phys} " in res.out, str(res)
    res = mq.ok("msg", "show", mid, "--json")
    assert res.json_lines()[0]["msgId"] == mid, str(res)
    assert res.stderr.startswith(f"mqctl: warning: key index ({idx.parent}) file {idx.name} has an entry at "
                                 f"commit-log offset {phys | 1 << 45}, past the commit log's end"), str(res)
    mq.ok("store", "check")


def test_check_of_a_store_without_store_json_reports_it_and_writes_nothing(mq: MQ) -> None:
    mq.ok("send", "t", "x")
    (mq.root / "store.json").unlink()
    before = _tree(mq.root)
    res = mq.run("store", "check")
    assert res.returncode == 1 and "store.json" in res.out and "missing" in res.out, str(res)
    assert _tree(mq.root) == before, "store check restored store.json"
    mq.ok("store", "recover")
    assert (mq.root / "store.json").exists()
    mq.ok("store", "check")


def test_recover_puts_back_a_store_json_that_is_not_json_from_its_bak(mq: MQ) -> None:
    """store check sends the user to store recover for a damaged store.json whose .bak every
    command reads meanwhile; recover used to put back only a missing one, so check failed
    (exit 1) after every recover, for ever."""
    mq.ok("send", "t", "x")
    (mq.root / "store.json").write_text("garbage\n")
    res = mq.run("store", "check")
    assert res.returncode == 1 and "store.json" in res.out and "store recover" in res.stderr, str(res)
    res = mq.ok("store", "recover")
    assert "store.json is unreadable; restored from store.json.bak" in res.stderr, str(res)
    res = mq.ok("store", "check")
    assert "warning" not in res.stderr, str(res)
    assert mq.ok("consume", "t", "--no-group", "--from", "first", "-e").stdout == b"x\n"


Reader = tuple[str, list[str], bytes | None]   # the file, a command that reads it, its stdout after


def _delay_progress(mq: MQ) -> Reader:
    """A delayed message delivered: the scheduler wrote its first progress file (no .bak)."""
    mq.ok("send", "t", "late", "--delay", "1")
    res = mq.ok("consume", "t", "-g", "G", "--from", "first", "-c", "1")   # waits for it
    assert res.stdout == b"late\n", res
    return "config/delayOffset.json", ["consume", "t", "-g", "G", "-e"], b""   # (not delivered again)


def _tx_progress(mq: MQ) -> Reader:
    """A check pass that left a transaction unknown: the service wrote its first progress file."""
    mq.ok("tx", "send", "t", "pending")
    mq.ok("tx", "check", "--check-cmd", "echo UNKNOWN", "--timeout", "0")
    return "tx/CID_RMQ_SYS_TRANS.json", ["tx", "list", "--json"], None   # (still pending: below)


def _broadcast_progress(mq: MQ) -> Reader:
    """A broadcast client that committed twice: its offsets.json and a readable .bak, one
    commit older (what the client comes back to: "two" again, not "one")."""
    consume = ["consume", "t", "-g", "B", "--broadcast", "--client-id", "c1", "--from", "first", "-e"]
    for body in ("one", "two"):
        mq.ok("send", "t", body)
        assert mq.ok(*consume).stdout == f"{body}\n".encode()
    return "offsets/c1/B/offsets.json", consume, b"two\n"


@pytest.mark.parametrize("make", [_delay_progress, _tx_progress, _broadcast_progress],
                         ids=["delayOffset", "txProgress", "broadcastOffsets"])
def test_store_recover_repairs_every_readers_file_store_check_names(mq: MQ, make) -> None:   # noqa: ANN001
    """A reader's progress file that does not parse: store check names it (exit 1) and sends the
    user to store recover, which puts it back (from its .bak, or from the log's progress
    records, or from the oldest half message), so that check passes and the commands that read
    the file work again. Recover used to leave all three as they were (and check did not look
    at the transaction check service's file at all, while tx list and tx check failed on it)."""
    mq.ok("topic", "create", "t", "--queues", "1")
    name, reader, after = make(mq)
    (mq.root / name).write_text("{not json\n")
    res = mq.run("store", "check")
    assert res.returncode == 1 and name.rsplit("/", 1)[-1] in res.out, str(res)
    res = mq.ok("store", "recover")
    assert name.rsplit("/", 1)[-1] in res.stderr, str(res)
    res = mq.ok("store", "check")
    assert "warning" not in res.stderr, str(res)
    res = mq.ok(*reader)
    if after is not None:
        assert res.stdout == after, res
    else:
        assert [row["topic"] for row in res.json_lines()] == ["t"], res


def _delay_progress_twice(mq: MQ) -> Reader:
    """Two delayed messages delivered: the scheduler's progress file and a readable .bak."""
    for body in ("late", "later"):
        mq.ok("send", "t", body, "--delay", "1")
        res = mq.ok("consume", "t", "-g", "G", "--from", "first", "-c", "1")   # waits for it
        assert res.stdout == f"{body}\n".encode(), res
    return "config/delayOffset.json", ["consume", "t", "-g", "G", "-e"], b""   # (not delivered again)


def _offsets_of(obj: dict) -> list:
    table = obj["offsetTable"]
    return [e["offset"] for e in table] if isinstance(table, list) else list(table.values())


def _set_offsets(obj: dict, offset: int) -> None:
    table = obj["offsetTable"]
    for k in range(len(table)) if isinstance(table, list) else list(table):
        if isinstance(table, list):
            table[k]["offset"] = offset
        else:
            table[k] = offset


@pytest.mark.parametrize("make", [_delay_progress_twice, _broadcast_progress], ids=["delayOffset", "broadcastOffsets"])
def test_a_digit_changed_in_a_readers_progress_file_fails_its_crc(mq: MQ, make) -> None:   # noqa: ANN001
    """The delay scheduler's ``delayOffset.json`` (K10) and a broadcast client's ``offsets.json``
    (K12) had no checksum: an offset's digit changed, the JSON still valid, passed store check
    and was used (an offset moved back delivers again, one moved on skips). Now the copy whose
    crc fails is not read: its .bak is (with a warning), check names it, recover puts it back."""
    mq.ok("topic", "create", "t", "--queues", "1")
    name, reader, after = make(mq)
    path = mq.root / name
    obj = json.loads(path.read_bytes())
    assert "crc" in obj and min(_offsets_of(obj)) > 0, obj
    _set_offsets(obj, 0)   # (every message delivered again, were it read)
    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")
    res = mq.run("store", "check")
    assert res.returncode == 1 and f"{path}:0: crc mismatch" in res.out, str(res)
    assert f"({path.name}.bak is used instead)" in res.out, str(res)
    res = mq.ok(*reader)
    assert res.stdout == after and "crc mismatch" in res.stderr, res
    mq.ok("store", "recover")
    res = mq.ok("store", "check")
    assert "warning" not in res.stderr, str(res)
    assert fsutil.crc_problem(json.loads(path.read_bytes())) is None


@pytest.mark.parametrize("make", [_delay_progress_twice, _broadcast_progress], ids=["delayOffset", "broadcastOffsets"])
def test_a_readers_progress_file_of_an_earlier_version_without_a_crc_is_read_as_it_is(mq: MQ, make) -> None:   # noqa: ANN001
    mq.ok("topic", "create", "t", "--queues", "1")
    name, reader, _after = make(mq)
    path = mq.root / name
    for copy in (path, path.with_name(path.name + ".bak")):
        obj = json.loads(copy.read_bytes())
        del obj["crc"]
        copy.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")
    res = mq.ok("store", "check")
    assert "warning" not in res.stderr, str(res)
    mq.ok("send", "t", "new")
    res = mq.ok(*reader)
    assert res.stdout.endswith(b"new\n") and "warning" not in res.stderr, res


def test_the_oldest_segment_deleted_by_hand_is_reported_not_taken_for_retention(tmp_path: Path) -> None:
    """The oldest commit-log segment deleted by hand passed store check (testerK K11): the
    consume queues pointing below the log's start were taken for retention's, and readers
    started past the lost messages in silence. Retention records where it leaves the log's
    start (config/commitlogStart.json): check names the missing segment, recover accepts the
    loss with a warning, and retention's own deletions after that are no problem."""
    m = MQ(tmp_path / "small", tmp_path)
    try:
        m.ok("init", "--max-message-size", "64KiB", "--segment-size", "128KiB")
        m.ok("topic", "create", "t", "--queues", "1")
        m.ok("send", "t", input="".join(f"{i:04d}{'x' * 100}\n" for i in range(3000)))
        segs = sorted((m.root / "commitlog").iterdir())
        assert len(segs) >= 4, segs
        segs[0].unlink()
        res = m.run("store", "check")
        assert res.returncode == 1 and f"{segs[0]}:0: missing: the commit log begins at offset " \
                                      f"{int(segs[1].name)}, but retention removed no segment past offset 0" in res.out, res
        res = m.ok("store", "recover")
        assert "below offset %d were gone, not removed by retention" % int(segs[1].name) in res.stderr, res
        m.check_clean()
        m.ok("store", "clean", "--older-than", "0s", "--force")
        assert sorted((m.root / "commitlog").iterdir()) == segs[-1:]
        m.check_clean()
    finally:
        m.cleanup()


@pytest.mark.parametrize("tail", [1, 2, 3])
@pytest.mark.parametrize("how", ["cut", "stray"])
def test_a_torn_tail_of_a_few_bytes_is_damage_named_not_an_internal_error(mq: MQ, how: str, tail: int) -> None:
    """A log whose last bytes are 1-3 bytes of a record (a write torn there, or the log cut
    there): every command that scanned it failed with "internal error: ValueError: window
    shape cannot be larger than input array shape" (exit 1) — consume, send, store check —
    until store recover. Now check names the damage (exit 1), readers get every whole record,
    and a send cuts the torn bytes and goes on."""
    mq.ok("topic", "create", "t", "--queues", "1")
    mq.ok("send", "t", input="1\n2\n3\n")
    seg = mq.root / "commitlog" / f"{0:020d}"
    if how == "cut":   # the last record's first bytes only
        whole = seg.stat().st_size
        mq.ok("send", "t", "4")
        os.truncate(seg, whole + tail)
    else:              # bytes past the last record
        with open(seg, "ab") as f:
            f.write(b"\x7f" * tail)
    res = mq.run("store", "check")
    assert res.returncode == 1 and "internal error" not in res.stderr and "Traceback" not in res.stderr, str(res)
    assert mq.ok("consume", "t", "--no-group", "--from", "first", "-e").stdout == b"1\n2\n3\n"
    mq.ok("send", "t", "after")
    assert mq.ok("consume", "t", "--no-group", "--from", "first", "-e").stdout == b"1\n2\n3\nafter\n"
    mq.check_clean()


@pytest.mark.parametrize("where", ["past its size", "after its trailer"])
def test_bytes_past_a_sealed_segments_trailer_are_reported_and_recover_cuts_only_them(tmp_path: Path,
                                                                                      where: str) -> None:
    """Bytes a sealed segment holds past its end-of-segment trailer (appended past the size
    its name and the next segment's say, or written over the zeros after the trailer) are no
    record's: readers never read them, and store check said OK without a word. Now check
    warns, naming the segment, where they begin and how many (exit 0: no message is at stake),
    and store recover cuts them in the commit log's owner, never a record."""
    m = MQ(tmp_path / "small", tmp_path)
    try:
        m.ok("init", "--max-message-size", "64KiB", "--segment-size", "128KiB")
        m.ok("topic", "create", "t", "--queues", "1")
        m.ok("send", "t", input="".join(f"{i:04d}{'x' * 40000}\n" for i in range(10)))
        seg = sorted((m.root / "commitlog").iterdir())[0]
        data = seg.read_bytes()
        trailer_end = data.rfind(F.BLANK_MAGIC.to_bytes(4, "big")) + 4
        assert trailer_end == len(data), "a sealed segment ends with its trailer"
        junk = b"\x7fjunk" * 100
        if where == "past its size":   # (zeros up to its size, then more: all of it counts)
            os.truncate(seg, 128 * 1024)
            with open(seg, "ab") as f:
                f.write(junk)
            stray = 128 * 1024 + len(junk) - trailer_end
        else:
            assert trailer_end + len(junk) < 128 * 1024, "the trailer leaves no room after it"
            with open(seg, "r+b") as f:
                f.seek(trailer_end + 16)
                f.write(junk)
            stray = 16 + len(junk)
        res = m.run("store", "check")
        assert res.returncode == 0, res
        assert f"{seg}: {stray} bytes past the segment's end-of-segment trailer (byte {trailer_end} on)" \
            in res.stderr, res
        res = m.ok("store", "recover")
        assert f"{seg}: cut {stray} bytes past its end-of-segment trailer" in res.stderr, res
        assert seg.read_bytes() == data
        res = m.ok("store", "check")
        assert "past the segment" not in res.stderr, res
        m.check_clean()
        got = m.ok("consume", "t", "--no-group", "--from", "first", "-e").stdout.splitlines()
        assert [int(g[:4]) for g in got] == list(range(10))
    finally:
        m.cleanup()
