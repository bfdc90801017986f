"""The offsets journal: ``config/consumerOffset.log``, the log of which
``config/consumerOffset.json`` is the snapshot (Kafka's ``__consumer_offsets``, in small).

Format (big-endian)::

    header   "MQOJ"  u32 version (1)  u64 base          16 bytes
    record   u32 length  u32 crc32(payload)  payload    payload: compact JSON, one object

A record's *position* is logical: ``base`` + its byte offset after the header, so positions
keep growing across compactions (the snapshot's ``journalEnd`` names one). Payloads::

    {"full": {"offsetTable": {...}, "resetEpoch": {...}}}       the whole table
    {"set": {"<topic>@<group>": {"<queueId>": <offset>}},      changed queues (new values)
     "epoch": {"<topic>@<group>": <n>}, "drop": ["<topic>@<group>", ...],
     "applied": <commitsApplied>}

The first record of a journal is always a full one, so the journal alone rebuilds the table.
Payloads are compact, their keys sorted and non-ASCII escaped (``json.dumps``), and names
need no escaping (``names.py``): a commit's record is
``{"set":{"<topic>@<group>":{"<queueId>":<offset>,...},...}}`` to the byte, so a member
tells the others' commits, and which queues they set, without decoding them
(:func:`sets_only`, :func:`may_set`).

Records are appended under the offset table's lock. A group member's commit is one ``set``
record and nothing else (``offsetview.py``); resets, deletions and the periodic snapshot
write the snapshot after their record. When the journal grows past :data:`COMPACT_BYTES` (or
four times the table) it is rewritten as one full record at the current end (temp file,
fsync, rename, directory fsync).

Appends are not fsynced, except a reset's or a deletion's: those move offsets backwards or
drop them, which losing the record would undo the other way. Before a snapshot names a
``journalEnd``, the journal is fdatasynced (:meth:`Journal.sync`), so the journal on disk
always reaches every snapshot's ``journalEnd``: a power cut takes at most the records after
the last snapshot (members' commits: offsets go back, messages are delivered again, never
skipped), and records appended after the cut land past the snapshot's ``journalEnd``, where
readers look. A torn tail (a record cut by a crash, or zeros after a power cut) ends the
journal; the next append cuts it off first. A record damaged in the middle (bit rot: valid
records after it, :meth:`Journal.damage`; zeros there too when they lie below a snapshot's
``journalEnd``, which was synced: no power cut zeroes that) ends it for readers the same way — the commits after
it are not trusted, their messages delivered again — and is reported by ``store check``;
``store recover`` starts the journal again from the table without them.
"""
from __future__ import annotations

import json
import os
import re
import struct
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from store.errors import io_error
from store.fsutil import atomic_write_bytes, open_private, pwrite_all

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Any

MAGIC = b"MQOJ"
VERSION = 1
HEADER = struct.Struct(">4sIQ")
FRAME = struct.Struct(">II")
COMPACT_BYTES = 1 << 20
MAX_RECORD = 64 << 20
SECTOR = 512   # the least a power cut loses at once (a lost page is 8 of them)


@dataclass(eq=False, repr=False)   # (neither is used: start-up, store/__init__.py)
class Tail:
    """What a read of the journal found: records (payloads) from the position asked for,
    the journal's ``base``, its logical end (after its last valid record), and whether a
    torn or damaged record ended it early."""

    records: list[dict[str, Any]]
    base: int
    end: int
    torn: bool = False
    exists: bool = True
    header: bool = True   # False: no readable header (the next write rewrites the file)
    ident: tuple[int, int] = (0, 0)   # (st_dev, st_ino): a rewrite (rename) makes a new file
    # ``read(raw=True)``: the payloads, not decoded, each with its record's logical end
    frames: list[tuple[bytes, int]] = field(default_factory=list)


