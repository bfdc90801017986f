"""The --dedup log: sharing, torn lines, bounds and compaction, across real processes."""
from __future__ import annotations

import re
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from store.client import dedup
from store.client.dedup import DedupLog
from store.errors import BadInputError, InvalidNameError, UsageError
from store.layout import Layout
from tests.procs import MQ, finish, python

LINE = re.compile(r"[0-9]+ [!-~]+")
DAY_MS = 24 * 3600 * 1000


@dataclass
class FakeClock:
    now: int = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def test_a_missing_log_is_empty_and_creates_nothing(layout: Layout) -> None:
    log = DedupLog(layout, "g")
    assert not log.seen("k1")
    assert len(log) == 0
    assert not layout.root.exists()


def test_recorded_ids_are_seen_by_another_instance_after_refresh(layout: Layout) -> None:
    clock = FakeClock()
    with DedupLog(layout, "g", clock=clock) as writer, DedupLog(layout, "g", clock=clock) as reader:
        writer.record(["k1", "k2"])
        assert writer.seen("k1") and writer.seen("k2")
        assert not reader.seen("k1")  # memory only changes on refresh
        assert reader.refresh() == 2
        assert reader.seen("k1") and reader.seen("k2") and not reader.seen("k3")
        assert reader.refresh() == 0  # only the new tail is read
    assert lines(layout.dedup_log("g")) == [f"{clock.now} k1", f"{clock.now} k2"]


def test_groups_have_separate_logs(layout: Layout) -> None:
    with DedupLog(layout, "g") as first, DedupLog(layout, "h") as second:
        first.record(["k1"])
        second.refresh()
        assert not second.seen("k1")


def test_files_are_private(layout: Layout) -> None:
    with DedupLog(layout, "g") as log:
        log.record(["k1"], fsync=True)
    path = layout.dedup_log("g")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(layout.root.stat().st_mode) == 0o700


@pytest.mark.parametrize("key", ["", "a b", "a\nb", "é", "x" * 256])
def test_keys_that_would_break_the_line_format_are_refused(layout: Layout, key: str) -> None:
    with DedupLog(layout, "g") as log, pytest.raises(BadInputError):
        log.record(["ok", key])
    assert not layout.dedup_log("g").exists()  # nothing of the batch was written


def test_bad_arguments_are_refused(layout: Layout) -> None:
    with pytest.raises(InvalidNameError):
        DedupLog(layout, "../g")
    with pytest.raises(UsageError):
        DedupLog(layout, "g", max_entries=0)


def test_a_torn_last_line_waits_for_its_newline(layout: Layout) -> None:
    path = layout.dedup_log("g")
    with DedupLog(layout, "g", clock=FakeClock()) as log:
        log.record(["k1"])
        with path.open("ab") as raw:
            raw.write(b"1700000000000 abc")
            raw.flush()
            assert log.refresh() == 0
            assert not log.seen("abc")
            raw.write(b"def\n")
        assert log.refresh() == 1
        assert log.seen("abcdef") and not log.seen("abc")


def test_an_append_after_a_crash_torn_tail_keeps_its_own_lines_whole(layout: Layout) -> None:
    path = layout.dedup_log("g")
    with DedupLog(layout, "g") as log:
        log.record(["k1"])
    with path.open("ab") as raw:
        raw.write(b"17000000")  # a write cut short by a machine crash
    with DedupLog(layout, "g") as log:
        log.record(["k2", "k3"])
    with DedupLog(layout, "g") as fresh:
        assert fresh.seen("k1") and fresh.seen("k2") and fresh.seen("k3")
    assert lines(path)[1] == "17000000"  # the torn record stays an unparsable line of its own


def test_unparsable_lines_are_skipped(layout: Layout) -> None:
    path = layout.dedup_log("g")
    path.parent.mkdir(parents=True)
    path.write_bytes(b"garbage\n\n12 \nx1 k0\n1700000000000 k1\n\xff\xfe k9\n1700000000000 k2\n")
    with DedupLog(layout, "g", clock=FakeClock()) as log:
        assert log.seen("k1") and log.seen("k2")
        assert len(log) == 2


_GOOD = b"".join(b"1700000000%03d K%029d\n" % (i, i) for i in range(40))   # 40 lines of 45 bytes


