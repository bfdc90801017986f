"""The producer's record loop in C (``nativecheck.frame_run``, behind store/log/framing.py)
writes exactly what framing.py's Python loops write, which define it: the commit log, the
consume queues and the key index byte for byte, and the same results, for every field a batch
varies (tags, keys, user properties up to the limit, a sharding key per body or one for all,
empty bodies, bodies of the store's maximum size, round robin or one queue), across segment
ends and unique-key counters that wrap."""
from __future__ import annotations

import time as _time
import zlib
from pathlib import Path

import pytest

from store.log import format as F
from store.log import framing as framing_module
from store.log.messagestore import Store
from tests.log.storetestutil import all_messages, open_store

needs_c = pytest.mark.skipif(getattr(framing_module, "_frame_native", None) is None,
                             reason="the C loop is not built (tests/log/test_nativecheck.py says why)")

MAX = 4 * 1024 * 1024   # the store's default maximum message size (settings.py)
Batch = tuple[list, dict, int, list | None]   # bodies, properties, queue id, sharding keys


def _bodies(sizes: list[int], views: bool = True) -> list:
    """Bodies of ``sizes``, every other one a memoryview of one buffer (as stdin's reader
    hands them over), the others bytes."""
    data = b"".join(bytes([65 + i % 26]) * s for i, s in enumerate(sizes))
    mv, out, p = memoryview(data), [], 0
    for i, s in enumerate(sizes):
        out.append(mv[p:p + s] if views and i % 2 else bytes(mv[p:p + s]))
        p += s
    return out


def _send(root: Path, native: bool, batches: list[Batch], monkeypatch: pytest.MonkeyPatch,
          segment: int) -> tuple[dict[str, bytes], list[tuple]]:
    """The store's log, queue and index files after ``batches`` were sent with the C loop or
    the Python loops alone, and each batch's results; clock, key prefix and counters fixed."""
    results: list[tuple] = []
    with monkeypatch.context() as m:
        if not native:
            m.setattr(framing_module, "_frame_native", None)
        store: Store = open_store(root, commitlog_segment_size=segment)
        try:
            store.create_topic("T", 8)
            store.engine.writer.round_robin["T"] = 0
            store.uniq_keys.counter = 65500          # the key counter wraps inside the first batches
            store.uniq_keys.prefix = "7F0000010001DEADBEEF"[:len(store.uniq_keys.prefix)]
            m.setattr(_time, "time", lambda: 1_700_000_000.0)
            for bodies, props, queue_id, skeys in batches:
                r = store.put_bodies("T", bodies, properties=props, queue_id=queue_id, sharding_keys=skeys)
                results.append((r.queue_ids, r.queue_offsets, r.commitlog_offsets, r.uniq_keys, r.store_timestamp))
            m.undo()
            for msg in all_messages(store, "T"):   # every record reads back, its CRCs checked
                assert msg.size == F.RECORD_FIXED_SIZE + len(msg.body) + 1 + len(b"".join(
                    f"{k}\x01{v}\x02".encode() for k, v in msg.properties.items())) + F.CRC_PROPERTY_SIZE
        finally:
            store.close()
    files = {str(p.relative_to(root)): p.read_bytes() for d in ("commitlog", "consumequeue", "index")
             for p in sorted((root / d).rglob("*")) if p.is_file() and p.name.isdigit()}   # (segments, files)
    return files, results


def _same(tmp_path: Path, batches: list[Batch], monkeypatch: pytest.MonkeyPatch, segment: int = 1 << 20) -> None:
    c = _send(tmp_path / "c", True, batches, monkeypatch, segment)
    py = _send(tmp_path / "py", False, batches, monkeypatch, segment)
    assert c[0].keys() == py[0].keys()
    for name in c[0]:
        assert c[0][name] == py[0][name], name
    assert c[1] == py[1]


SIZES = [0, 5, 100, 2047, 2048, 16384, 70000, 3, 65536, 40000, 32767, 32768]
PROPS = [
    {},
    {"TAGS": "tg"},
    {"KEYS": "k1 k2"},
    {"u": "v", "ünï": "cödé"},
    {"TAGS": "tg", "KEYS": "k1 k2 k3", "x": "y" * 300},
]


@needs_c
@pytest.mark.parametrize("props", PROPS)
@pytest.mark.parametrize("queue_id", [-1, 5])
def test_big_bodies_with_every_kind_of_property(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, props: dict,
                                                queue_id: int) -> None:
    """Batches with big bodies (the C loop's) among small and empty ones, and batches of only
    big ones (written from the bodies themselves), crossing 1 MiB segments."""
    batches: list[Batch] = [(_bodies(SIZES * 3), props, queue_id, None),
                            (_bodies([65536] * 40), props, queue_id, None),
                            (_bodies([20000]), props, queue_id, None),
                            (_bodies([65536, 0]), props, queue_id, None)]
    _same(tmp_path, batches, monkeypatch)


