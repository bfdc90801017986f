"""The producer's batch encoder (store/log/framing.py) on big bodies: every record exactly in
the format of format.py (BODYCRC = CRC of the body, ``__CRC32#`` = CRC of every byte before
it), whichever CRC path (a second pass, or combined from the body's CRC) made it."""
from __future__ import annotations

import zlib
from pathlib import Path

import pytest

from store.log import arrayframing
from store.log import format as F
from store.log import framing as framing_module
from store.log.results import BatchResult
from tests.log.storetestutil import all_messages, open_store

M = 0x7FFFFFFF


def _check_raw(store, m) -> None:
    raw = store.commitlog.read_bytes(m.commitlog_offset, 1 << 23)
    total = int.from_bytes(raw[:4], "big")
    rec = raw[:total]
    blen = int.from_bytes(rec[84:88], "big")
    body = rec[88:88 + blen]
    assert body == m.body
    assert int.from_bytes(rec[8:12], "big") == zlib.crc32(body) & M
    digits = b"%010d" % (zlib.crc32(rec[:-F.CRC_PROPERTY_SIZE]) & M)
    assert rec[-F.CRC_PROPERTY_SIZE:] == b"__CRC32#\x01" + digits[::-1] + b"\x02"


@pytest.mark.parametrize("combine", [True, False])
def test_big_bodies_are_encoded_exactly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, combine: bool) -> None:
    if not combine:
        monkeypatch.setattr(framing_module, "_combiner", lambda: None)
    else:   # (with ISA-L's CRC a handle combines only after many messages)
        monkeypatch.setattr(framing_module, "_COMBINE_AFTER", 0)
    store = open_store(tmp_path / "s", commitlog_segment_size=1 << 20)
    try:
        sizes = [2048, 4096, 100, 16384, 70000, 3, 65536, 4096, 300_000, 16383, 0, 20000] * 6
        data = b"".join(bytes([i % 251]) * s for i, s in enumerate(sizes))
        mv = memoryview(data)
        bodies, p = [], 0
        for i, s in enumerate(sizes):
            bodies.append(mv[p:p + s] if i % 2 else bytes(mv[p:p + s]))
            p += s
        res = store.put_bodies("T", bodies, properties={"TAGS": "tg", "KEYS": "k1 k2", "x": "y"})
        assert len(res) == len(sizes) and len(set(res.uniq_keys)) == len(sizes)
        got = sorted(all_messages(store, "T"), key=lambda m: m.commitlog_offset)
        assert [m.body for m in got] == [bytes(b) for b in bodies]
        assert [m.commitlog_offset for m in got] == res.commitlog_offsets
        assert len(store.commitlog.segments()) >= 3   # the batch crossed segments
        for m, uk, qid, qoff in zip(got, res.uniq_keys, res.queue_ids, res.queue_offsets):
            assert (m.uniq_key, m.queue_id, m.queue_offset) == (uk, qid, qoff)
            assert m.tags == "tg" and m.keys == ["k1", "k2"] and m.user_properties == {"x": "y"}
            _check_raw(store, m)
        assert store.find(res.uniq_keys[7]).body == bytes(bodies[7])
        assert [m.body for m in store.query_key("T", "k1", limit=3)] == [bytes(b) for b in bodies[-3:]][::-1]
    finally:
        store.close()


def test_combiner_matches_zlib() -> None:
    comb = framing_module._combiner()
    if comb is None:
        pytest.skip("zlib without crc32_combine_gen/op")
    gen, op = comb
    a, b = b"head" * 22, bytes(range(256)) * 300
    assert op(zlib.crc32(a), zlib.crc32(b), gen(len(b))) == zlib.crc32(a + b)


def _log_and_queues(root: Path, framing: str, sizes: list[int], queue_id: int, props: dict,
                    monkeypatch: pytest.MonkeyPatch, batch: int = 700) -> tuple[bytes, dict]:
    """The commit log and consume queues after ``sizes`` were sent in batches of ``batch``,
    framed as ``arrays`` (numpy), ``small`` (the C-iteration path where it applies) or
    ``loop`` (record by record), the Python paths; or ``native``, the C loop where it is built
    (``nativecheck.frame_run``, which frames every batch there)."""
    import time as _time
    if framing != "native":
        monkeypatch.setattr(framing_module, "_frame_native", None)
    monkeypatch.setattr(arrayframing, "_ARRAYS_MIN_BATCH", 1 if framing == "arrays" else 10 ** 9)
    monkeypatch.setattr(arrayframing, "_ARRAYS_MAX_AVG", 1 << 40)   # arrays for every size
    monkeypatch.setattr(arrayframing, "_ARRAYS_AFTER", 0)
    if framing == "loop":
        monkeypatch.setattr(framing_module, "_frame_small", lambda *a: None)
    else:   # the C-iteration path for batches of any size (a few records go by the loop)
        monkeypatch.setattr(framing_module, "_SMALL_FROM", 1)
    store = open_store(root, commitlog_segment_size=1 << 20)
    try:
        store.engine.writer.round_robin["T"] = 0
        store.uniq_keys.counter = 65530          # the key counter wraps inside the first batch
        store.uniq_keys.prefix = "7F0000010001DEADBEEF"[:len(store.uniq_keys.prefix)]
        monkeypatch.setattr(_time, "time", lambda: 1_700_000_000.0)
        bodies = [bytes([65 + i % 26]) * k for i, k in enumerate(sizes)]
        for i in range(0, len(bodies), batch):
            store.put_bodies("T", bodies[i:i + batch], properties=props, queue_id=queue_id)
        monkeypatch.undo()
        for m in all_messages(store, "T"):
            _check_raw(store, m)
    finally:
        store.close()
    log = b"".join(p.read_bytes() for p in sorted((root / "commitlog").iterdir()))
    cqs = {str(p.relative_to(root)): p.read_bytes() for p in sorted((root / "consumequeue").rglob("*")) if p.is_file()}
    return log, cqs


