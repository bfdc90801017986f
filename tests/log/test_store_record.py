"""store/log/record.py: encode/decode round trip, and that decode's CRC checks catch any damage."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from store.log import format as F
from store.log.record import (
    RecordError,
    UniqKeyGenerator,
    counter_hex,
    decode,
    encode,
    encode_properties,
    parse_properties,
    property_problem,
    record_size_at,
)

NAME_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_%|-"

topics = st.text(NAME_ALPHABET, min_size=1, max_size=127)
# property names and values: any text without the two separators, non-empty (RocketMQ's parser
# drops empty names and values), including non-ASCII
prop_text = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
                    min_size=1, max_size=20)
props = st.dictionaries(prop_text, prop_text, max_size=6)
bodies = st.one_of(st.just(b""), st.binary(max_size=600), st.binary(min_size=4000, max_size=5000))
ints32 = st.integers(0, 2**31 - 1)
ints63 = st.integers(0, 2**63 - 1)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topic=topics, body=bodies, properties=props, queue_id=st.integers(0, 1023), queue_offset=ints63,
       phys=ints63, store_ts=ints63, born_ts=ints63, port=ints32, flag=ints32, sysflag=st.sampled_from([0, 4, 8, 12]),
       reconsume=st.integers(0, 10_000), prepared=ints63, lead=st.binary(max_size=8))
def test_encode_decode_round_trip(topic, body, properties, queue_id, queue_offset, phys, store_ts, born_ts,
                                  port, flag, sysflag, reconsume, prepared, lead) -> None:
    rec = encode(topic.encode(), body, encode_properties(properties), queue_id, queue_offset, phys,
                 store_ts, born_ts, port, flag, sysflag, reconsume, prepared)
    assert len(rec) == 91 + len(body) + len(topic.encode()) + len(encode_properties(properties)) + 20
    # decode at an arbitrary position inside a larger buffer, with trailing bytes after it
    buf = lead + rec + b"\xff" * 7
    m = decode(buf, len(lead), len(buf))
    assert m.size == len(rec)
    assert m.topic == topic and m.body == body and m.properties == properties
    assert (m.queue_id, m.queue_offset, m.commitlog_offset) == (queue_id, queue_offset, phys)
    assert (m.store_timestamp, m.born_timestamp, m.flag, m.sysflag) == (store_ts, born_ts, flag, sysflag)
    assert (m.reconsume_times, m.prepared_tx_offset) == (reconsume, prepared)
    assert m.born_host == f"127.0.0.1:{port}"
    assert record_size_at(buf, len(lead), len(buf)) == len(rec)
    # a memoryview decodes the same (readers hand out views of larger reads)
    assert decode(memoryview(buf), len(lead), len(buf)).body == body


def _record(body: bytes = b"Hello RocketMQ", props: dict[str, str] | None = None) -> bytes:
    p = encode_properties(props if props is not None else {"KEYS": "k1 k2", "TAGS": "TagA", "UNIQ_KEY": "AB" * 16})
    return encode(b"TopicTest", body, p, 3, 7, 4096, 1700000000123, 1700000000000, 4242, 1, 0, 2, 0)


def test_every_single_byte_flip_of_a_record_is_detected() -> None:
    """Exhaustive: every byte position, every one of the 255 other values."""
    rec = _record()
    assert decode(rec, 0, len(rec)).body == b"Hello RocketMQ"
    missed = []
    for i in range(len(rec)):
        for x in range(1, 256):
            bad = bytearray(rec)
            bad[i] ^= x
            try:
                decode(bytes(bad), 0, len(bad))
            except RecordError:
                continue
            missed.append((i, x))
    assert not missed, f"flips that decoded without error: {missed[:10]}"


@settings(max_examples=300, deadline=None)
@given(body=st.binary(max_size=300), props=props, data=st.data())
def test_random_byte_flips_of_random_records_are_detected(body, props, data) -> None:
    rec = _record(body, props)
    i = data.draw(st.integers(0, len(rec) - 1), label="position")
    x = data.draw(st.integers(1, 255), label="xor")
    bad = bytearray(rec)
    bad[i] ^= x
    with pytest.raises(RecordError):
        decode(bytes(bad), 0, len(bad))


def test_every_truncation_is_reported_as_torn() -> None:
    rec = _record()
    for cut in range(len(rec)):
        with pytest.raises(RecordError) as ei:
            decode(rec[:cut], 0, cut)
        assert ei.value.torn or cut == 0 or ei.value.reason, cut
    # a cut inside the header or body is "torn", never a CRC complaint about bytes never written
    for cut in range(8, len(rec)):
        with pytest.raises(RecordError) as ei:
            decode(rec[:cut], 0, cut)
        assert ei.value.torn, (cut, ei.value.reason)


def test_zero_fill_and_blank_trailer_are_recognised() -> None:
    with pytest.raises(RecordError) as ei:
        decode(bytes(200), 0, 200)
    assert ei.value.torn
    blank = F.BLANK_TRAILER.pack(1000, F.BLANK_MAGIC)
    assert record_size_at(blank, 0, 8) == 0
    with pytest.raises(RecordError):
        decode(blank, 0, 8)


def test_verify_false_skips_the_crc_only() -> None:
    rec = bytearray(_record())
    rec[90] ^= 1  # a body byte
    with pytest.raises(RecordError):
        decode(bytes(rec), 0, len(rec))
    assert decode(bytes(rec), 0, len(rec), verify=False).body != b"Hello RocketMQ"


def test_properties_parse_as_rocketmq() -> None:
    assert parse_properties("A\x011\x02B\x012\x02") == {"A": "1", "B": "2"}
    # empty names and values are dropped, like string2messageProperties
    assert parse_properties("\x01x\x02A\x01\x02B\x01v\x02") == {"B": "v"}
    assert encode_properties({"A": "1", "E": ""}) == b"A\x011\x02"


@pytest.mark.parametrize("name,value", [("", "v"), ("n", ""), ("TAGS", "x"), ("UNIQ_KEY", "x"),
                                        ("__CRC32#", "1"), ("a\x01b", "v"), ("n", "v\x02")])
def test_property_problem_refuses(name: str, value: str) -> None:
    assert property_problem(name, value) is not None


def test_unique_keys_are_distinct_and_32_hex_digits() -> None:
    g = UniqKeyGenerator()
    keys = [g.next(1700000000000) for _ in range(70_000)]
    assert all(len(k) == 32 and int(k, 16) >= 0 for k in keys)
    # the 16-bit counter wraps after 65,536 in one ms: the keys after it carry the next ms
    assert len(set(keys)) == 70_000
    assert {k[20:28] for k in keys[65536:]} == {"%08X" % (int(keys[0][20:28], 16) + 1)}
    # ... and a clock set back does not take them back to a millisecond already used up
    assert g.next(1699999999000) not in keys


@pytest.mark.parametrize("first,n", [(0, 512), (300, 1000), (65000, 2000), (65535, 70000), (7, 65536), (100, 3)])
def test_counter_hex_is_each_counters_four_hex_digits(first: int, n: int) -> None:
    """The unique keys' counter digits, sliced from rows of a table built as they are needed
    (the counter wraps within a batch): each exactly ``%04X`` of its counter."""
    assert counter_hex(first, n) == [b"%04X" % ((first + i) & 0xFFFF) for i in range(n)]