@pytest.mark.parametrize("how, damaged", [
    ("a line's start cut short", False), ("zeros to the appender's newline", False),
    ("zeros up to the next block", False), ("a byte no line holds", True),
    ("zeros written mid-line", True), ("two lines run together", True), ("a key too long", True)])
def test_only_lines_a_crash_cannot_leave_are_damage(how: str, damaged: bool) -> None:
    data = bytearray(_GOOD)
    if how == "a line's start cut short":
        data[450:450] = b"1700000000999 K00\n"
    elif how == "zeros to the appender's newline":   # (a block lost, its size kept; then the newline)
        data[450:450] = bytes(70) + b"\n"
    elif how == "zeros up to the next block":   # (a block not written back, the next one was)
        data[300:512] = bytes(212)
    elif how == "a byte no line holds":
        data[100] |= 0x80
    elif how == "zeros written mid-line":
        data[300:340] = bytes(40)
    elif how == "two lines run together":
        data[44] = ord("*")
    elif how == "a key too long":
        data[450:450] = b"1700000000999 " + b"K" * 256 + b"\n"
    bad = dedup.damaged_lines(bytes(data))
    assert bool(bad) == damaged, bad
    assert dedup.damaged_lines(bytes(data) + b"1700000000999 \xff") == bad   # (a write in progress)


def test_store_check_reports_a_damaged_dedup_log_and_recover_drops_only_its_damage(mq: MQ) -> None:
    """The dedup log had no check: bytes damaged in its middle passed ``store check`` (exit
    0) while the keys of those lines were forgotten. Check names the file, the byte and what
    it costs; recover rewrites it with every line that parses, and check is clean after."""
    mq.ok("topic", "create", "T", "--queues", "2")
    mq.send_lines("T", [f"m{i}" for i in range(50)])
    mq.ok("consume", "T", "-g", "G", "--from", "first", "-e", "--dedup", "-x", "true")
    path = mq.root / "dedup" / "G.log"
    data = bytearray(path.read_bytes())
    assert len(lines(path)) == 50
    start = data.index(b"\n", 400) + 1
    data[start + 20] = 0xFF
    path.write_bytes(bytes(data))
    res = mq.run("store", "check")
    assert res.returncode == 1 and f"{path}:{start}: dedup log of group G damaged: 1 line" in res.out, res
    res = mq.ok("store", "recover")
    assert f"{path} was damaged at byte {start}" in res.stderr, res
    mq.check_clean()
    kept = lines(path)
    assert len(kept) == 49 and all(LINE.fullmatch(x) for x in kept), kept
    assert path.read_bytes() == bytes(data[:start] + data[data.index(b"\n", start) + 1:])


def test_entries_older_than_max_age_are_forgotten(layout: Layout) -> None:
    clock = FakeClock()
    with DedupLog(layout, "g", max_age_ms=DAY_MS, clock=clock) as log:
        log.record(["old"])
        clock.now += DAY_MS // 2
        log.record(["young"])
        clock.now += DAY_MS // 2 + 1
        assert not log.seen("old") and log.seen("young")
        log.refresh()
        assert len(log) == 1
    # A new reader skips what is too old while loading.
    with DedupLog(layout, "g", max_age_ms=DAY_MS, clock=clock) as fresh:
        assert len(fresh) == 1 and fresh.seen("young")


def test_memory_keeps_only_the_newest_max_entries(layout: Layout) -> None:
    with DedupLog(layout, "g", max_entries=3, clock=FakeClock()) as log:
        for key in ["k1", "k2", "k3", "k4", "k5"]:
            log.record([key])
        assert len(log) == 3
        assert [log.seen(k) for k in ["k1", "k2", "k3", "k4", "k5"]] == [False, False, True, True, True]


def test_the_log_is_compacted_past_twice_max_entries_lines(layout: Layout) -> None:
    clock = FakeClock()
    path = layout.dedup_log("g")
    with DedupLog(layout, "g", max_entries=4, clock=clock) as log:
        for i in range(8):
            clock.now += 1
            log.record([f"k{i}"])
        assert len(lines(path)) == 8  # 2 x max_entries: not yet
        inode = path.stat().st_ino
        clock.now += 1
        log.record(["k8"])
        assert path.stat().st_ino != inode
        assert [line.split()[1] for line in lines(path)] == ["k5", "k6", "k7", "k8"]
        assert log.seen("k8") and not log.seen("k4")


