"""The per-record check of store/log/columns.py (runs too short for the array path, a queue's
records among other queues' ones, as a member of a big group reads them): the same fields as
the per-message path, and every byte of a record's CRC property checked, with the same damage
report as ``pull``."""
from __future__ import annotations

from pathlib import Path

import pytest

from store.log import format as F
from store.log.messagestore import Store
from store.log.record import Draft
from tests.log.storetestutil import open_store

QUEUES = 4
pytestmark = pytest.mark.usefixtures("each_loop")


@pytest.fixture
def interleaved(tmp_path: Path) -> Store:
    s = open_store(tmp_path / "s")
    s.create_topic("T", QUEUES)
    s.put([Draft("T", b"body-%d" % i, {"KEYS": f"k{i}", "TAGS": "t"} if i % 3 else {}, queue_id=i % QUEUES)
           for i in range(40)])
    return s


def test_records_come_with_the_fields_of_their_messages(interleaved: Store) -> None:
    s = interleaved
    for q in range(QUEUES):
        msgs = s.pull("T", q, 0, 100).messages
        cols = s.pull_records("T", q, 0, 100)
        assert not cols.damaged and cols.offsets == [m.queue_offset for m in msgs] == list(range(10))
        assert cols.bodies == [m.body for m in msgs]
        assert cols.born == [m.born_timestamp for m in msgs]
        assert cols.stored == [m.store_timestamp for m in msgs]
        assert cols.reconsume == [m.reconsume_times for m in msgs]
        assert cols.phys == [m.commitlog_offset for m in msgs]
        assert cols.props == [m._props_raw for m in msgs]
        assert s.pull_bodies("T", q, 0, 100).bodies == cols.bodies


@pytest.mark.parametrize("at", range(F.CRC_PROPERTY_SIZE))
def test_every_byte_of_the_crc_property_is_checked(interleaved: Store, at: int) -> None:
    """The record CRC property (``__CRC32#`` 0x01, ten digits, 0x02) is not covered by the
    record CRC itself: a change in any of its bytes is damage, at the offset ``pull`` names
    (the reason is told as the bulk check sees it: a CRC that does not match)."""
    s = interleaved
    victim = s.pull("T", 1, 4, 1).messages[0]
    end = victim.commitlog_offset + victim.size
    seg = s.commitlog.segment_path(0)
    data = bytearray(seg.read_bytes())
    data[end - F.CRC_PROPERTY_SIZE + at] ^= 0x01
    seg.write_bytes(bytes(data))
    want = s.pull("T", 1, 0, 100)
    assert [q for q, _ in want.damaged] == [4]
    for cols in (s.pull_records("T", 1, 0, 100), s.pull_bodies("T", 1, 0, 100)):
        assert [q for q, _ in cols.damaged] == [4] and "CRC" in cols.damaged[0][1]
        assert cols.offsets == [0, 1, 2, 3, 5, 6, 7, 8, 9]
        assert cols.bodies == [m.body for m in want.messages]
