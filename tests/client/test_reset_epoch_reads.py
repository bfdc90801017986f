"""The reset epochs a member looks at for ``offsets reset --force`` (``offsettable.epochs``,
``ClusterOffsetStore.reset_epochs``): what a whole load of the table says, without decoding
the members' commits appended since the snapshot."""
from __future__ import annotations

import json
import zlib

import pytest

from store.layout import Layout
from store.log import offsetjournal, offsettable
from store.log.offsets import ClusterOffsetStore


def append_record(layout: Layout, record: dict) -> None:
    """A record appended past the snapshot as a crash leaves one: written, its snapshot not."""
    journal = offsetjournal.Journal(layout.consumer_offset_log)
    journal.append(record, journal.read().end)


def busy_group(layout: Layout) -> ClusterOffsetStore:
    """A table whose journal holds, past the snapshot, 40 members' commits (a commit's form)."""
    table = ClusterOffsetStore(layout)
    table.commit("G", {("T", q): 0 for q in range(4)})
    table.reset("G", "U", {0: 0})
    member = ClusterOffsetStore(layout)
    for n in range(1, 41):
        member.commit("G", {("T", n % 4): n}, journal_only=True, expected_epochs={"U": 1})
    return table


def test_epochs_past_the_snapshot_are_read_without_decoding_commits(layout: Layout,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    table = busy_group(layout)
    # a reset of T whose record made it and whose snapshot did not, then more commits
    append_record(layout, {"epoch": {"T@G": 1}, "set": {"T@G": {"0": 0}}})
    ClusterOffsetStore(layout).commit("G", {("U", 0): 3}, journal_only=True, expected_epochs={"U": 1, "T": 1})
    whole = offsettable.load(layout).table.epochs
    assert whole == {"U@G": 1, "T@G": 1}
    decoded: list[bytes] = []
    decode = offsetjournal.decode

    def counted(payload: bytes):  # noqa: ANN202
        decoded.append(payload)
        return decode(payload)
    monkeypatch.setattr(offsetjournal, "decode", counted)
    assert offsettable.epochs(layout) == whole
    assert [json.loads(p) for p in decoded] == [{"epoch": {"T@G": 1}, "set": {"T@G": {"0": 0}}}]
    assert table.reset_epochs("G") == {"T": 1, "U": 1} == table.snapshot("G").epochs
    assert table.reset_epochs("H") == {}


def test_a_full_record_past_the_snapshot_replaces_the_epochs(layout: Layout) -> None:
    busy_group(layout)
    append_record(layout, {"full": {"offsetTable": {"T@G": {"0": 7}}, "resetEpoch": {"T@G": 4}}})
    assert offsettable.epochs(layout) == offsettable.load(layout).table.epochs == {"T@G": 4}


def test_a_record_that_does_not_parse_ends_the_journal_there_as_for_a_load(layout: Layout) -> None:
    busy_group(layout)
    journal = offsetjournal.Journal(layout.consumer_offset_log)
    end = journal.read().end
    body = b"[1]"   # a frame that checks, whose payload is no object: readers stop at it
    with open(layout.consumer_offset_log, "ab") as f:
        f.write(offsetjournal.FRAME.pack(len(body), zlib.crc32(body)) + body)
    journal.append({"epoch": {"T@G": 9}}, journal.read(end, raw=True).end)   # (after it: unseen)
    assert offsettable.epochs(layout) == offsettable.load(layout).table.epochs == {"U@G": 1}


def test_a_snapshot_not_trusted_is_left_to_the_whole_load(layout: Layout, warnings: list[str]) -> None:
    table = busy_group(layout)
    table.reset("G", "T", {0: 0})   # (the .bak then holds T's epoch 0, the journal its 1)
    layout.consumer_offset_json.write_text("{garbage")
    assert offsettable.epochs(layout) is None
    assert ClusterOffsetStore(layout, warn=warnings.append).reset_epochs("G") == {"T": 1, "U": 1}
    assert warnings and "damaged" in warnings[0]
