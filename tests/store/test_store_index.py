"""store/index.py: the key index (RocketMQ IndexFile shape): lookups, collisions, file roll."""
from __future__ import annotations

import os
from pathlib import Path

from store import format as F
from store.index import KeyIndex, key_hash

from storetestutil import draft, open_store

# Two keys whose index hashes (CRC-32 masked to 31 bits) are equal, found by brute force.
COLLIDE_A, COLLIDE_B = "key3985819", "key4420602"


def test_the_colliding_pair_really_collides() -> None:
    assert COLLIDE_A != COLLIDE_B
    assert key_hash(f"T#{COLLIDE_A}") == key_hash(f"T#{COLLIDE_B}")


def test_lookup_finds_every_offset_of_a_key_newest_first(tmp_path: Path) -> None:
    idx = KeyIndex(tmp_path / "index", slots=64, entries=1000)
    items = [(f"T#k{i % 7}", 100 * i) for i in range(200)]
    idx.add(items[:50], 1700000000000)
    idx.add(items[50:], 1700000005000)
    for k in range(7):
        want = [p for key, p in items if key == f"T#k{k}"][::-1]
        assert idx.lookup(f"T#k{k}", limit=1000) == want
    assert idx.lookup("T#k3", limit=5) == [p for key, p in items if key == "T#k3"][::-1][:5]
    assert idx.lookup("T#absent") == []
    assert idx.lookup("U#k1") == []
    assert idx.files() == [0]
    b, e, bp, ep, slots, count = idx.header(0)
    assert (b, e, bp, ep, slots, count) == (1700000000000, 1700000005000, 0, 19900, 64, 201)
    # bytes keys (the producer's fast path hands pre-encoded keys) index the same
    idx.add([(b"T#bytes", 20000)], 1700000006000)
    assert idx.lookup("T#bytes") == [20000]


def test_different_keys_sharing_a_slot_are_told_apart_by_hash(tmp_path: Path) -> None:
    idx = KeyIndex(tmp_path / "index", slots=1, entries=100)   # every key lands in slot 0
    idx.add([("T#a", 1), ("T#b", 2), ("T#a", 3), ("T#c", 4), ("T#b", 5)], 1700000000000)
    assert idx.lookup("T#a") == [3, 1]
    assert idx.lookup("T#b") == [5, 2]
    assert idx.lookup("T#c") == [4]


def test_true_hash_collisions_are_returned_unverified(tmp_path: Path) -> None:
    idx = KeyIndex(tmp_path / "index", slots=1024, entries=100)
    idx.add([(f"T#{COLLIDE_A}", 10), (f"T#{COLLIDE_B}", 20)], 1700000000000)
    # the index cannot tell them apart; the store reads each record to decide
    assert sorted(idx.lookup(f"T#{COLLIDE_A}")) == [10, 20]


def test_store_resolves_hash_collisions_by_reading_the_record(root: Path) -> None:
    s = open_store(root)
    ra = s.put([draft("T", "a", properties={"KEYS": COLLIDE_A})])[0]
    rb = s.put([draft("T", "b", properties={"KEYS": COLLIDE_B})])[0]
    assert [m.body for m in s.query_key("T", COLLIDE_A)] == [b"a"]
    assert [m.body for m in s.query_key("T", COLLIDE_B)] == [b"b"]
    assert {ra.commitlog_offset, rb.commitlog_offset} == set(s.index.lookup(f"T#{COLLIDE_A}"))
    s.close()


def test_index_rolls_to_a_new_file_when_full(tmp_path: Path) -> None:
    idx = KeyIndex(tmp_path / "index", slots=4, entries=10)   # 9 usable entries per file
    items = [(f"T#k{i % 3}", 1000 + 10 * i) for i in range(40)]
    idx.add(items[:5], 1700000000000)
    idx.add(items[5:], 1700000001000)   # one batch that spans several files
    files = idx.files()
    assert len(files) == 5
    assert files == [items[9 * n][1] for n in range(5)]   # named by the first entry's offset
    assert sorted(os.listdir(idx.dir)) == [F.segment_name(b) for b in files]
    for base in files[:-1]:
        assert idx.header(base)[5] == 10
    for k in range(3):
        assert idx.lookup(f"T#k{k}", limit=100) == [p for key, p in items if key == f"T#k{k}"][::-1]
    # files are created sparse-free up to their slot table, entries appended after it
    size = (tmp_path / "index" / F.segment_name(files[0])).stat().st_size
    assert size == F.INDEX_HEADER_SIZE + 4 * 4 + 10 * F.INDEX_ENTRY_SIZE


def test_adding_the_same_offsets_again_is_idempotent(tmp_path: Path) -> None:
    idx = KeyIndex(tmp_path / "index", slots=16, entries=100)
    items = [(f"T#k{i}", 10 * i) for i in range(10)]
    idx.add(items, 1700000000000)
    idx.add(items, 1700000000000)            # recovery replays the same records
    idx.add(items[5:] + [("T#k1", 500)], 1700000000000)
    assert idx.header(0)[5] == 12
    assert idx.lookup("T#k1") == [500, 10]
    assert idx.lookup("T#k7") == [70]


def test_truncate_after_removes_files_that_begin_past_the_end(tmp_path: Path) -> None:
    idx = KeyIndex(tmp_path / "index", slots=4, entries=5)
    idx.add([(f"T#k{i}", 100 * i) for i in range(12)], 1700000000000)
    assert idx.files() == [0, 400, 800]
    idx.truncate_after(400)
    assert idx.files() == [0]
