"""The on-disk format (store/log/format.py) pinned down: struct sizes, constants and golden bytes.

Each golden value is built twice: once independently from the spec's field table (plain
``int.to_bytes``), once by the code under test; both must equal the literal, so a change to
the format cannot slip through by changing the encoder and the test's helper together.
"""
from __future__ import annotations

import zlib

from store.log import format as F
from store.log.checkpoint import Checkpoint
from store.log.checkpoint import read as read_checkpoint
from store.log.checkpoint import write as write_checkpoint
from store.log.consumequeue import pack_entry
from store.log.record import decode, decode_offset_msg_id, encode, java_hash, offset_msg_id


def be(n: int, width: int, signed: bool = True) -> bytes:
    return n.to_bytes(width, "big", signed=signed)


# -- struct sizes and constants ----------------------------------------------------------------

def test_struct_sizes_match_the_spec() -> None:
    assert F.RECORD_HEADER.size == 88          # TOTALSIZE .. BODYLENGTH
    assert F.RECORD_FIXED_SIZE == 91           # + topic length byte + properties length short
    assert F.BLANK_TRAILER.size == 8
    assert F.CQ_ENTRY.size == F.CQ_ENTRY_SIZE == 20
    assert F.INDEX_HEADER.size == F.INDEX_HEADER_SIZE == 40
    assert F.INDEX_ENTRY.size == F.INDEX_ENTRY_SIZE == 20
    assert F.INDEX_SLOT.size == 4
    assert F.CHECKPOINT.size == 64
    assert F.CRC_PROPERTY_SIZE == len("__CRC32#") + 1 + 10 + 1 == 20
    assert F.INDEX_FILE_SIZE == 40 + F.INDEX_SLOTS * 4 + F.INDEX_ENTRIES * 20


def test_constants_match_rocketmq() -> None:
    assert F.MAGIC_V1 == 0xDAA320A7
    assert F.MAGIC_V2 == 0xDAA320AB
    assert F.BLANK_MAGIC == 0xCBD43194
    assert F.END_FILE_MIN_BLANK == 8
    assert F.MAX_MESSAGE_SIZE == 4 * 1024 * 1024
    assert F.MAX_PROPERTIES_SIZE == 32767
    assert (F.OFF_QUEUE_OFFSET, F.OFF_PHYSICAL_OFFSET, F.OFF_SYSFLAG, F.OFF_STORE_TIMESTAMP) == (20, 28, 36, 56)
    assert (F.TX_NOT, F.TX_PREPARED, F.TX_COMMIT, F.TX_ROLLBACK, F.TX_MASK) == (0, 4, 8, 12, 12)
    assert F.segment_name(1073741824) == "00000000001073741824"


def test_rocketmq_crc_and_java_hash_vectors() -> None:
    # the reference's JVM-verified examples
    assert F.crc(b"Hello RocketMQ") == 1774740973
    assert java_hash("TagA") == 2598919
    assert java_hash("TagB") == 2598920
    assert java_hash("*") == 42
    assert java_hash("TopicTest#KEY1") == -1656969516
    assert java_hash("") == 0
    # UTF-16 code units, not code points: a non-BMP char counts as its surrogate pair
    assert java_hash("\U0001F600") == (31 * 0xD83D + 0xDE00)


def test_offset_msg_id_shape() -> None:
    # the reference's example: 127.0.0.1:10911, offset 1073741947
    assert offset_msg_id(1073741947) == "7F00000100002A9F000000004000007B"
    assert decode_offset_msg_id("7F00000100002A9F000000004000007B") == 1073741947
    assert decode_offset_msg_id("7f00000100002a9f000000004000007b") == 1073741947
    assert decode_offset_msg_id("0A00000100002A9F000000004000007B") is None
    assert decode_offset_msg_id("7F00000100002A9F") is None


# -- one record, golden bytes -----------------------------------------------------------------

GOLDEN_RECORD = bytes.fromhex(
    "00000098daa320a769c865ed000000020000000000000000000000050000000000000400000000000000018b"
    "cfe568007f000001000010920000018bcfe5687b7f00000100002a9f0000000000000000000000000000000e"
    "48656c6c6f20526f636b65744d5109546f7069635465737400264b455953016b310254414753015461674102"
    "5f5f435243333223013131333730313136323102"
)
PROPS = b"KEYS\x01k1\x02TAGS\x01TagA\x02"


def spec_record() -> bytes:
    """The record built from the spec's field table, independently of store.log.record."""
    body, topic = b"Hello RocketMQ", b"TopicTest"
    total = 91 + len(body) + len(topic) + len(PROPS) + 20
    assert total == 132 + 20  # the reference's worked example, plus our record-CRC property
    head = b"".join([
        be(total, 4), be(0xDAA320A7, 4, False), be(zlib.crc32(body) & 0x7FFFFFFF, 4),
        be(2, 4),                        # queue id
        be(0, 4),                        # flag
        be(5, 8),                        # queue offset
        be(1024, 8),                     # physical offset
        be(0, 4),                        # sysflag
        be(1700000000000, 8),            # born timestamp
        bytes([127, 0, 0, 1]), be(4242, 4),
        be(1700000000123, 8),            # store timestamp
        bytes([127, 0, 0, 1]), be(10911, 4),
        be(0, 4),                        # reconsume times
        be(0, 8),                        # prepared tx offset
        be(len(body), 4), body,
        bytes([len(topic)]), topic,
        be(len(PROPS) + 20, 2), PROPS,
    ])
    digits = f"{zlib.crc32(head) & 0x7FFFFFFF:010d}"[::-1].encode()
    return head + b"__CRC32#\x01" + digits + b"\x02"


