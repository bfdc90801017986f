"""The on-disk format of an mqctl store: its binary files' grammar (the offsets journal's is
``offsetjournal.py``'s), and the rules derived from it, each defined here once.

All integers are big-endian (as RocketMQ, which wrote them with Java's ByteBuffer). "CRC" is
zlib's CRC-32 masked with ``CRC_MASK`` (0x7FFFFFFF), RocketMQ's ``UtilAll.crc32``.

Directory tree (RocketMQ's names where they exist; see ``layout.py``)::

    STORE/
      store.json                 format version and store settings (JSON, with a ``crc``: settings.py)
      lock                       writers' exclusive lock (portalocker), held for one batch
      checkpoint                 64 bytes, below: where derived files are complete
      commitlog/<20-digit base>  commit-log segments
      consumequeue/<topic>/<queueId>/<20-digit base>   consume-queue segments
      index/<20-digit base>      key-index files
      index/REBUILDING           while the key index is rebuilt (indexfence.py)
      config/topics/<topic>.json (config/topics.json: their RocketMQ view), config/topics.epoch,
      config/consumerOffset.json and .log, config/delayOffset.json, config/knownDamage.json,
      config/dlqResend.json
      offsets/, consumers/, locks/, dedup/, services/, tx/
                                 consumer and service state: store/log/offsets.py,
                                 store/client/members.py, qlocks.py, dedup.py
      spark-staging/             Spark writers' jobs until they commit (store/spark/staging.py)

Commit-log record (RocketMQ's ``MessageExtEncoder`` layout, V1, IPv4 hosts)::

    off  field                   width   notes
      0  TOTALSIZE               int     whole record, this field included
      4  MAGICCODE               int     0xDAA320A7 (V1: 1-byte topic length)
      8  BODYCRC                 int     CRC of the body
     12  QUEUEID                 int
     16  FLAG                    int     user flag, opaque
     20  QUEUEOFFSET             long    index in the consume queue (0 for a prepared half)
     28  PHYSICALOFFSET          long    this record's own commit-log offset
     36  SYSFLAG                 int     bits 2-3: transaction type (0 NOT, 4 PREPARED, 8 COMMIT, 12 ROLLBACK);
                                         bit 12 ATOMIC_BATCH, bit 13 ATOMIC_END (atomicbatch.py)
     40  BORNTIMESTAMP           long    producer clock, ms since the epoch
     48  BORNHOST                int+int IPv4 127.0.0.1 + the producer's pid as the port
     56  STORETIMESTAMP          long    assigned under the write lock: non-decreasing in log order
     64  STOREHOST               int+int 127.0.0.1:10911
     72  RECONSUMETIMES          int
     76  PREPARED TX OFFSET      long    commit-log offset of the half message, for a committed one
     84  BODYLENGTH + BODY       int + N
         TOPICLENGTH + TOPIC     byte + T   UTF-8, T <= 127; up to 134 (read unsigned) for a
                                            group's %RETRY%/%DLQ% topic
         PROPLENGTH + PROPS      short + P  UTF-8 ``name 0x01 value 0x02`` repeated, P <= 32767

    TOTALSIZE = 91 + N + T + P.

The last property of every record is ``__CRC32#`` (RocketMQ's optional record CRC, always on
here): ``__CRC32#`` 0x01, ten decimal digits of the CRC of every byte of the record before
this 20-byte property, least significant digit first, 0x02. BODYCRC alone would let a flipped
byte in the header, topic or properties pass; the record CRC catches every one.

A record never spans segments. When a record does not fit in what is left of a segment
(keeping 8 bytes spare), the writer ends the segment with an 8-byte BLANK trailer
``int bytesLeft, int 0xCBD43194`` and starts the next one at ``base + SEGMENT_SIZE``, so a
physical offset locates its segment by arithmetic alone. Segments are *not* preallocated: a
segment's file size is its write position, which is also how concurrent writers find the end.

Message ids. The offset id is 16 bytes as 32 upper-case hex digits: store host IPv4 (4),
store port (4), commit-log offset (8) — it locates the record directly. The unique key
(UNIQ_KEY property) is made by the producer: host hash (4), pid (2), random (4), ms since
the start of the month (4), counter (2), also 32 hex digits.

Consume-queue entry (``CQ_ENTRY``, 20 bytes; entry i of a queue at byte i*20)::

      0  commit-log offset       long
      8  record size             int
     12  tags code               long    Java String.hashCode of the TAGS property; 0 = none;
                                         in SCHEDULE_TOPIC_XXXX: the delivery time in ms

Consume-queue segments hold ``CQ_SEGMENT_ENTRIES`` entries and are named by their first
entry's byte offset (20 digits). A queue's max offset is ``(last base + size) // 20``; a
trailing partial entry (a torn write) is ignored by readers and cut by recovery.

Key index file (RocketMQ's ``IndexFile`` shape, smaller, created sparse)::

      0  header 40 bytes: beginTimestamp long, endTimestamp long, beginPhyOffset long,
         endPhyOffset long, hashSlotCount int, indexCount int (starts at 1: entry 0 unused)
     40  slot table: INDEX_SLOTS x int, the number of the newest entry in the slot (0 = empty)
      .  entries: INDEX_ENTRIES x 20 bytes: keyHash int, phyOffset long,
         timeDiff int (seconds since beginTimestamp), prevIndex int (older entry in the slot)

Keys indexed: ``#<UNIQ_KEY>`` (no topic: one unique key finds every copy of a message, its
retries and dead letter included) and ``<topic>#<key>`` for every key of KEYS.
keyHash = CRC of the UTF-8 key (not Java's hash: ours is computed in C, and collisions are
resolved by reading the record). Files are named by the commit-log offset of their first
entry; a full file is followed by a new one.

Checkpoint (``checkpoint``, ``CHECKPOINT`` struct, 64 bytes, rewritten in place)::

      0  magic                   int     0x4D51434B ("MQCK")
      4  version                 int     1
      8  written end             long    commit-log end up to which consume queues and index
                                         are complete; == the log's end when no write is torn
     16  last store timestamp    long    keeps store timestamps non-decreasing
     24  synced end              long    the commit log is durable (fdatasync) below this
     32  boot id                 16 bytes the kernel boot id of the last writer
     48  derived end             long    consume queues and key index are durable below this
                                         (0 in stores of earlier versions: unknown)
     56  derived at              int     when ``derived end`` was last moved (s since epoch)
     60  CRC of bytes 0..59      int

The checkpoint is the store's clean/dirty marker: ``written end`` differing from the
commit log's real end means a writer died inside a batch; a different boot id means the machine
restarted and the page cache may have lost anything after ``synced end`` (and any derived entry
after ``derived end``). Either makes the next opener run recovery.

The checkpoint itself is never fsynced: after a power cut it may hold any earlier version, whose
ends are only lower than the truth (each is written only after what it claims is durable), so
recovery redoes more work, never less. Durability is a prefix: every sync makes the whole log
below its end durable, never only the batch it acknowledges, so a power cut can shorten the log
but never leave a hole below a durable record.
"""
from __future__ import annotations

