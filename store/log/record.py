"""One commit-log record: the :class:`StoredMessage` a reader gets, and encode/decode of its bytes.

The byte layout is written down in ``format.py``. Encoding is on the producer's hot path, so
:func:`encode` builds the record with one ``struct.pack`` and two CRCs and nothing else;
decoding checks the record CRC before any field is trusted.
"""
from __future__ import annotations

import functools
import mmap
import os
import time
import zlib
from dataclasses import dataclass, field

from store.errors import MessageTooLargeError
from store.log import format as F
from store.names import SCHEDULE_TOPIC

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Any, Callable

_HEADER_PACK = F.RECORD_HEADER.pack
# What decode() and record_size_at() read from: a segment read, a view of one, or a map.
Buffer = bytes | bytearray | memoryview | mmap.mmap
# A message body handed to a writer: bytes, or a view of a read buffer (copied once, into the batch).
Body = bytes | bytearray | memoryview
_HEADER_UNPACK = F.RECORD_HEADER.unpack_from


def _crc32_function() -> Callable[..., int]:
    """``zlib.crc32``, or the identical function of ISA-L (the optional ``isal`` package):
    it computes the same CRC-32 about four times faster (PCLMUL), which matters because every
    record is CRC'd twice on write and on read. Checked against zlib before it is used;
    ``MQCTL_PURE_ZLIB=1`` turns it off."""
    if os.environ.get("MQCTL_PURE_ZLIB", "") not in ("", "0"):
        return zlib.crc32
    try:
        from isal.isal_zlib import crc32 as fast
    except ImportError:
        return zlib.crc32
    probe = bytes(range(256)) * 3
    if fast(probe) == zlib.crc32(probe) and fast(probe[7:300], 0x12345678) == zlib.crc32(probe[7:300], 0x12345678):
        return fast
    return zlib.crc32


crc32 = _crc32_function()
FAST_CRC = crc32 is not zlib.crc32

PROP_TAGS = "TAGS"
PROP_KEYS = "KEYS"
PROP_UNIQ_KEY = "UNIQ_KEY"
PROP_SHARDING_KEY = "__SHARDINGKEY"
PROP_DELAY = "DELAY"
PROP_REAL_TOPIC = "REAL_TOPIC"
PROP_REAL_QID = "REAL_QID"
PROP_RETRY_TOPIC = "RETRY_TOPIC"
PROP_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROP_TRAN_MSG = "TRAN_MSG"
PROP_TRANSACTION_ID = "__transactionId__"
PROP_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
PROP_CHECK_IMMUNITY = "CHECK_IMMUNITY_TIME_IN_SECONDS"
PROP_DLQ_ORIGIN_TOPIC = "DLQ_ORIGIN_TOPIC"
PROP_DLQ_ORIGIN_MESSAGE_ID = "DLQ_ORIGIN_MESSAGE_ID"
PROP_DELIVER_MS = "TIMER_DELIVER_MS"

# Names a user may not set with --property: the store's own (RocketMQ's reserved set, abridged
# to the ones this store gives meaning to, plus the record CRC).
RESERVED_PROPERTIES = frozenset({
    PROP_TAGS, PROP_KEYS, PROP_UNIQ_KEY, "WAIT", PROP_DELAY, PROP_RETRY_TOPIC, PROP_REAL_TOPIC,
    PROP_REAL_QID, PROP_TRAN_MSG, "PGROUP", "MIN_OFFSET", "MAX_OFFSET", PROP_ORIGIN_MESSAGE_ID,
    "RECONSUME_TIME", "MAX_RECONSUME_TIMES", "CONSUME_START_TIME", PROP_TRANSACTION_ID,
    PROP_CHECK_TIMES, "TRAN_PREPARED_QUEUE_OFFSET", PROP_DLQ_ORIGIN_TOPIC,
    PROP_DLQ_ORIGIN_MESSAGE_ID, PROP_DELIVER_MS, "TIMER_DELAY_SEC", "TIMER_DELAY_MS",
    F.CRC_PROPERTY, PROP_SHARDING_KEY,
})


@functools.lru_cache(maxsize=4096)
def java_hash(s: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units), as a signed 32-bit int."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - 0x100000000 if h >= 0x80000000 else h


def tags_code(tags: str | None) -> int:
    """The consume-queue tags code: Java hash of the tag, 0 when the message has none."""
    return java_hash(tags) if tags else 0


