"""Bulk reads (store/log/columns.py) and the Arrow columns built from them (store/spark/arrowcols.py):
the same messages, fields and damage reports as the per-message path, across segments."""
from __future__ import annotations

from pathlib import Path

import pytest

from store.log import format as F
from store.log.record import Draft
from tests.log.storetestutil import open_store

pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from store.spark.read import ColumnPlan  # noqa: E402
from store.spark.schema import SCHEMA  # noqa: E402


def drafts(n: int) -> list[Draft]:
    out = []
    for i in range(n):
        props: dict[str, str] = {}
        if i % 2:
            props["TAGS"] = f"tag{i % 3}"
        if i % 3 == 0:
            props["KEYS"] = f" k{i}  shared "
        if i % 4 == 0:
            props["colour"] = "grün" if i % 8 else "a=b\tc"
            props["n"] = str(i)
        out.append(Draft("T", bytes([i % 256]) * (i * 53 % 3000), props, queue_id=i % 2))
    return out


def test_columns_match_messages_across_segments(tmp_path: Path) -> None:
    s = open_store(tmp_path / "s", commitlog_segment_size=64 * 1024)
    s.create_topic("T", 2)
    s.put(drafts(200))
    assert len(s.commitlog.segments()) > 3
    plan = ColumnPlan(SCHEMA)
    for q in (0, 1):
        msgs = list(s.iter_queue("T", q, 0))
        got = {name: [] for name in plan.names}
        off, pulls = 0, 0
        while off < s.max_offset("T", q):
            cols = s.pull_columns("T", q, off, 37, 1 << 20, with_phys=True)
            assert not cols.damaged and cols.offsets == list(range(off, cols.next_offset))
            assert cols.phys == [m.commitlog_offset for m in msgs[off:cols.next_offset]]
            batch = plan.bulk_batch(cols, "T", q)
            assert batch.schema == plan.target
            for name in plan.names:
                got[name] += batch.column(name).to_pylist()
            off, pulls = cols.next_offset, pulls + 1
        want = plan.batch(msgs)
        for name in plan.names:
            assert got[name] == want.column(name).to_pylist(), name
        assert pulls > 100 // 37   # runs were cut at segment ends, nothing skipped
    s.close()


def test_columns_report_damage_like_pull(tmp_path: Path) -> None:
    s = open_store(tmp_path / "s")
    s.create_topic("T", 1)
    s.put([Draft("T", b"m%d" % i, {"KEYS": "k"}) for i in range(10)])
    victim = s.pull("T", 0, 4, 1).messages[0]
    seg = s.commitlog.segment_path(0)
    data = bytearray(seg.read_bytes())
    data[victim.commitlog_offset + F.RECORD_HEADER_SIZE] ^= 0xFF   # first body byte
    seg.write_bytes(bytes(data))
    cols = s.pull_columns("T", 0, 0, 100)
    assert [q for q, _ in cols.damaged] == [q for q, _ in s.pull("T", 0, 0, 100).damaged] == [4]
    assert "CRC" in cols.damaged[0][1]
    assert cols.offsets == [0, 1, 2, 3, 5, 6, 7, 8, 9] and cols.next_offset == 10
    assert cols.bodies == [b"m%d" % i for i in cols.offsets]
    s.close()


def test_user_schema_subset_and_msgid_fallback(tmp_path: Path) -> None:
    from pyspark.sql.types import StringType, StructField, StructType
    s = open_store(tmp_path / "s")
    s.create_topic("T", 1)
    s.put([Draft("T", b"x", {"TAGS": "a"})])
    plan = ColumnPlan(StructType([StructField("tags", StringType()), StructField("msgId", StringType())]))
    cols = s.pull_columns("T", 0, 0, 10, with_phys=True)
    # a record written without a unique key (older writers, other tools) gets its offset id
    cols.props[0] = b"TAGS\x01a\x02"
    batch = plan.bulk_batch(cols, "T", 0)
    assert batch.column("tags").to_pylist() == ["a"]
    assert batch.column("msgId").to_pylist() == [s.pull("T", 0, 0, 1).messages[0].msg_id]
    s.close()


def test_vector_read_matches_the_exact_path_or_declines(tmp_path: Path) -> None:
    pytest.importorskip("numpy")
    s = open_store(tmp_path / "s", commitlog_segment_size=64 * 1024)
    s.create_topic("T", 2)
    s.put(drafts(200))
    plan = ColumnPlan(SCHEMA)
    for q in (0, 1):
        off, vec_runs = 0, 0
        while off < s.max_offset("T", q):
            exact = s.pull_columns("T", q, off, 37, 1 << 20, with_phys=True)
            vec = s.pull_vector("T", q, off, 37, 1 << 20)
            if vec is not None:   # declined only where a run leaves its segment
                vec_runs += 1
                assert vec.next_offset == exact.next_offset
                assert vec.phys.tolist() == exact.phys
                a, b = plan.bulk_batch(vec, "T", q), plan.bulk_batch(exact, "T", q)
                assert a.equals(b)
            off = exact.next_offset
        assert vec_runs >= 1
    # a damaged record anywhere in a run: the vector path declines, the exact one names it
    s.create_topic("D", 1)
    s.put([Draft("D", b"m%d" % i, {}) for i in range(10)])
    assert s.pull_vector("D", 0, 0, 100, 1 << 20) is not None
    victim = s.pull("D", 0, 6, 1).messages[0]
    seg = s.commitlog.segment_path(s.commitlog.segment_of(victim.commitlog_offset))
    data = bytearray(seg.read_bytes())
    data[victim.commitlog_offset - s.commitlog.segment_of(victim.commitlog_offset) + F.RECORD_HEADER_SIZE] ^= 1
    seg.write_bytes(bytes(data))
    assert s.pull_vector("D", 0, 0, 100, 1 << 20) is None
    assert s.pull_vector("D", 0, 0, 6, 1 << 20) is not None     # the run before it is fine
    assert [q for q, _ in s.pull_columns("D", 0, 0, 100).damaged] == [6]
    # max_bytes: the run stops after the record that reaches it, as the exact path
    assert len(s.pull_vector("D", 0, 0, 6, 1)) == len(s.pull_columns("D", 0, 0, 6, 1)) == 1
    s.close()