import struct

# A CRC as RocketMQ stores it: CRC-32 masked to a non-negative Java int (``crc`` below).
CRC_MASK = 0x7FFFFFFF

# -- commit log --------------------------------------------------------------------------------

MAGIC_V1 = 0xDAA320A7
MAGIC_V2 = 0xDAA320AB
BLANK_MAGIC = 0xCBD43194
END_FILE_MIN_BLANK = 8

# Why 64 MiB: a user's home directory is not a broker's data disk. Files are not preallocated
# (a topic of three messages costs three records), and 64 MiB keeps retention's unit of
# deletion small while leaving room for 15 maximum-size (4 MiB) messages per segment.
COMMITLOG_SEGMENT_SIZE = 64 * 1024 * 1024
MAX_MESSAGE_SIZE = 4 * 1024 * 1024

# TOTALSIZE .. BODYLENGTH, everything before the body: (name, struct code) of each field, the one
# table RECORD_HEADER, the OFF_* offsets and every partial view (``header_view``) are built from.
RECORD_FIELDS = (
    ("TOTALSIZE", "i"), ("MAGICCODE", "I"), ("BODYCRC", "I"), ("QUEUEID", "i"), ("FLAG", "i"),
    ("QUEUEOFFSET", "q"), ("PHYSICALOFFSET", "q"), ("SYSFLAG", "i"), ("BORNTIMESTAMP", "q"),
    ("BORNHOST", "I"), ("BORNPORT", "i"), ("STORETIMESTAMP", "q"), ("STOREHOST", "I"), ("STOREPORT", "i"),
    ("RECONSUMETIMES", "i"), ("PREPAREDTXOFFSET", "q"), ("BODYLENGTH", "i"),
)
_NAMES = [name for name, _ in RECORD_FIELDS]
RECORD_FIELD_OFFSET = {name: struct.calcsize(">" + "".join(c for _, c in RECORD_FIELDS[:i]))
                       for i, name in enumerate(_NAMES)}