def entry_tags_code(topic: str, properties: dict[str, str]) -> int:
    """The tags code of a stored record's consume-queue entry: for the schedule topic its
    delivery time (RocketMQ's trick: the scheduler sees what is due from the queue alone),
    for every other topic :func:`tags_code` of its tag. Writers and rebuilders all use this."""
    if topic == SCHEDULE_TOPIC:
        due = properties.get(PROP_DELIVER_MS, "")
        return int(due) if due.isdigit() else 0
    return tags_code(properties.get(PROP_TAGS))


def offset_msg_id(commitlog_offset: int) -> str:
    """The offset message id: store host, port and commit-log offset as 32 hex digits."""
    return f"{F.LOOPBACK_IP:08X}{F.STORE_PORT:08X}{commitlog_offset:016X}"


_OFFSET_ID_PREFIX = f"{F.LOOPBACK_IP:08X}{F.STORE_PORT:08X}"


def decode_offset_msg_id(msg_id: str) -> int | None:
    """The commit-log offset an offset id points at, or None if ``msg_id`` is not one."""
    if not is_msg_id(msg_id) or not msg_id.upper().startswith(_OFFSET_ID_PREFIX):
        return None
    return int(msg_id[16:], 16)


def is_msg_id(text: str) -> bool:
    """Whether ``text`` has a message id's shape (an offset id or a unique key): 32 hex digits."""
    return len(text) == F.MSG_ID_LEN and all(c in "0123456789abcdefABCDEF" for c in text)


def _hostname() -> str:
    """``socket.gethostname()``, which on POSIX is the uname node name: without importing
    ``socket`` (and ``selectors``) on every producer's start-up."""
    if hasattr(os, "uname"):
        return os.uname().nodename
    import socket
    return socket.gethostname()


KEYS_PER_MS = 65536   # unique keys that can carry one millisecond (the counter's 16 bits)
# The bytes the write adds to a message's properties for its unique key (32 hex digits).
UNIQ_KEY_PROPERTY_SIZE = len(PROP_UNIQ_KEY + F.NAME_VALUE_SEP + F.PROPERTY_SEP) + F.MSG_ID_LEN


class UniqKeyGenerator:
    """Client-side unique keys, RocketMQ's MessageClientIDSetter shape (32 hex digits).

    Host hash (4 bytes) + pid (2) + random (4) are fixed per process; then ms since the start
    of the month (4) and a counter (2). Two keys of one process never collide: once 65,536
    keys carry one millisecond (a batch of more bodies, or a clock set back), the next keys
    carry the next one (:meth:`reserve`).
    """

    def __init__(self) -> None:
        self._renew()
        now = time.localtime()
        month_start = time.mktime((now.tm_year, now.tm_mon, 1, 0, 0, 0, 0, 0, -1))
        self.month_start_ms = int(month_start * 1000)
        self.counter = int.from_bytes(os.urandom(2), "big")
        self.key_ms = 0   # the millisecond the last keys carry, and how many of them do
        self.key_ms_used = 0

    def _renew(self) -> None:
        host = zlib.crc32(_hostname().encode()) & 0xFFFFFFFF
        self._pid = os.getpid()
        # os.urandom, not the random module: its import (and hashlib's) is a consumer's cost too
        self._prefix = f"{host:08X}{self._pid & 0xFFFF:04X}{int.from_bytes(os.urandom(4), 'big'):08X}"

    @property
    def prefix(self) -> str:
        """Host, pid and random: a forked child's keys get its own (read first by every key)."""
        if self._pid != os.getpid():
            self._renew()
        return self._prefix

    @prefix.setter
    def prefix(self, value: str) -> None:
        self._prefix = value

    def reserve(self, now_ms: int, n: int) -> int:
        """The millisecond the next ``n`` keys (at most :data:`KEYS_PER_MS`, the counter's
        next ones) carry: ``now_ms``, or a later one when that one's counters are used up."""
        ms = self.key_ms
        if now_ms > ms:
            self.key_ms, self.key_ms_used = now_ms, n
            return now_ms
        if self.key_ms_used + n > KEYS_PER_MS:
            ms += 1
            self.key_ms, self.key_ms_used = ms, n
            return ms
        self.key_ms_used += n
        return ms

    def next(self, now_ms: int) -> str:
        self.counter = (self.counter + 1) & 0xFFFF
        return f"{self.prefix}{(self.reserve(now_ms, 1) - self.month_start_ms) & 0xFFFFFFFF:08X}{self.counter:04X}"