RAW_PROPS = [
    b"", b"TAGS\x01a\x02", b"UNIQ_KEY\x01U1\x02KEYS\x01 k1  k2\x02colour\x01red\x02",
    b"\x01novalue-name\x02", b"noval\x01\x02", b"x\x01y\x01z\x02",          # empty name/value; 0x01 in a value
    b"TAGS\x01first\x02TAGS\x01second\x02", b"trailing\x01piece", b"n\x01\xff\xfe\x02",
    b"\x02\x02", b"caf\xc3\xa9\x01\xe2\x82\xac\x02__CRC32#\x01x\x02",
]


COMMON_SHAPE = [b"", b"TAGS\x01a\x02", b"\x01novalue-name\x02", b"noval\x01\x02", b"TAGS\x01first\x02TAGS\x01second\x02",
                b"caf\xc3\xa9\x01\xe2\x82\xac\x02__CRC32#\x01x\x02", b"", b"colour\x01red\x02KEYS\x01 k1  k2\x02"]


@pytest.mark.parametrize("rows,fast", [(RAW_PROPS, False), (COMMON_SHAPE, True), ([b"", b""], False),
                                       ([b"TAGS\x01t\x02UNIQ_KEY\x01u%d\x02" % i for i in range(5)], True)])
def test_property_columns_match_parse_properties(rows: list[bytes], fast: bool) -> None:
    """Both ways of splitting (numpy for the common shape, Arrow kernels for any bytes) give
    what record.parse_properties gives, per row."""
    import pyarrow as pa

    from store.log.record import RESERVED_PROPERTIES, parse_properties
    from store.spark.arrowcols import _Props
    raw = pa.array(rows, pa.binary())
    probe = _Props.__new__(_Props)
    probe.n = len(rows)
    assert probe._split_fast(raw) is fast
    props = _Props(raw)
    want = [parse_properties(r.decode("utf-8", "replace")) for r in rows]
    for name in ("TAGS", "KEYS", "UNIQ_KEY", "colour", "x", "n", "café"):
        assert props.get(name).to_pylist() == [w.get(name) for w in want], name
    assert [dict(m) for m in props.user().to_pylist()] == [
        {k: v for k, v in w.items() if k not in RESERVED_PROPERTIES} for w in want]


def test_vector_read_of_a_queue_among_many_cuts_runs_instead_of_declining(tmp_path: Path) -> None:
    """With many queues a queue's records are sparse in the log: the one read per run must
    stay within max_bytes, so the run is shortened (never refused, never over-read)."""
    pytest.importorskip("numpy")
    s = open_store(tmp_path / "s")
    s.create_topic("S", 16)
    s.put([Draft("S", b"x%03d" % i, {}, queue_id=i % 16) for i in range(320)])
    off, runs = 0, 0
    while off < 20:
        vec = s.pull_vector("S", 3, off, 100, 2000)
        assert vec is not None and len(vec) >= 1
        assert vec.bodies.to_pylist() == [m.body for m in s.pull("S", 3, off, len(vec)).messages]
        off, runs = vec.next_offset, runs + 1
    assert runs > 1
    s.close()


def test_an_entry_pointing_back_into_the_run_is_reported_by_every_reader(tmp_path: Path) -> None:
    """A damaged consume-queue entry may point before the first record of its run: each
    reader finds its record in the log instead (never reads outside its span, never crashes,
    never skips the message)."""
    s = open_store(tmp_path / "s")
    s.create_topic("T", 1)
    s.create_topic("U", 1)
    s.put([Draft("U", b"u0", {})])
    s.put([Draft("T", b"t%d" % i, {}) for i in range(6)])
    u0 = s.pull("U", 0, 0, 1).messages[0]
    cq = s.queue("T", 0).segment_path(0)
    raw = bytearray(cq.read_bytes())
    raw[3 * 20:4 * 20] = F.CQ_ENTRY.pack(u0.commitlog_offset, u0.size, 0)
    cq.write_bytes(bytes(raw))
    for read in (lambda: s.pull("T", 0, 2, 10), lambda: s.pull_columns("T", 0, 2, 10)):
        got = read()
        assert got.damaged == [] and got.next_offset == 6
        bodies = [m.body for m in got.messages] if hasattr(got, "messages") else list(got.bodies)
        assert bodies == [b"t2", b"t3", b"t4", b"t5"]
    s.close()


def test_extend_appends_every_column_and_takes_the_later_ends() -> None:
    """Columns.extend joins two runs of one queue: a column added later must be joined too."""
    import dataclasses

    from store.log.columns import Columns

    def run(first: int) -> Columns:
        kw: dict = {}
        for f in dataclasses.fields(Columns):
            kw[f.name] = first + 10 if f.name in ("next_offset", "max_offset") else [f"{f.name}{first}"]
        return Columns(**kw)
    a, b = run(0), run(1)
    a.extend(b)
    for f in dataclasses.fields(Columns):
        want = 11 if f.name in ("next_offset", "max_offset") else [f"{f.name}0", f"{f.name}1"]
        assert getattr(a, f.name) == want, f.name