@pytest.mark.parametrize("sizes,queue_id,props", [
    ([100] * 3000, -1, {}),
    ([5, 0, 3000, 100, 15000] * 500, -1, {"TAGS": "a", "KEYS": "x y"}),   # crosses segments
    ([1024] * 2000, 3, {}),
    ([4096] * 1000, -1, {"u": "v"}),
])
def test_array_framing_writes_the_same_bytes_as_the_loops(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          sizes: list[int], queue_id: int, props: dict) -> None:
    pytest.importorskip("numpy")
    a = _log_and_queues(tmp_path / "a", "arrays", sizes, queue_id, props, monkeypatch)
    b = _log_and_queues(tmp_path / "b", "loop", sizes, queue_id, props, monkeypatch)
    assert a[0] == b[0] and a[1] == b[1]
    if framing_module._frame_native is not None:   # (big batches of small bodies go to C where built)
        c = _log_and_queues(tmp_path / "c", "native", sizes, queue_id, props, monkeypatch)
        assert c[0] == b[0] and c[1] == b[1]


@pytest.mark.parametrize("batch", [3, 100, 700])
@pytest.mark.parametrize("queue_id,props", [(-1, {}), (5, {"TAGS": "a", "KEYS": "x y"})])
def test_small_body_framing_writes_the_same_bytes_as_the_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              batch: int, queue_id: int, props: dict) -> None:
    """Small bodies framed by C iterations (``_frame_small``): byte for byte the per-record
    loop's, round robin (batches smaller than the topic's 8 queues too) or one queue, key
    counters wrapping, batches that cross a segment's end (which fall back to the loop)."""
    sizes = [100, 0, 37, 1500, 100] * 1500
    a = _log_and_queues(tmp_path / "a", "small", sizes, queue_id, props, monkeypatch, batch)
    b = _log_and_queues(tmp_path / "b", "loop", sizes, queue_id, props, monkeypatch, batch)
    assert a[0] == b[0] and a[1] == b[1]
    if framing_module._frame_native is not None:   # the C loop where built: the same bytes
        c = _log_and_queues(tmp_path / "c", "native", sizes, queue_id, props, monkeypatch, batch)
        assert c[0] == b[0] and c[1] == b[1]
    assert len(list((tmp_path / "a" / "commitlog").iterdir())) >= 2


def test_mid_size_bodies_framed_by_c_iterations_are_the_bytes_of_the_big_loop(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """With ISA-L's CRC, bodies of 2-16 KiB are framed by C iterations (``_frame_small``) too:
    log and queues byte for byte those of the big-body loop that framed them before."""
    sizes = [4096, 2048, 8000, 16383, 3000] * 300
    logs = []
    for name, below in (("small", framing_module._JOIN_BELOW), ("big", framing_module._BIG_BODY)):
        monkeypatch.setattr(framing_module, "_JOIN_BELOW", below)
        logs.append(_log_and_queues(tmp_path / name, "small", sizes, -1, {"TAGS": "t"}, monkeypatch, 100))
    assert logs[0][0] == logs[1][0] and logs[0][1] == logs[1][1]
    assert len(list((tmp_path / "small" / "commitlog").iterdir())) >= 3


def test_big_bodies_written_from_themselves_are_the_same_bytes_as_copied(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch of big bodies is written from the bodies (pwritev, no copy into the batch
    buffer): the log and queues are byte for byte those of the copying path, across segments."""
    sizes = [40000, 65536, 100000, 32768, 65536] * 12
    logs = []
    for write_from in (32768, 1 << 40):
        monkeypatch.setattr(framing_module, "_WRITE_FROM_BODIES", write_from)
        logs.append(_log_and_queues(tmp_path / str(write_from), "loop", sizes, -1, {"TAGS": "t"}, monkeypatch))
    assert logs[0][0] == logs[1][0] and logs[0][1] == logs[1][1]
    assert len(list((tmp_path / "32768" / "commitlog").iterdir())) >= 3


@pytest.mark.parametrize("native", [True, False])
@pytest.mark.parametrize("first,n", [(65_500, 1000), (0, 600), (7, 5), (65_535, 1), (3, 0)])
def test_a_batchs_unique_keys_end_in_its_counters_wrapping_at_16_bits(first: int, n: int, native: bool,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The keys as results.py's Python loops make them, and as ``nativecheck.unique_keys``
    does where it is built."""
    from store.log import results
    if not native:
        monkeypatch.setattr(results, "_unique_keys", None)
    elif results._unique_keys is None:
        pytest.skip("the C module is not built (tests/log/test_nativecheck.py says why)")
    r = BatchResult("T", [0] * n, list(range(n)), list(range(n)), 0, "ABC", first)
    assert r.uniq_keys == [f"ABC{(first + i) & 0xFFFF:04X}" for i in range(n)]
