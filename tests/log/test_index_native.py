"""The key index's loop in C (``nativecheck.index_add``, behind store/log/index.py) computes what
the Python loops of ``KeyIndex._entries``, its definition, compute: the entries' bytes, the slot
table after the batch, and the slots to write back; and declines (None, the table untouched)
where a killed writer left a slot past the file's count, which only the Python loop resolves.
(test_store_index.py compares whole files written either way.)"""
from __future__ import annotations

import random
from pathlib import Path

import pytest

from store.log import format as F
from store.log import index as index_module
from store.log import indexchains
from store.log.index import KeyIndex

needs_c = pytest.mark.skipif(index_module._add_native is None,
                             reason="the C module is not built (tests/log/test_nativecheck.py says why)")


def _python(idx: KeyIndex, table: bytearray, hashes: list[int], physs: list[int], tdiff: int, count: int,
            gap: int) -> tuple[bytes, list[tuple[int, int]]]:
    entries, positions = idx._entries(-1, table, hashes, physs, tdiff, count)
    return bytes(entries), indexchains.runs(positions, gap, idx.table_end)


@needs_c
@pytest.mark.parametrize("slots", [16, 4096, F.INDEX_SLOTS])
def test_the_c_loop_computes_what_the_python_loop_does(tmp_path: Path, slots: int) -> None:
    """Random batches of 1 to 2,000 keys (slots shared within a batch and with earlier
    batches: few slots), run after run on the same table: entries, table and the bytes the
    ranges to write back cover."""
    rng = random.Random(slots)
    idx = KeyIndex(tmp_path, slots=slots)
    table_c, table_py = bytearray(idx.table_end), bytearray(idx.table_end)
    count, phys = 1, 0
    for k in (1, 2, 7, 8, 100, 33, 1, 2000, 256, 100):
        hashes = [rng.getrandbits(31) for _ in range(k)]
        hashes[k // 2] = 0x7FFFFFFF   # the largest hash
        physs = list(range(phys, phys + 90 * k, 90))
        gap = rng.choice([4, 4096, 16384])
        got = index_module._add_native(table_c, slots, hashes, physs, 17, count, gap)
        assert got is not None
        entries, runs = got
        want_entries, _ = _python(idx, table_py, hashes, physs, 17, count, gap)
        assert entries == want_entries and table_c == table_py
        written = sorted({sp for a, b in runs for sp in range(a, b, 4)})
        changed = {F.INDEX_HEADER_SIZE + h % slots * 4 for h in hashes}
        assert changed <= set(written)                                         # every changed slot
        assert all(b > a and (a - F.INDEX_HEADER_SIZE) % 4 == 0 for a, b in runs)
        assert all(runs[i][1] + gap - 4 < runs[i + 1][0] for i in range(len(runs) - 1))   # apart, ascending
        count, phys = count + k, phys + 90 * k


@needs_c
def test_a_slot_left_by_a_killed_writer_is_left_to_the_python_loop(tmp_path: Path) -> None:
    """A slot holding an entry number at or past the count (a killed writer's), or a negative
    one: the C loop declines and changes nothing; any other batch it takes."""
    idx = KeyIndex(tmp_path, slots=64)
    for bad in (10, 11, -1):
        table = bytearray(idx.table_end)
        F.INDEX_SLOT.pack_into(table, F.INDEX_HEADER_SIZE + 5 * 4, bad)
        before = bytes(table)
        assert index_module._add_native(table, 64, [1, 5 + 64, 2], [0, 10, 20], 0, 10, 4096) is None
        assert bytes(table) == before
        assert index_module._add_native(table, 64, [1, 2], [0, 10], 0, 10, 4096) is not None


def test_the_c_loop_indexes_where_it_is_built() -> None:
    """Where the extension is built (test_nativecheck.py: wherever a compiler is), a batch's
    keys are indexed by its loop, and its unique keys made by it; elsewhere by the Python loops."""
    from store.log import columns, results
    if not columns.NATIVE:
        assert index_module._add_native is None and results._unique_keys is None
        return
    from store.log import nativecheck
    assert index_module._add_native is nativecheck.index_add
    assert results._unique_keys is nativecheck.unique_keys