def golden_encode() -> bytes:
    return encode(b"TopicTest", b"Hello RocketMQ", PROPS, queue_id=2, queue_offset=5,
                  physical_offset=1024, store_timestamp=1700000000123,
                  born_timestamp=1700000000000, born_port=4242)


def test_record_golden_bytes() -> None:
    assert spec_record() == GOLDEN_RECORD
    assert golden_encode() == GOLDEN_RECORD
    assert len(GOLDEN_RECORD) == 152


def test_golden_record_fields_sit_at_the_documented_offsets() -> None:
    r = GOLDEN_RECORD
    assert int.from_bytes(r[F.OFF_QUEUE_OFFSET:F.OFF_QUEUE_OFFSET + 8], "big") == 5
    assert int.from_bytes(r[F.OFF_PHYSICAL_OFFSET:F.OFF_PHYSICAL_OFFSET + 8], "big") == 1024
    assert int.from_bytes(r[F.OFF_SYSFLAG:F.OFF_SYSFLAG + 4], "big") == 0
    assert int.from_bytes(r[F.OFF_STORE_TIMESTAMP:F.OFF_STORE_TIMESTAMP + 8], "big") == 1700000000123
    assert r[84:88] == be(14, 4) and r[88:102] == b"Hello RocketMQ"


def test_golden_record_decodes() -> None:
    m = decode(GOLDEN_RECORD, 0, len(GOLDEN_RECORD))
    assert (m.topic, m.queue_id, m.queue_offset, m.commitlog_offset, m.size) == ("TopicTest", 2, 5, 1024, 152)
    assert m.body == b"Hello RocketMQ"
    assert m.properties == {"KEYS": "k1", "TAGS": "TagA"}
    assert (m.born_timestamp, m.store_timestamp, m.born_host) == (1700000000000, 1700000000123, "127.0.0.1:4242")
    assert m.keys == ["k1"] and m.tags == "TagA"
    assert m.msg_id == "7F00000100002A9F0000000000000400"


def test_blank_trailer_bytes() -> None:
    assert F.BLANK_TRAILER.pack(100, F.BLANK_MAGIC) == bytes.fromhex("00000064cbd43194")


# -- consume-queue entry ----------------------------------------------------------------------

def test_cq_entry_golden_bytes() -> None:
    got = pack_entry(1024, 152, java_hash("TagA"))
    assert got == be(1024, 8) + be(152, 4) + be(2598919, 8)
    assert got == bytes.fromhex("000000000000040000000098000000000027a807")


def test_cq_entry_negative_tags_code_is_sign_extended() -> None:
    code = java_hash("TopicTest#KEY1")
    assert pack_entry(0, 1, code)[12:] == be(code, 8) == bytes.fromhex("ffffffff9d3ca6d4")


# -- checkpoint -------------------------------------------------------------------------------

GOLDEN_CHECKPOINT = bytes.fromhex(
    "4d51434b0000000100000000000000980000018bcfe5687b0000000000000000000102030405060708090a0b"
    "0c0d0e0f0000000000000000000000007b11e0e8"
)


def test_checkpoint_golden_bytes() -> None:
    cp = Checkpoint(written_end=152, last_store_ts=1700000000123, synced_end=0, boot_id=bytes(range(16)))
    body = (be(0x4D51434B, 4) + be(1, 4) + be(152, 8) + be(1700000000123, 8) + be(0, 8)
            + bytes(range(16)) + bytes(12))
    assert len(body) == 60
    spec = body + be(zlib.crc32(body) & 0x7FFFFFFF, 4)
    assert spec == GOLDEN_CHECKPOINT
    assert cp.pack() == GOLDEN_CHECKPOINT


def test_checkpoint_round_trip_and_rejects_damage(tmp_path) -> None:
    p = tmp_path / "checkpoint"
    cp = Checkpoint(written_end=152, last_store_ts=1700000000123, synced_end=100, boot_id=bytes(range(16)))
    write_checkpoint(p, cp)
    assert read_checkpoint(p) == cp
    raw = bytearray(p.read_bytes())
    for i in range(64):
        bad = bytearray(raw)
        bad[i] ^= 0x40
        p.write_bytes(bytes(bad))
        assert read_checkpoint(p) is None, f"a flipped byte {i} of the checkpoint was accepted"
    p.write_bytes(bytes(raw[:40]))
    assert read_checkpoint(p) is None
    p.unlink()
    assert read_checkpoint(p) is None