def test_a_reader_follows_the_log_across_a_compaction(layout: Layout) -> None:
    # Equal-length lines make the stale-position bug visible: a reader that kept its byte
    # position in the replaced file would resume mid-file and miss "d".
    clock = FakeClock()
    with DedupLog(layout, "g", max_entries=2, clock=clock) as writer, \
            DedupLog(layout, "g", clock=clock) as reader:
        writer.record(["a", "b", "c"])
        assert reader.refresh() == 3
        writer.compact()  # keeps b, c
        writer.record(["d", "e"])  # 4 lines: no automatic compaction yet
        reader.refresh()
        assert all(reader.seen(k) for k in "abcde")
        assert [line.split()[1] for line in lines(layout.dedup_log("g"))] == ["b", "c", "d", "e"]


def test_records_from_two_processes_interleave_as_whole_lines(layout: Layout) -> None:
    script = """
        import sys
        from pathlib import Path
        from store.client.dedup import DedupLog
        from store.layout import Layout
        root, name = sys.argv[1], sys.argv[2]
        with DedupLog(Layout(Path(root)), "g") as log:
            for batch in range(200):
                log.record([f"{name}-{batch}-{i}" for i in range(5)])
    """
    with DedupLog(layout, "g") as reader:
        procs = [python(script, layout.root, name, stderr=subprocess.PIPE) for name in ("p", "q")]
        while any(proc.poll() is None for proc in procs):
            reader.refresh()
        finish(*procs)
        reader.refresh()
        expected = {f"{name}-{batch}-{i}" for name in "pq" for batch in range(200) for i in range(5)}
        assert all(reader.seen(key) for key in expected)
        assert len(reader) == len(expected)
    written = lines(layout.dedup_log("g"))
    assert len(written) == 2000
    assert all(LINE.fullmatch(line) for line in written)


def test_appends_during_compactions_in_another_process_are_not_lost(layout: Layout) -> None:
    writer = """
        import sys
        from pathlib import Path
        from store.client.dedup import DedupLog
        from store.layout import Layout
        with DedupLog(Layout(Path(sys.argv[1])), "g") as log:
            for i in range(400):
                log.record([f"key-{i}"])
    """
    with DedupLog(layout, "g") as compactor:
        proc = python(writer, layout.root, stderr=subprocess.PIPE)
        compactions = 0
        while proc.poll() is None:
            compactor.compact()
            compactions += 1
        finish(proc)
    assert compactions > 3
    with DedupLog(layout, "g") as fresh:
        assert [k for k in (f"key-{i}" for i in range(400)) if not fresh.seen(k)] == []


def test_a_reader_keeps_up_while_another_process_compacts(layout: Layout) -> None:
    """The writer compacts (replaces the file) every ~20 records; half-way it waits until the
    reader has read the file, so the reader reads while replacements happen before and after
    that point, however the two processes are scheduled."""
    writer = """
        import os, sys, time
        from pathlib import Path
        from store.client.dedup import DedupLog
        from store.layout import Layout
        layout = Layout(Path(sys.argv[1]))
        half, go = Path(sys.argv[2]), Path(sys.argv[3])
        path, replaced, ino = layout.dedup_log("g"), 0, None
        # max_entries=20: the writer compacts on its own every ~20 records.
        with DedupLog(layout, "g", max_entries=20) as log:
            for i in range(600):
                log.record([f"key-{i}"])
                now = path.stat().st_ino
                replaced += ino is not None and now != ino   # (the old file lives until the rename)
                ino = now
                if i == 299:
                    half.touch()
                    while not go.exists():
                        time.sleep(0.001)
        print(replaced)
    """
    half, go = layout.root / "half", layout.root / "go"
    with DedupLog(layout, "g") as reader:
        proc = python(writer, layout.root, half, go, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        while proc.poll() is None:
            reader.refresh()
            if half.exists() and not go.exists():
                reader.refresh()   # (a read of the file the writer has made so far)
                assert all(reader.seen(f"key-{i}") for i in range(280, 300))
                go.touch()
        replaced = int(finish(proc)[0])
        reader.refresh()
        written = {f"key-{i}" for i in range(600)}
        assert replaced >= 10   # the file really was replaced under the reader, on both sides of its read
        assert all(reader.seen(f"key-{i}") for i in range(580, 600))
        # Every remembered id is one that was written: nothing was read from a stale position.
        assert sum(reader.seen(key) for key in written) == len(reader)