class Journal:
    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self, after: int | None = None, raw: bool = False) -> Tail:
        """Records from logical position ``after`` (None, or before ``base``: from the start,
        whose first record holds the whole table). Most reads under a commit find nothing
        past the snapshot: one small read, not the whole file. ``raw``: the payloads whose
        frames check, in ``frames``, not decoded (a payload that is not a JSON object, which
        ends the journal, is then found by :func:`decode`)."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return Tail([], 0, 0, exists=False)
        except OSError as exc:
            raise io_error(exc, f"read {self.path}") from exc
        try:
            st = os.fstat(fd)
            size, ident = st.st_size, (st.st_dev, st.st_ino)
            head = os.pread(fd, HEADER.size, 0)
            if len(head) < HEADER.size:
                return Tail([], 0, 0, torn=True, header=False)
            magic, version, base = HEADER.unpack(head)
            if magic != MAGIC or version != VERSION:
                return Tail([], 0, 0, torn=True, header=False)
            start = HEADER.size
            if after is not None and after >= base:
                start = HEADER.size + after - base
            if start >= size:   # nothing after ``after`` (or a tail lost in a power cut)
                return Tail([], base, base + size - HEADER.size, ident=ident)
            data = os.pread(fd, size - start, start)
        except OSError as exc:
            raise io_error(exc, f"read {self.path}") from exc
        finally:
            os.close(fd)
        records: list[dict[str, Any]] = []
        frames: list[tuple[bytes, int]] = []
        at = base + start - HEADER.size   # (the logical position of data[0])
        pos = 0
        while (frame := _frame_at(data, pos)) is not None:
            if raw:
                frames.append((frame[0], at + frame[1]))
            else:
                record = decode(frame[0])
                if record is None:
                    break
                records.append(record)
            pos = frame[1]
        return Tail(records, base, at + pos, pos < len(data), ident=ident, frames=frames)

    def damage(self, synced: int = 0) -> tuple[int, int] | None:
        """Damage in the middle of the journal (bit rot, a write by hand): an invalid record that a
        valid one follows; (its byte offset in the file, the file's logical end). None when every
        record is valid, or when what ends the journal is what a crash or a power cut leaves: a
        record cut at the end, zeros, or a whole sector of zeros before the next valid record (a
        later block of unsynced appends written back, an earlier one not). ``synced``: the logical
        position the journal was fdatasynced up to (a trusted snapshot's ``journalEnd``): a power
        cut loses nothing below it, so a sector of zeros that begins there is damage. Reads the
        whole file: for ``store check`` and ``store recover``, not for readers."""
        try:
            with open(self.path, "rb") as fh:   # (one read: a compaction meanwhile renames a new file in)
                whole = fh.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise io_error(exc, f"read {self.path}") from exc
        if len(whole) < HEADER.size or HEADER.unpack_from(whole)[:2] != (MAGIC, VERSION):
            return None   # (no journal to speak of: load reports it, and any write starts it again)
        base, data, bad = HEADER.unpack_from(whole)[2], whole[HEADER.size:], 0
        while (record := _record_at(data, bad)) is not None:
            bad = record[1]
        # (a payload is a JSON object: only frames whose payload starts with "{" are candidates)
        at = data.find(b"{", bad + FRAME.size + 1)
        while at != -1:
            if _record_at(data, at - FRAME.size) is not None:
                lo, hi = HEADER.size + bad, HEADER.size + at - FRAME.size   # (the bytes between, in the file)
                unsynced = max(lo, HEADER.size + synced - base)   # (where a power cut may have lost bytes)
                holes = range(-(-unsynced // SECTOR) * SECTOR, hi - SECTOR + 1, SECTOR)
                return None if any(not any(whole[sec:sec + SECTOR]) for sec in holes) else (lo, base + len(data))
            at = data.find(b"{", at + 1)
        return None

    def append(self, payload: dict[str, Any], at: int, sync: bool = False) -> int:
        """Write one record at logical position ``at`` (the end a read under the lock found:
        a torn tail after it is overwritten and cut); returns the new end."""
        body = json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
        frame = FRAME.pack(len(body), zlib.crc32(body)) + body
        try:
            fd = open_private(self.path, os.O_RDWR)
            try:
                base = HEADER.unpack(os.pread(fd, HEADER.size, 0))[2]
                pos = HEADER.size + at - base
                if pos < HEADER.size:
                    raise OSError(f"position {at} is before the journal's base {base}")
                pwrite_all(fd, frame, pos)
                if os.fstat(fd).st_size > pos + len(frame):
                    os.ftruncate(fd, pos + len(frame))
                if sync:
                    os.fdatasync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            raise io_error(exc, f"append to {self.path}") from exc
        return at + len(frame)

    def sync(self) -> None:
        """fdatasync what was appended (by anyone), before a snapshot names its end."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                os.fdatasync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            raise io_error(exc, f"sync {self.path}") from exc

    def rewrite(self, full: dict[str, Any], base: int) -> int:
        """Replace the journal by one full-table record at ``base`` (compaction, and the
        first write); returns the new end."""
        body = json.dumps({"full": full}, sort_keys=True, separators=(",", ":")).encode()
        data = HEADER.pack(MAGIC, VERSION, base) + FRAME.pack(len(body), zlib.crc32(body)) + body
        atomic_write_bytes(self.path, data, keep_bak=False)
        return base + len(data) - HEADER.size

    def needs_compaction(self, end: int, base: int, table_bytes: int) -> bool:
        return end - base > max(COMPACT_BYTES, 4 * table_bytes)


def _record_at(data: bytes, pos: int) -> tuple[dict[str, Any], int] | None:
    """The valid record at ``pos`` of ``data`` (the bytes after the header) and where it ends; None
    when there is none (a frame cut short, a length past MAX_RECORD, a CRC or JSON that fails)."""
    frame = _frame_at(data, pos)
    if frame is None:
        return None
    record = decode(frame[0])
    return None if record is None else (record, frame[1])


def _frame_at(data: bytes, pos: int) -> tuple[bytes, int] | None:
    """The payload of the frame at ``pos`` of ``data`` and where it ends; None when there is
    none (a frame cut short, a length past MAX_RECORD, a CRC that fails)."""
    if pos + FRAME.size > len(data):
        return None
    length, crc = FRAME.unpack_from(data, pos)
    end = pos + FRAME.size + length
    if length > MAX_RECORD or end > len(data):
        return None
    payload = data[pos + FRAME.size:end]
    return (payload, end) if zlib.crc32(payload) == crc else None


def decode(payload: bytes) -> dict[str, Any] | None:
    """A record's payload as its object; None when it is not a JSON object (the journal ends
    at that record, as at a torn one)."""
    try:
        record = json.loads(payload)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


# A commit's record, in a subset of JSON: strings of printable ASCII with nothing escaped, integers
# of at most 19 digits (int64's, RocketMQ's offsets): json.loads refuses a longer one past
# sys.int_max_str_digits (at least 640), and such a record must end the journal at once, as it
# does for readers, not wait (a commit appended after it would be where no reader looks).
_KEY, _ID, _INT = rb'"[\x20\x21\x23-\x5b\x5d-\x7e]*"', rb'"(?:0|[1-9][0-9]{0,18})"', rb'-?(?:0|[1-9][0-9]{0,18})'
_KEY_SET = rb'%s:\{%s:%s(?:,%s:%s)*\}' % (_KEY, _ID, _INT, _ID, _INT)
# (compiled at its first use, by re, which keeps it: ~0.4 ms a process that never reads another's commit saves)
_SETS_ONLY = rb'\{"set":\{%s(?:,%s)*\}\}' % (_KEY_SET, _KEY_SET)


def sets_only(payload: bytes) -> bool:
    """Whether a record, not decoded, is in a commit's form (see the module docstring): it
    only sets offsets, and its form makes it a JSON object (its decoding may wait)."""
    return re.fullmatch(_SETS_ONLY, payload) is not None


def may_set(payloads: bytes | bytearray, key: str, queue_ids: Iterable[int]) -> bool:
    """Whether records that only set offsets (:func:`sets_only`: their payloads, one or
    several joined), not decoded, may set the offset of one of ``key``'s ``queue_ids``
    (``key``: ``<topic>@<group>``): only if they name both ``key`` and the queue id (see the
    module docstring; not necessarily together: a false yes costs only a decoding)."""
    if b'"%s":' % key.encode() not in payloads:
        return False
    return any(b'"%d":' % q in payloads for q in queue_ids)


def apply(record: dict[str, Any], state: dict[str, Any]) -> None:
    """Apply one journal record to a table in its JSON shape (``offsetTable``, ``resetEpoch``,
    ``lostOffsets``), in place."""
    full = record.get("full")
    if isinstance(full, dict):
        state.clear()
        state.update(json.loads(json.dumps(full)))
        return
    offsets = state.setdefault("offsetTable", {})
    for key in record.get("drop") or []:
        offsets.pop(key, None)
    for key, queues in (record.get("set") or {}).items():
        offsets.setdefault(key, {}).update(queues)
    state.setdefault("resetEpoch", {}).update(record.get("epoch") or {})
    if "lost" in record:
        state["lostOffsets"] = list(record["lost"])
    if "applied" in record:
        state["commitsApplied"] = record["applied"]