# The table of every counter's 4 hex digits, in rows of 256 (one per high byte), each built
# on first use: a process that frames a few thousand messages builds a few rows (~15 µs
# each), not the whole table (~5 ms).
_HEX2 = [b"%02X" % i for i in range(256)]
_HEX4_ROWS: list[list[bytes] | None] = [None] * 256


def counter_hex(first: int, n: int) -> list[bytes]:
    """The 4 hex digits ending the unique keys of a batch whose counters run ``first ..
    first+n-1`` (mod 2**16). Large batches slice the rows of a table; a few messages, the
    common one-message send among them, format theirs directly."""
    if n < 512:
        return [b"%04X" % ((first + i) & 0xFFFF) for i in range(n)]
    hx: list[bytes] = []
    c = first & 0xFFFF
    while len(hx) < n:   # (the counter may wrap within the batch)
        hi, lo = c >> 8, c & 0xFF
        row = _HEX4_ROWS[hi]
        if row is None:
            head = _HEX2[hi]
            row = _HEX4_ROWS[hi] = [head + d for d in _HEX2]
        take = min(256 - lo, n - len(hx))
        hx += row[lo:lo + take]
        c = (c + take) & 0xFFFF
    return hx


def has_property_separator(value: str | bytes) -> bool:
    """Whether ``value`` holds a property separator (bytes 1 and 2): stored in a property (a
    user property, tags, keys, a sharding key) it would let a producer inject properties, e.g.
    forge UNIQ_KEY. The one place that says what is allowed in a stored property."""
    if isinstance(value, bytes):
        return F.NAME_VALUE_SEP_B in value or F.PROPERTY_SEP_B in value
    return F.NAME_VALUE_SEP in value or F.PROPERTY_SEP in value


def property_problem(name: str, value: str) -> str | None:
    """Why a user property may not be stored (None: it may): it must be non-empty, not
    reserved, and free of the separators."""
    if not name or not value:
        return "name and value must both be non-empty"
    if name in RESERVED_PROPERTIES:
        return "the name is reserved for the store"
    if has_property_separator(name) or has_property_separator(value):
        return "may not contain the control characters \\x01 or \\x02"
    return None


def encode_properties(props: dict[str, str]) -> bytes:
    """Serialize properties (without the trailing record CRC)."""
    return "".join(f"{k}{_NV}{v}{_PS}" for k, v in props.items() if v is not None and v != "").encode()


def parse_properties(raw: str) -> dict[str, str]:
    """RocketMQ's ``string2messageProperties``: empty names or values are dropped."""
    out: dict[str, str] = {}
    for part in raw.split(_PS):
        name, sep, value = part.partition(_NV)
        if name and value:   # a value implies the separator was there
            out[name] = value
    return out


@dataclass(slots=True)
class Draft:
    """A message on its way into the store: what the producer decides."""

    topic: str
    body: bytes
    properties: dict[str, str] = field(default_factory=dict)
    queue_id: int = -1           # -1: the store picks (sharding key or round robin)
    sharding_key: str | None = None
    flag: int = 0
    sysflag: int = 0
    born_timestamp: int = 0
    reconsume_times: int = 0
    prepared_tx_offset: int = 0
    tags_code: int | None = None  # None: Java hash of TAGS; the delay scheduler sets a time


@dataclass(slots=True)
class StoredMessage:
    """A stored message as a reader sees it (a consumer's :class:`store.Message` is made from one)."""

    topic: str
    queue_id: int
    queue_offset: int
    commitlog_offset: int
    size: int
    body: bytes
    properties: dict[str, str]
    flag: int = 0
    sysflag: int = 0
    born_timestamp: int = 0
    born_ip: int = 0        # BORNHOST, kept as numbers: formatting it for every message read
    born_port: int = 0      # costs more than the rest of decoding; see born_host
    store_timestamp: int = 0
    reconsume_times: int = 0
    prepared_tx_offset: int = 0
    # A decoded record leaves ``properties`` unset and keeps the raw bytes here: most readers
    # (``consume`` to stdout) never look at them, and parsing is a third of decoding.
    _props_raw: bytes = field(default=b"", repr=False, compare=False)

    def __getattr__(self, name: str) -> Any:  # only reached for an unset slot
        if name == "properties":
            props = parse_properties(self._props_raw.decode("utf-8", "replace"))
            self.properties = props
            return props
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def born_host(self) -> str:
        """``IP:port`` of the producer (port = its pid), "" when unknown."""
        if not self.born_ip and not self.born_port:
            return ""
        ip = self.born_ip
        return f"{ip >> 24 & 255}.{ip >> 16 & 255}.{ip >> 8 & 255}.{ip & 255}:{self.born_port}"

    @property
    def msg_id(self) -> str:
        """The offset id: locates the record without an index."""
        return offset_msg_id(self.commitlog_offset)

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(PROP_UNIQ_KEY)

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROP_TAGS)

    @property
    def keys(self) -> list[str]:
        raw = self.properties.get(PROP_KEYS)
        return [k for k in raw.split(" ") if k] if raw else []

    @property
    def user_properties(self) -> dict[str, str]:
        return {k: v for k, v in self.properties.items() if k not in RESERVED_PROPERTIES}