RECORD_HEADER = struct.Struct(">" + "".join(code for _, code in RECORD_FIELDS))
RECORD_HEADER_SIZE = RECORD_HEADER.size  # 88
RECORD_FIXED_SIZE = RECORD_HEADER_SIZE + 1 + 2  # + topic length byte + properties length
BLANK_TRAILER = struct.Struct(">iI")

# A topic has 1..MAX_QUEUES queues (QUEUEID 0..MAX_QUEUES-1).
MAX_QUEUES = 1024

OFF_MAGIC = RECORD_FIELD_OFFSET["MAGICCODE"]                   # 4
OFF_QUEUE_OFFSET = RECORD_FIELD_OFFSET["QUEUEOFFSET"]          # 20
OFF_PHYSICAL_OFFSET = RECORD_FIELD_OFFSET["PHYSICALOFFSET"]    # 28
OFF_SYSFLAG = RECORD_FIELD_OFFSET["SYSFLAG"]                   # 36
OFF_STORE_TIMESTAMP = RECORD_FIELD_OFFSET["STORETIMESTAMP"]    # 56

LOOPBACK_IP = 0x7F000001
STORE_PORT = 10911

# Properties are ``name NAME_VALUE_SEP value PROPERTY_SEP`` repeated (record.encode_properties).
NAME_VALUE_SEP = "\x01"
PROPERTY_SEP = "\x02"
NAME_VALUE_SEP_B, PROPERTY_SEP_B = NAME_VALUE_SEP.encode(), PROPERTY_SEP.encode()


def property_value(props: bytes, name: bytes) -> bytes | None:
    """The raw value of the property whose ``name NAME_VALUE_SEP`` is ``name`` in a record's
    properties ``props``, read in place (no parse of the rest), or None."""
    if props.startswith(name):
        i = len(name)
    else:
        i = props.find(PROPERTY_SEP_B + name)
        if i < 0:
            return None
        i += len(name) + 1
    j = props.find(PROPERTY_SEP_B, i)
    return props[i:j] if j >= 0 else props[i:]


CRC_PROPERTY = "__CRC32#"
CRC_PROPERTY_SIZE = len(CRC_PROPERTY) + 1 + 10 + 1  # 20
# The record CRC property as it ends a record: ``__CRC32#`` 0x01, the ten digits least
# significant first, 0x02. Kept reversed with the digits in order, so that the property of CRC
# ``c`` is ``(CRC_PROPERTY_REVERSED % c)[::-1]``: one ``%`` and one slice, no digit loop.
CRC_PROPERTY_HEAD = CRC_PROPERTY.encode() + NAME_VALUE_SEP_B
CRC_PROPERTY_REVERSED = PROPERTY_SEP_B + b"%010d" + CRC_PROPERTY_HEAD[::-1]
MAX_PROPERTIES_SIZE = 32767
# A message id, offset id or unique key (below): 32 hex digits.
MSG_ID_LEN = 32
# The topic length byte read unsigned (a written topic is at most 134 bytes).
MAX_TOPIC_FIELD = 255
# The largest record a reader accepts, and how far it reads to hold one whole: the fixed
# fields, the largest body, topic and properties (91 + 4 MiB + 255 + 32767 bytes).
MAX_RECORD_SIZE = RECORD_FIXED_SIZE + MAX_MESSAGE_SIZE + MAX_TOPIC_FIELD + MAX_PROPERTIES_SIZE

# SYSFLAG transaction types
TX_MASK = 0xC
TX_NOT = 0x0
TX_PREPARED = 0x4
TX_COMMIT = 0x8
TX_ROLLBACK = 0xC
# A batch of several records written by one append (a producer's batch, a stage's outputs and
# offset commit: ``atomicbatch.py``): every record of it has ATOMIC_BATCH, its last record
# ATOMIC_END too; a batch without its end at the log's tail was never finished and is cut by
# recovery. (Bits RocketMQ's MessageSysFlag leaves free.)
ATOMIC_BATCH = 0x1 << 12
ATOMIC_END = 0x1 << 13

