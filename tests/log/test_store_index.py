"""store/log/index.py: the key index (RocketMQ IndexFile shape): lookups, collisions, file roll."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from store.log import format as F
from store.log.index import KeyIndex, key_hash
from tests.log.storetestutil import draft, open_store

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


def test_a_batch_that_fails_while_rolling_the_index_does_not_hide_later_keys(root: Path, monkeypatch) -> None:
    """The batch's first index file took some entries (and moved its end offset past them)
    before creating the next file failed: the batch is undone, and the keys of the records
    later written at those same offsets must still be indexed."""
    from store.errors import StoreIOError
    s = open_store(root)
    s.engine.index = KeyIndex(s.layout.index_dir, slots=8, entries=6)
    s.put([draft("T", "a", properties={"KEYS": "ka"})])
    real_create = KeyIndex._create

    def failing_create(self, begin_phys, begin_ts):
        raise StoreIOError("cannot create index file: no space left on device")

    monkeypatch.setattr(KeyIndex, "_create", failing_create)
    end = s.commitlog.end()
    try:
        s.put([draft("T", f"b{i}", properties={"KEYS": f"kb{i}"}) for i in range(5)])
    except StoreIOError:
        pass
    else:
        raise AssertionError("the batch should have failed")
    assert s.commitlog.end() == end
    monkeypatch.setattr(KeyIndex, "_create", real_create)
    res = s.put([draft("T", f"c{i}", properties={"KEYS": f"kc{i}"}) for i in range(5)])
    for i, r in enumerate(res):
        assert [m.body for m in s.query_key("T", f"kc{i}")] == [f"c{i}".encode()]
        assert s.find(r.uniq_key).body == f"c{i}".encode()
    assert s.query_key("T", "kb1") == []
    s.close()


class _Killed(BaseException):
    """Stands in for SIGKILL: nothing catches it, no cleanup runs in the store's code."""


