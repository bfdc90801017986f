"""Bulk reads (store/bulk.py) and the Arrow columns built from them (store/arrowcols.py):
the same messages, fields and damage reports as the per-message path, across segments."""
from __future__ import annotations

from pathlib import Path

import pytest

from store import format as F
from store.bulk import pull_columns
from store.record import Draft
from storetestutil import open_store

pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from store.spark import SCHEMA, ColumnPlan  # noqa: E402


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
            cols = pull_columns(s, "T", q, off, 37, 1 << 20, with_phys=True)
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
    cols = pull_columns(s, "T", 0, 0, 100)
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
    cols = pull_columns(s, "T", 0, 0, 10, with_phys=True)
    # a record written without a unique key (older writers, other tools) gets its offset id
    cols.props[0] = b"TAGS\x01a\x02"
    batch = plan.bulk_batch(cols, "T", 0)
    assert batch.column("tags").to_pylist() == ["a"]
    assert batch.column("msgId").to_pylist() == [s.pull("T", 0, 0, 1).messages[0].msg_id]
    s.close()
