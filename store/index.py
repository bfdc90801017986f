"""The key index: ``topic#key`` → commit-log offsets, without scanning the log.

Each file ``index/<20-digit begin offset>`` is RocketMQ's IndexFile shape (``format.py``): a
40-byte header, a slot table of ``INDEX_SLOTS`` ints, then 20-byte entries chained newest to
oldest through ``prevIndex``. The header and slot table (512 KiB) are written as real zeros
when the file is created, so slot updates through ``mmap`` can never fault on a full disk;
entries are appended with ``pwrite`` after them, so a full disk surfaces as an error.

Crash order inside a batch: entries first, then slots, then the header (``indexCount``,
``endPhyOffset``). Entries past ``indexCount`` are invisible and are overwritten by the next
batch; recovery re-adds records past ``endPhyOffset`` (idempotent). Lookups check each hit
against the record itself, so a hash collision or a stale slot costs a read, never a wrong
answer.
"""
from __future__ import annotations

import mmap
import os
import zlib
from pathlib import Path

from . import format as F
from .fsutil import ensure_dir, io_error, open_private

_HDR = F.INDEX_HEADER
_SLOT = F.INDEX_SLOT
_ENTRY = F.INDEX_ENTRY
_TABLE_END = F.INDEX_HEADER_SIZE + F.INDEX_SLOTS * 4


def key_hash(key: str | bytes) -> int:
    return zlib.crc32(key.encode() if isinstance(key, str) else key) & 0x7FFFFFFF


class KeyIndex:
    def __init__(self, directory: Path, slots: int = F.INDEX_SLOTS, entries: int = F.INDEX_ENTRIES) -> None:
        self.dir = directory
        self.slots = slots
        self.max_entries = entries
        self.table_end = F.INDEX_HEADER_SIZE + slots * 4

    def files(self) -> list[int]:
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            return []
        return sorted(int(n) for n in names if len(n) == 20 and n.isdigit())

    def path(self, base: int) -> Path:
        return self.dir / F.segment_name(base)

    def header(self, base: int) -> tuple[int, int, int, int, int, int]:
        with open(self.path(base), "rb") as fh:
            return _HDR.unpack(fh.read(F.INDEX_HEADER_SIZE))

    # -- writing (store write lock held) ---------------------------------------------------
    def _create(self, begin_phys: int, begin_ts: int) -> int:
        ensure_dir(self.dir)
        path = self.path(begin_phys)
        try:
            fd = open_private(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
            try:
                os.write(fd, _HDR.pack(begin_ts, begin_ts, begin_phys, -1, self.slots, 1))
                zero = bytes(64 * 1024)
                left = self.slots * 4
                while left:
                    left -= os.write(fd, zero[: min(left, len(zero))])
            finally:
                os.close(fd)
        except OSError as exc:
            try:
                path.unlink()
            except OSError:
                pass
            raise io_error(exc, f"create index file {path}") from exc
        return begin_phys

    def add(self, items: list[tuple[str | bytes, int]], store_ts: int) -> None:
        """Index ``(key, commit-log offset)`` pairs of one batch (offsets ascending); keys are
        str or already-encoded bytes."""
        if not items:
            return
        files = self.files()
        base = files[-1] if files else self._create(items[0][1], store_ts)
        while items:
            begin_ts, _end_ts, _begin_phys, end_phys, slots, count = self.header(base)
            items = [it for it in items if it[1] > end_phys]
            if not items:
                return
            room = self.max_entries - count
            if room <= 0:
                base = self._create(items[0][1], store_ts)
                continue
            now, items = items[:room], items[room:]
            self._add_to(base, now, store_ts, begin_ts, count)
            if items:
                base = self._create(items[0][1], store_ts)

    def _add_to(self, base: int, items: list[tuple[str, int]], store_ts: int, begin_ts: int, count: int) -> None:
        path = self.path(base)
        fd = open_private(path, os.O_RDWR)
        try:
            mm = mmap.mmap(fd, self.table_end)
            try:
                entries = bytearray()
                tdiff = max(0, min((store_ts - begin_ts) // 1000, 0x7FFFFFFF))
                slots = self.slots
                unpack_slot = _SLOT.unpack_from
                pack_slot = _SLOT.pack_into
                pack_entry = _ENTRY.pack
                n = count
                updates = []
                crc32 = zlib.crc32
                for key, phys in items:
                    h = crc32(key if key.__class__ is bytes else key.encode()) & 0x7FFFFFFF
                    sp = F.INDEX_HEADER_SIZE + (h % slots) * 4
                    prev = unpack_slot(mm, sp)[0]
                    entries += pack_entry(h, phys, tdiff, prev)
                    pack_slot(mm, sp, n)
                    updates.append((sp, prev))
                    n += 1
                try:
                    off = self.table_end + count * F.INDEX_ENTRY_SIZE
                    view = memoryview(entries)
                    while view:
                        w = os.pwrite(fd, view, off)
                        view, off = view[w:], off + w
                except OSError as exc:
                    # entries did not land: put the slots back so nothing points at them
                    for sp, prev in reversed(updates):
                        pack_slot(mm, sp, prev)
                    raise io_error(exc, f"append to {path}") from exc
                _HDR.pack_into(mm, 0, begin_ts, store_ts, base, items[-1][1], slots, n)
            finally:
                mm.close()
        finally:
            os.close(fd)

    def truncate_after(self, end_phys: int) -> None:
        """Forget index files that begin at or after ``end_phys`` (recovery); entries of
        older files that point past it are filtered at lookup."""
        for base in self.files():
            if base >= end_phys:
                self.path(base).unlink()

    # -- reading ---------------------------------------------------------------------------
    def lookup(self, key: str, limit: int = 64) -> list[int]:
        """Commit-log offsets whose entry hash matches ``key``, newest first (unverified)."""
        h = key_hash(key)
        out: list[int] = []
        for base in reversed(self.files()):
            try:
                fd = os.open(self.path(base), os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                continue
            try:
                hdr = os.pread(fd, F.INDEX_HEADER_SIZE, 0)
                if len(hdr) < F.INDEX_HEADER_SIZE:
                    continue
                _b, _e, _bp, _ep, slots, count = _HDR.unpack(hdr)
                if slots != self.slots or count < 1:
                    continue
                table_end = F.INDEX_HEADER_SIZE + slots * 4
                raw = os.pread(fd, 4, F.INDEX_HEADER_SIZE + (h % slots) * 4)
                n = _SLOT.unpack(raw)[0] if len(raw) == 4 else 0
                seen = 0
                while 0 < n < count and seen < count:
                    seen += 1
                    ent = os.pread(fd, F.INDEX_ENTRY_SIZE, table_end + n * F.INDEX_ENTRY_SIZE)
                    if len(ent) < F.INDEX_ENTRY_SIZE:
                        break
                    eh, phys, _td, prev = _ENTRY.unpack(ent)
                    if eh == h:
                        out.append(phys)
                        if len(out) >= limit:
                            return out
                    if prev >= n:
                        break
                    n = prev
            finally:
                os.close(fd)
        return out