@pytest.mark.parametrize("n", [50, 3000])   # both of _add_to's paths (slot by slot, whole table)
def test_a_writer_killed_before_the_index_header_keeps_older_chains(root: Path, monkeypatch, n: int) -> None:
    """A writer dies after the index's entries and slots but before its header: the next
    opener re-adds the batch. Older messages sharing a slot must still be found: by the next
    opener, and by a reader before it (what any reader sees while a batch is written: its
    slots point past the header's count until the header follows)."""
    import store.log.index as index_mod
    s = open_store(root)
    old = s.put([draft("T", f"old{i}", properties={"KEYS": f"k{i}"}) for i in range(n)])

    class Hdr:
        size = F.INDEX_HEADER_SIZE
        unpack = staticmethod(F.INDEX_HEADER.unpack)
        unpack_from = staticmethod(F.INDEX_HEADER.unpack_from)

        @staticmethod
        def pack(*a):   # (the batch's header: ``_add_to`` writes it last)
            raise _Killed()

    monkeypatch.setattr(index_mod, "_HDR", Hdr)
    with pytest.raises(_Killed):
        s.put([draft("T", f"new{i}", properties={"KEYS": f"k{i}"}) for i in range(n)])
    monkeypatch.undo()
    reader = KeyIndex(s.layout.index_dir)
    for i in range(0, n, max(1, n // 100)):
        assert reader.lookup(f"T#k{i}") == [old[i].commitlog_offset], i
    s.close()
    s = Store_open(root)
    for i in range(0, n, max(1, n // 100)):
        assert [m.body for m in s.query_key("T", f"k{i}")] == [f"new{i}".encode(), f"old{i}".encode()], i
        assert s.find(old[i].uniq_key).body == f"old{i}".encode()
    s.close()


def Store_open(root: Path):
    from store.log.messagestore import Store
    return Store.open(root)


@pytest.mark.parametrize("slots", [64, 4096])
def test_batches_indexed_as_arrays_are_byte_identical_to_the_loop(tmp_path: Path, slots: int,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The numpy path (big batches, numpy loaded) writes the same file as the per-entry loop:
    the same entries, prevIndex chains through earlier batches and within one, slots, header;
    and rolls into a second file at the same place."""
    np = pytest.importorskip("numpy")
    import store.log.index as index_mod
    rng = np.random.default_rng(7)
    batches = []
    phys = 0
    for n in (300, 1, 700, 2500, 400):
        hashes = (rng.integers(0, 1 << 31, n) if n != 700 else rng.integers(0, 40, n)).tolist()
        physs = list(range(phys, phys + 100 * n, 100))
        phys += 100 * n
        batches.append((hashes, physs))
    files = {}
    native = index_mod._add_native   # (the C loop, where built, against the same definition)
    for name, arrays_from in (("loop", 1 << 40), ("arrays", 256), ("native", 1 << 40)):
        if name == "native" and native is None:
            continue
        monkeypatch.setattr(index_mod, "_ARRAYS_FROM", arrays_from)
        monkeypatch.setattr(index_mod, "_add_native", native if name == "native" else None)
        idx = KeyIndex(tmp_path / name, slots=slots, entries=3000)
        for i, (hashes, physs) in enumerate(batches):
            idx.add_hashes(list(hashes), list(physs), 1700000000000 + 1000 * i)
        idx.close()
        files[name] = {p.name: p.read_bytes() for p in sorted((tmp_path / name).iterdir())}
    assert len(files["loop"]) == 2
    for name in files:
        assert list(files[name]) == list(files["loop"]), name
        for fname in files["loop"]:
            assert files[name][fname] == files["loop"][fname], (name, fname)
    idx = KeyIndex(tmp_path / "arrays", slots=slots, entries=3000)
    want = [p for hashes, physs in batches for h, p in zip(hashes, physs) if h == batches[2][0][0]][::-1]
    got = []
    for base in reversed(idx.files()):
        got += idx_lookup_hash(idx, base, batches[2][0][0])
    assert got == want


def idx_lookup_hash(idx: KeyIndex, base: int, h: int) -> list[int]:
    """Offsets chained from a hash's slot in one index file, newest first (reading the file)."""
    raw = idx.path(base).read_bytes()
    slot = F.INDEX_SLOT.unpack_from(raw, F.INDEX_HEADER_SIZE + (h % idx.slots) * 4)[0]
    count = F.INDEX_HEADER.unpack_from(raw, 0)[5]
    out = []
    n = slot
    while 0 < n < count:   # entry 0 is never used: a slot of 0 is empty
        eh, ep, _td, prev = F.INDEX_ENTRY.unpack_from(raw, idx.table_end + n * F.INDEX_ENTRY_SIZE)
        if eh == h:
            out.append(ep)
        if prev == n:
            break
        n = prev
    return out


@pytest.mark.parametrize("slots", [4096, F.INDEX_SLOTS])
def test_batches_of_distinct_slots_are_byte_identical_to_the_loop(tmp_path: Path, slots: int,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch whose keys all fall in different slots (``_entries_distinct``: C iterations)
    writes the same file as the per-entry loop: entries chained to earlier batches' entries,
    slots, header; batches with a shared slot take the loop either way. So does the loop in C
    (``nativecheck.index_add``), where it is built, for every batch."""
    import random

    import store.log.index as index_mod
    monkeypatch.setattr(index_mod, "_ARRAYS_FROM", 1 << 40)
    rng = random.Random(11)
    batches = []
    phys = 0
    for n in (100, 1, 100, 300, 100, 40, 2, 8, 33) * 3:
        hashes = [rng.getrandbits(31) for _ in range(n)]
        batches.append((hashes, list(range(phys, phys + 100 * n, 100))))
        phys += 100 * n
    batches.append(([7, 7 + slots, 9], [phys, phys + 100, phys + 200]))   # a shared slot
    distinct_used = []
    real = KeyIndex._entries_distinct

    def spy(self, *a):
        took = real(self, *a)
        distinct_used.append(took is not None)
        return took

    native = index_mod._add_native
    files = {}
    for name, entries_distinct, add_native in (("loop", lambda self, *a: None, None), ("distinct", spy, None),
                                               ("native", real, native)):
        if name == "native" and native is None:
            continue
        monkeypatch.setattr(KeyIndex, "_entries_distinct", entries_distinct)
        monkeypatch.setattr(index_mod, "_add_native", add_native)
        idx = KeyIndex(tmp_path / name, slots=slots, entries=1800)   # rolls into a second file
        for i, (hashes, physs) in enumerate(batches):
            idx.add_hashes(list(hashes), list(physs), 1700000000000 + 1000 * i)
        idx.close()
        files[name] = {p.name: p.read_bytes() for p in sorted((tmp_path / name).iterdir())}
    assert any(distinct_used) and not all(distinct_used)
    assert len(files["loop"]) == 2
    for name in files:
        assert list(files[name]) == list(files["loop"]), name
        for fname in files["loop"]:
            assert files[name][fname] == files["loop"][fname], (name, fname)


def test_two_handles_taking_turns_write_the_file_one_handle_writes(tmp_path: Path) -> None:
    """Each handle keeps a copy of the newest file's slot table between its batches: one that
    another handle wrote to since (its header changed) is read anew, so two writers taking
    turns, at every batch size, leave the same bytes as one writer."""
    import random
    rng = random.Random(5)
    batches = []
    phys = 0
    for n in (1, 1, 300, 1, 5, 1000, 3, 300, 1, 2, 700, 1):
        batches.append(([rng.getrandbits(31) % 5000 for _ in range(n)], list(range(phys, phys + 100 * n, 100))))
        phys += 100 * n
    one = KeyIndex(tmp_path / "one", slots=4096, entries=2000)
    turns = [KeyIndex(tmp_path / "two", slots=4096, entries=2000) for _ in range(2)]
    for i, (hashes, physs) in enumerate(batches):
        ts = 1700000000000 + 1000 * i
        one.add_hashes(list(hashes), list(physs), ts)
        turns[(i // 2) % 2].add_hashes(list(hashes), list(physs), ts)   # (two batches each in turn)
    for idx in (one, *turns):
        idx.close()
    want = {p.name: p.read_bytes() for p in sorted((tmp_path / "one").iterdir())}
    got = {p.name: p.read_bytes() for p in sorted((tmp_path / "two").iterdir())}
    assert len(want) == 2 and got == want


def test_a_batch_whose_index_header_cannot_be_written_leaves_no_slot_past_the_entries(root: Path,
                                                                                     monkeypatch) -> None:
    """The header write of a batch fails (EIO) after its slots were written: the batch is
    undone, and the slots it moved point back at their chains. They pointed past the header's
    count: lookups of the older messages in those slots found nothing, and ``store check``
    reported a damaged index until a ``store recover``."""
    import errno

    from store.errors import StoreIOError, io_error
    s = open_store(root)
    old = s.put([draft("T", f"old{i}", properties={"KEYS": f"k{i}"}) for i in range(20)])
    real_write = KeyIndex._write

    def failing_write(self, fd, base, data, pos):
        if pos == 0:
            raise io_error(OSError(errno.EIO, "Input/output error"), f"write {self.path(base)}")
        real_write(self, fd, base, data, pos)

    monkeypatch.setattr(KeyIndex, "_write", failing_write)
    with pytest.raises(StoreIOError):
        s.put([draft("T", f"new{i}", properties={"KEYS": f"k{i}"}) for i in range(20)])
    monkeypatch.undo()
    assert s.check().problems == []
    for i in range(20):
        assert [m.body for m in s.query_key("T", f"k{i}")] == [f"old{i}".encode()], i
        assert s.find(old[i].uniq_key).body == f"old{i}".encode()
    s.close()


def _small_index(s, entries: int = 6) -> KeyIndex:
    s.engine.index = KeyIndex(s.layout.index_dir, slots=8, entries=entries)
    return s.engine.index


def test_a_record_whose_keys_a_roll_split_is_sound_and_repaired_whole(root: Path) -> None:
    """A file filled in the middle of a record's keys: its first ones end that file (whose end
    offset is the record's), the rest begin the next (named by the record's offset). ``store
    check`` looked for them in the newer file only and reported keys missing (a store with
    over half a million keyed messages failed its check), and a repair of the newer file
    replayed the record as indexed already: its keys there were gone from lookups."""
    s = open_store(root)
    idx = _small_index(s)
    res = s.put([draft("T", f"m{i}", properties={"KEYS": f"k{i}"}) for i in range(2)])
    res += [s.put([draft("T", f"m{i}", properties={"KEYS": f"k{i}"})])[0] for i in range(2, 4)]
    split = res[2].commitlog_offset   # (entries 1-4: m0, m1; 5: m2's first key; file full)
    assert idx.files() == [0, split] and idx.header(0)[3] == split
    assert s.check().problems == []
    s.close()
    os.truncate(idx.path(split), 100)   # the newer file cut: the next lookup repairs it
    warnings: list[str] = []
    s = open_store(root, warnings)
    _small_index(s)
    for i in range(4):
        assert [m.body for m in s.query_key("T", f"k{i}")] == [f"m{i}".encode()], i
        assert s.find(res[i].uniq_key).body == f"m{i}".encode()
    assert any("repaired from the commit log" in w for w in warnings), warnings
    assert s.check().problems == []
    s.close()