# -- consume queue ------------------------------------------------------------------------------

CQ_ENTRY = struct.Struct(">qiq")
CQ_ENTRY_SIZE = CQ_ENTRY.size  # 20
CQ_SEGMENT_ENTRIES = 300_000

# SCHEDULE_TOPIC_XXXX (schedule.py): a message of delay level n (1..18) waits in queue n-1;
# one of a free delay in FREE_QUEUE, the last queue.
DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
FREE_QUEUE = len(DELAY_LEVELS.split())   # 18
SCHEDULE_QUEUES = FREE_QUEUE + 1

# The C loops (nativecheck.c) this source calls: a module built from an older source, with
# another ``INTERFACE``, is not used (``pip install -e .`` again).
NATIVE_INTERFACE = 3

# -- key index ----------------------------------------------------------------------------------

INDEX_HEADER = struct.Struct(">qqqqii")
INDEX_HEADER_SIZE = INDEX_HEADER.size  # 40
INDEX_SLOT = struct.Struct(">i")
INDEX_ENTRY = struct.Struct(">iqii")
INDEX_ENTRY_SIZE = INDEX_ENTRY.size  # 20
INDEX_SLOTS = 131_072
INDEX_ENTRIES = 1_048_576
# In the index directory while a rebuild is under way (``index.py``: the rebuild fence).
INDEX_REBUILD_MARKER = "REBUILDING"
INDEX_FILE_SIZE = INDEX_HEADER_SIZE + INDEX_SLOTS * 4 + INDEX_ENTRIES * INDEX_ENTRY_SIZE
# The keys indexed: ``uniq_key_of`` and ``key_of`` below.
INDEX_KEY_SEP = "#"
INDEX_KEY_SEP_B = INDEX_KEY_SEP.encode()

# -- checkpoint ---------------------------------------------------------------------------------

CHECKPOINT = struct.Struct(">iiqqq16sqiI")
CHECKPOINT_MAGIC = 0x4D51434B
CHECKPOINT_VERSION = 1

STORE_FORMAT_VERSION = 1


def crc(data: bytes | bytearray | memoryview) -> int:
    """RocketMQ's CRC: zlib CRC-32 masked to a non-negative Java int."""
    import zlib
    return zlib.crc32(data) & CRC_MASK


def header_view(read: str, *, first: str = "TOTALSIZE", raw: str = "") -> struct.Struct:
    """A struct over part of the record header, from field ``first`` to the last field named:
    the fields of ``read`` (names, or ``A..B`` for A to B, space-separated) as their codes,
    the fields of ``raw`` (``A..B``) as one bytes block, every other field skipped (``x``).
    The fast paths' views of the header: each is this table's, never a struct string of its own."""
    def span(spec: str) -> list[str]:
        a, _, b = spec.partition("..")
        return _NAMES[_NAMES.index(a):_NAMES.index(b or a) + 1]
    wanted = {n for spec in read.split() for n in span(spec)}
    block = span(raw) if raw else []
    last = max(_NAMES.index(n) for n in wanted | set(block))
    parts, skip = [">"], 0
    for name, code in RECORD_FIELDS[_NAMES.index(first):last + 1]:
        if name in wanted or (block and name == block[0]):
            raw_size = sum(struct.calcsize(c) for n, c in RECORD_FIELDS if n in block)
            parts += [f"{skip}x" if skip else "", code if name in wanted else f"{raw_size}s"]
            skip = 0
        elif name not in block:
            skip += struct.calcsize(code)
    return struct.Struct("".join(parts))


def uniq_key_of(uniq: str) -> str:
    """The index key of a unique key, ``#<UNIQ_KEY>``: no topic, so one key finds every copy
    of a message (its retries and dead letter included)."""
    return INDEX_KEY_SEP + uniq


def key_of(topic: str, key: str) -> str:
    """The index key of one word of a message's KEYS: ``<topic>#<key>``."""
    return topic + INDEX_KEY_SEP + key


def segment_name(base: int) -> str:
    """A segment's file name: its base offset, 20 digits (lexical order = log order)."""
    return f"{base:020d}"


def is_segment_name(name: str) -> bool:
    """Whether ``name`` is a segment's (:func:`segment_name`: 20 ASCII digits). Anything else
    in a segment directory (an editor's backup, a temp file, a ``٠``-digit name) is not."""
    return len(name) == 20 and name.isascii() and name.isdigit()