Message = StoredMessage   # the engine's modules' short name for it


def check_properties_size(props_len: int) -> None:
    """Refuse a record whose properties (``props_len`` bytes without the record CRC) would not
    fit RocketMQ's signed 16-bit length (``PROPERTIES_SIZE_EXCEEDED``): the field would overflow
    or be read as negative by a Java reader of the log."""
    if props_len + F.CRC_PROPERTY_SIZE > F.MAX_PROPERTIES_SIZE:
        raise MessageTooLargeError(
            f"message properties of {props_len + F.CRC_PROPERTY_SIZE} bytes (tags, keys, properties and the "
            f"store's own) exceed the limit of {F.MAX_PROPERTIES_SIZE} bytes")


def record_size(body_len: int, topic_len: int, props_len: int) -> int:
    """TOTALSIZE of a record whose properties (without the record CRC) take ``props_len``."""
    return F.RECORD_FIXED_SIZE + body_len + topic_len + props_len + F.CRC_PROPERTY_SIZE


def encode(
    topic_bytes: bytes,
    body: bytes,
    props_bytes: bytes,
    queue_id: int,
    queue_offset: int,
    physical_offset: int,
    store_timestamp: int,
    born_timestamp: int,
    born_port: int,
    flag: int = 0,
    sysflag: int = 0,
    reconsume_times: int = 0,
    prepared_tx_offset: int = 0,
) -> bytes:
    """The bytes of one record; ``props_bytes`` excludes the record CRC, added here."""
    body_len = len(body)
    topic_len = len(topic_bytes)
    props_len = len(props_bytes) + F.CRC_PROPERTY_SIZE
    total = record_size(body_len, topic_len, len(props_bytes))
    head = _HEADER_PACK(
        total, F.MAGIC_V1, crc32(body) & _CRC_MASK, queue_id, flag, queue_offset,
        physical_offset, sysflag, born_timestamp, F.LOOPBACK_IP, born_port, store_timestamp,
        F.LOOPBACK_IP, F.STORE_PORT, reconsume_times, prepared_tx_offset, body_len,
    )
    rec = b"".join((head, body, bytes((topic_len,)), topic_bytes,
                    props_len.to_bytes(2, "big"), props_bytes))
    c = crc32(rec) & _CRC_MASK
    return rec + (F.CRC_PROPERTY_REVERSED % c)[::-1]