@needs_c
@pytest.mark.parametrize("sizes", [[0, 1, 100, 1500, 5000], SIZES])
def test_a_sharding_key_per_body(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sizes: list[int]) -> None:
    """A sharding key per body (``--key-delimiter`` lines, ``send_many`` with keys): keys of
    different lengths, non-ASCII, and ``None`` (round robin) among them; small bodies too."""
    keys = ["a", None, "order-17", "ключ", "k" * 200, None, "x"]
    n = len(sizes) * 4
    for props in ({}, {"TAGS": "t", "KEYS": "q r", "p": "1"}):
        batches: list[Batch] = [(_bodies(sizes * 4), props, -1, [keys[i % len(keys)] for i in range(n)]),
                                (_bodies(sizes * 4), props, 2, [None if i % 3 else "s" for i in range(n)]),
                                (_bodies([7]), props, -1, ["one"])]
        _same(tmp_path / str(len(props)), batches, monkeypatch)


@needs_c
def test_the_largest_bodies_and_properties(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bodies of the store's maximum size (and one byte less), empty ones beside them, and
    properties at their limit (PROPLENGTH, a signed 16-bit length, full but for a few bytes)."""
    room = F.MAX_PROPERTIES_SIZE - F.CRC_PROPERTY_SIZE - len("UNIQ_KEY\x01") - 32 - len("\x02big\x01") - 1
    batches: list[Batch] = [(_bodies([MAX, 0, MAX - 1, 1]), {}, -1, None),
                            (_bodies([MAX, 70000]), {"big": "v" * room}, 3, None),
                            (_bodies([100, 20000, 0]), {"big": "v" * (room - 20)}, -1, ["k", None, "kk"])]
    _same(tmp_path, batches, monkeypatch, segment=16 << 20)


@needs_c
def test_more_bodies_than_one_millisecond_of_unique_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch of more than 65,536 bodies is framed in runs, each with its own key head."""
    n = 70_000
    _same(tmp_path, [(_bodies([3] * n, views=False), {"TAGS": "t"}, -1, [None if i % 2 else "k" for i in range(n)])],
          monkeypatch, segment=64 << 20)


@needs_c
def test_the_record_crc_is_combined_exactly() -> None:
    """frame_run combines the record CRC from its header's and its body's (a big body is read
    once): checked against zlib over every body length from 4 KiB (where it starts) to 4 KiB +
    300, and some big ones, by framing one record and reading its fields back."""
    for blen in [*range(4096, 4396), 65535, 65536, 1 << 20, MAX]:
        body = bytes((i * 7) & 0xFF for i in range(blen)) if blen < 70000 else b"\xa5" * blen
        nxt, cqb, offs, physs, hashes, parts = [0], [bytearray()], [], [], [], []
        framing_module._frame_native([body], 0, [0], None, b"\x02", b"\x01T", b"UNIQ_KEY\x01" + b"A" * 28, 9,
                                     zlib.crc32(b"#" + b"A" * 28), bytes(48), 0, 1 << 40, nxt, cqb, 0, offs,
                                     physs, hashes, parts, 1 << 40)
        rec = b"".join(bytes(p) for p in parts)
        assert int.from_bytes(rec[:4], "big") == len(rec)
        assert int.from_bytes(rec[8:12], "big") == zlib.crc32(body) & 0x7FFFFFFF
        digits = b"%010d" % (zlib.crc32(rec[:-F.CRC_PROPERTY_SIZE]) & 0x7FFFFFFF)
        assert rec[-F.CRC_PROPERTY_SIZE:] == b"__CRC32#\x01" + digits[::-1] + b"\x02", blen
        assert hashes == [zlib.crc32(b"#" + b"A" * 28 + b"0009") & 0x7FFFFFFF]


@needs_c
@pytest.mark.parametrize("queue_id", [-1, 5])
def test_small_bodies_in_batches_of_every_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               queue_id: int) -> None:
    """Batches of small bodies (the hundred-message batches of ``flush="sync"``; one body; a
    few, fewer than the topic's queues), with and without properties, crossing 1 MiB segments."""
    for k, props in enumerate(PROPS):
        batches: list[Batch] = [(_bodies([100] * n), props, queue_id, None) for n in (1, 2, 3, 15, 16, 100, 700)]
        batches += [(_bodies([0, 5, 100, 1500, 2047] * 300), props, queue_id, None)] * 3
        _same(tmp_path / str(k), batches, monkeypatch)


def test_the_c_loop_frames_where_it_is_built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the extension is built (test_nativecheck.py: wherever a compiler is), every batch
    is framed by it, a hundred small bodies as well as big bodies and sharding keys;
    elsewhere by the Python loops alone."""
    from store.log import columns
    if not columns.NATIVE:
        assert framing_module._frame_native is None
        return
    from store.log import nativecheck
    assert framing_module._frame_native is nativecheck.frame_run
    calls = []

    def spy(bodies, *rest):
        calls.append(len(bodies))
        return nativecheck.frame_run(bodies, *rest)
    monkeypatch.setattr(framing_module, "_frame_native", spy)
    store = open_store(tmp_path, commitlog_segment_size=1 << 20)
    try:
        for n in (100, 2, 1):
            store.put_bodies("T", [b"x" * 100] * n)
    finally:
        store.close()
    assert calls == [100, 2, 1]