class RecordError(Exception):
    """A record failed validation; ``torn`` when it simply ran past the end of the data."""

    def __init__(self, reason: str, torn: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.torn = torn


def record_size_at(buf: Buffer, pos: int, limit: int) -> int:
    """TOTALSIZE at ``pos`` after bounds checks, or raise RecordError. 0 = blank trailer."""
    if limit - pos < 8:
        raise RecordError("truncated header", torn=True)
    total = int.from_bytes(buf[pos:pos + 4], "big", signed=True)
    magic = int.from_bytes(buf[pos + 4:pos + 8], "big")
    if magic == F.BLANK_MAGIC:
        return 0
    if magic not in (F.MAGIC_V1, F.MAGIC_V2):
        if total == 0 and magic == 0:
            raise RecordError("zero-filled bytes", torn=True)
        raise RecordError(f"bad magic code 0x{magic:08X}")
    if total < F.RECORD_FIXED_SIZE + F.CRC_PROPERTY_SIZE or total > _MAX_TOTAL:
        raise RecordError(f"impossible record size {total}")
    if pos + total > limit:
        raise RecordError(f"record of {total} bytes runs past the end", torn=True)
    return total


_CRC_PROP_HEAD, _CRC_PROP_REVERSED = F.CRC_PROPERTY_HEAD, F.CRC_PROPERTY_REVERSED
_NV, _PS = F.NAME_VALUE_SEP, F.PROPERTY_SEP
_MIN_TOTAL, _MAX_TOTAL, _CRC_MASK = F.RECORD_FIXED_SIZE + F.CRC_PROPERTY_SIZE, F.MAX_RECORD_SIZE, F.CRC_MASK
_TOPICS: dict[bytes, str] = {}


def decode(buf: Buffer, pos: int, limit: int, verify: bool = True) -> Message:
    """Decode the record at ``pos`` in ``buf`` (bytes, mmap or memoryview).

    Raises :class:`RecordError` when the record is incomplete (``torn``) or damaged. With
    ``verify`` the record CRC (and the body CRC) are checked before anything is returned.

    This is the consumer's hot path: it reads the fields in place (no copy of the record),
    and copies out only the body.
    """
    if limit - pos < _MIN_TOTAL:
        total = record_size_at(buf, pos, limit)   # raises the precise error
        if total == 0:
            raise RecordError("blank trailer")
    (total, magic, body_crc, queue_id, flag, queue_offset, physical_offset, sysflag, born_ts,
     born_ip, born_port, store_ts, _sip, _sport, reconsume, prepared, body_len) = _HEADER_UNPACK(buf, pos)
    if magic != F.MAGIC_V1 or total < _MIN_TOTAL or total > _MAX_TOTAL or pos + total > limit:
        if record_size_at(buf, pos, limit) == 0:   # the precise error, or a V2 record
            raise RecordError("blank trailer")
    end = pos + total
    if verify:
        # The record CRC property must be exactly what encode() writes for the CRC of the
        # bytes before it: "__CRC32#" 0x01, ten digits least significant first, 0x02.
        view = buf if buf.__class__ is memoryview else memoryview(buf)
        c = crc32(view[pos:end - F.CRC_PROPERTY_SIZE]) & _CRC_MASK
        if view[end - F.CRC_PROPERTY_SIZE:end] != (_CRC_PROP_REVERSED % c)[::-1]:
            trailer = bytes(view[end - F.CRC_PROPERTY_SIZE:end])
            if trailer[:9] != _CRC_PROP_HEAD or trailer[19] != 2 or not trailer[9:19].isdigit():
                raise RecordError("record CRC property missing")
            raise RecordError("record CRC mismatch")
    p = pos + F.RECORD_HEADER_SIZE
    if body_len < 0 or p + body_len + 3 > end:
        raise RecordError("body length out of bounds")
    body = bytes(buf[p:p + body_len])
    p += body_len
    if magic == F.MAGIC_V1:
        topic_len = buf[p]
        p += 1
    else:
        topic_len = int.from_bytes(buf[p:p + 2], "big")
        p += 2
    tb = buf[p:p + topic_len]
    try:
        topic = _TOPICS.get(tb)  # type: ignore[arg-type]  # a read-only memoryview hashes like bytes
    except TypeError:                 # a writable buffer (bytearray, mmap) does not
        tb = bytes(tb)
        topic = _TOPICS.get(tb)
    if topic is None:
        tb = bytes(tb)
        topic = tb.decode("utf-8", "replace")
        if len(_TOPICS) < 4096:
            _TOPICS[tb] = topic
    p += topic_len
    props_len = (buf[p] << 8) | buf[p + 1]
    p += 2
    if p + props_len != end:
        raise RecordError("field lengths do not add up to TOTALSIZE")
    if verify and crc32(body) & _CRC_MASK != body_crc:
        raise RecordError("body CRC mismatch")
    m = _new_message(Message)   # fields set one by one: cheaper than __init__, and lazy properties
    m.topic = topic
    m.queue_id = queue_id
    m.queue_offset = queue_offset
    m.commitlog_offset = physical_offset
    m.size = total
    m.body = body
    m.flag = flag
    m.sysflag = sysflag
    m.born_timestamp = born_ts
    m.born_ip = born_ip
    m.born_port = born_port
    m.store_timestamp = store_ts
    m.reconsume_times = reconsume
    m.prepared_tx_offset = prepared
    m._props_raw = bytes(buf[p:end - F.CRC_PROPERTY_SIZE])
    return m


_new_message = object.__new__
