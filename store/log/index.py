"""The key index: ``topic#key`` → commit-log offsets, without scanning the log.

Each file ``index/<20-digit begin offset>`` is RocketMQ's IndexFile shape (``format.py``): a
40-byte header, a slot table of ``INDEX_SLOTS`` ints, then 20-byte entries chained newest to
oldest through ``prevIndex``. The header and slot table (512 KiB) are written as real zeros
when the file is created, so slot updates through ``mmap`` can never fault on a full disk;
entries are appended with ``pwrite`` after them, so a full disk surfaces as an error.

Crash order inside a batch: entries first, then slots, then the header (``indexCount``,
``endPhyOffset``). Entries past ``indexCount`` are invisible and are overwritten by the next
batch; recovery first points any slot a killed writer left past ``indexCount`` back along the
entries' ``prevIndex`` (:meth:`KeyIndex.repair`), then re-adds records past ``endPhyOffset``
(idempotent). Lookups check each hit
against the record itself, so a hash collision or a stale slot costs a read, never a wrong
answer.
"""
from __future__ import annotations

import array
import bisect
import mmap
import os
import struct
import sys
from collections import deque
from collections.abc import Sequence
from itertools import repeat
from pathlib import Path

from store.errors import CorruptionError, io_error
from store.fsutil import SegmentListing, ensure_dir, fdatasync_path, open_private, pwrite_all, sync_dir_if_changed
from store.log import format as F
from store.log import indexchains
from store.log.record import crc32

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Any

_HDR = F.INDEX_HEADER
_SLOT = F.INDEX_SLOT
_ENTRY = F.INDEX_ENTRY
_HDR_SIZE = F.INDEX_HEADER_SIZE
_TABLE_END = F.INDEX_HEADER_SIZE + F.INDEX_SLOTS * 4
_LITTLE = sys.byteorder == "little"
_WHOLE_TABLE = 2048   # a batch at least this big reads and writes the slot table in one piece
_ARRAYS_FROM = 256    # ... or, with numpy loaded, is indexed as arrays (KeyIndex._add_arrays)
_NP_ENTRY: list[object] = []


def _np_entry(np: object) -> object:
    """The numpy dtype of an index entry (``format.INDEX_ENTRY``)."""
    if not _NP_ENTRY:
        dt = np.dtype([("hash", ">i4"), ("phys", ">i8"), ("tdiff", ">i4"), ("prev", ">i4")])  # type: ignore[attr-defined]
        assert dt.itemsize == F.INDEX_ENTRY_SIZE
        _NP_ENTRY.append(dt)
    return _NP_ENTRY[0]


def key_hash(key: str | bytes) -> int:
    return int(crc32(key.encode() if isinstance(key, str) else key)) & 0x7FFFFFFF


class KeyIndex:
    def __init__(self, directory: Path, slots: int = F.INDEX_SLOTS, entries: int = F.INDEX_ENTRIES) -> None:
        self.dir = directory
        self.slots = slots
        self.max_entries = entries
        self.table_end = F.INDEX_HEADER_SIZE + slots * 4
        self._listing = SegmentListing(directory)
        # The newest file's slot table stays mapped between batches: mapping it anew for each
        # batch cost a page fault for every slot touched. (base, fd, map)
        self._mapped: tuple[int, int, mmap.mmap] | None = None

    def files(self) -> list[int]:
        return self._listing.bases()

    def path(self, base: int) -> Path:
        return self.dir / F.segment_name(base)

    def _map(self, base: int, checked: bool = False) -> tuple[int, mmap.mmap]:
        """The descriptor and slot-table map of file ``base``, reused while the file is still
        linked (one ``fstat``, unless the caller just ``checked``): a file removed or replaced
        by a new one of the same name (a rebuild renames it into place) is mapped anew."""
        m = self._mapped
        if m is not None and m[0] == base and (checked or os.fstat(m[1]).st_nlink):
            return m[1], m[2]
        self.close()
        path = self.path(base)
        fd = open_private(path, os.O_RDWR)
        try:
            if os.fstat(fd).st_size < self.table_end:
                # never mapped past its end (SIGBUS); recovery rebuilds such a file
                raise CorruptionError(str(path), 0, "index file is shorter than its header and slot "
                                      "table (run: mqctl store recover)")
            mm = mmap.mmap(fd, self.table_end)
        except BaseException:
            os.close(fd)
            raise
        self._mapped = (base, fd, mm)
        return fd, mm

    def close(self) -> None:
        if self._mapped is not None:
            _base, fd, mm = self._mapped
            self._mapped = None
            mm.close()
            os.close(fd)

    def header(self, base: int) -> tuple[int, int, int, int, int, int]:
        with open(self.path(base), "rb") as fh:
            return _HDR.unpack(fh.read(F.INDEX_HEADER_SIZE))

    # -- writing (store write lock held) ---------------------------------------------------
    def _create(self, begin_phys: int, begin_ts: int) -> int:
        """Make file ``begin_phys`` whole or not at all: header and slot table are written to
        a temp file that is then renamed into place, so a writer killed while making one can
        no longer leave a short file behind (the store failed to open after that). It is not
        synced here: like every derived file it becomes durable with the next derived flush
        (:meth:`Store.flush_durable`), and after a power cut before that, recovery finds it
        short or empty and rebuilds it from the log."""
        ensure_dir(self.dir, durable=False)
        path = self.path(begin_phys)
        tmp = self.dir / f".{F.segment_name(begin_phys)}.{os.getpid()}.tmp"
        try:
            fd = open_private(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
            try:
                pwrite_all(fd, _HDR.pack(begin_ts, begin_ts, begin_phys, -1, self.slots, 1), 0)
                # the slot table as real zeros: slot writes through mmap can then never
                # fault on a full disk
                zero = bytes(64 * 1024)
                pos, end = F.INDEX_HEADER_SIZE, self.table_end
                while pos < end:
                    n = min(end - pos, len(zero))
                    pwrite_all(fd, zero[:n], pos)
                    pos += n
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except OSError as exc:
            for leftover in (tmp, path):
                try:
                    leftover.unlink()
                except OSError:
                    pass
            raise io_error(exc, f"create index file {path}") from exc
        self._listing = SegmentListing(self.dir)
        return begin_phys

    def sync_files(self, since_end: int, since_s: int = 0) -> None:
        """``fdatasync`` every index file that may hold entries for offsets at or after
        ``since_end`` (the newest, and any that ends there or later): the derived-durability
        step of :meth:`Store.flush_durable`. Slot and header writes go through ``mmap``;
        ``fdatasync`` writes those pages back too."""
        files = self.files()
        for i, base in enumerate(files):
            if i < len(files) - 1:
                try:
                    if self.header(base)[3] < since_end:
                        continue
                except (OSError, struct.error):
                    pass
            fdatasync_path(self.path(base))
        sync_dir_if_changed(self.dir, since_s)

    def snapshot(self, base: int) -> bytes:
        """File ``base`` whole, in one read (``store check`` judges and indexes the same bytes)."""
        return self.path(base).read_bytes()

    def problem(self, base: int, thorough: bool = False, data: bytes | None = None) -> str | None:
        """Why file ``base`` cannot be trusted, or None. Always: its size against its
        header and slot table, and the header's own fields. ``thorough`` also reads every
        entry and slot: entries lost to a power cut (zeros), chains that point forward or
        out of range, and entries no slot chain reaches (a lookup would silently miss them).
        ``data``: its :meth:`snapshot` (thorough), whose length is then its size."""
        try:
            size = os.stat(self.path(base)).st_size if data is None else len(data)
            if size < self.table_end:
                return f"shorter ({size} bytes) than its header and slot table ({self.table_end} bytes)"
            if data is None:
                with open(self.path(base), "rb") as fh:
                    data = fh.read() if thorough else fh.read(F.INDEX_HEADER_SIZE)
        except OSError as exc:
            return f"unreadable: {exc.strerror or exc}"
        _bts, _ets, begin_phys, end_phys, slots, count = _HDR.unpack_from(data, 0)
        if slots != self.slots:
            return f"header names {slots} slots, not {self.slots}"
        if begin_phys != base:
            return f"header begins at offset {begin_phys}, but the file is named {base}"
        if not 1 <= count <= self.max_entries:
            return f"header counts {count} entries (1 to {self.max_entries} allowed)"
        if count > 1 and size < self.table_end + count * F.INDEX_ENTRY_SIZE:
            return f"header counts {count} entries but the file holds {(size - self.table_end) // F.INDEX_ENTRY_SIZE}"
        if count > 1 and end_phys < begin_phys:
            return f"header ends at offset {end_phys}, before it begins ({begin_phys})"
        if not thorough:
            return None
        return indexchains.problem(data, self.table_end, count, begin_phys)

    def reachable(self, data: bytes) -> tuple[Any, Any]:
        """The entries of a file's :meth:`snapshot` (sound by :meth:`problem`) that a lookup of
        their own key reaches (on their key's slot chain), as arrays ``(commit-log offsets
        ascending, key hashes)`` (:func:`indexchains.reachable`)."""
        return indexchains.reachable(data, self.table_end, self.slots)

    def add(self, items: Sequence[tuple[str | bytes, int]], store_ts: int) -> None:
        """Index ``(key, commit-log offset)`` pairs of one batch (offsets ascending); keys are
        str or already-encoded bytes."""
        if not items:
            return
        self.add_hashes([crc32(k if isinstance(k, bytes) else k.encode()) & 0x7FFFFFFF for k, _ in items],
                        [p for _, p in items], store_ts)

    def add_hashes(self, hashes: list[int], physs: list[int], store_ts: int) -> None:
        """Like :meth:`add`, with each key given as its :func:`key_hash` (the producer's fast
        path computes them without building the keys). ``physs`` is ascending."""
        if not hashes:
            return
        # The file the last batch mapped is still the newest when linked and not full: a later
        # one is begun only once it is full, and one recovery removes or rebuilds is unlinked.
        m = self._mapped
        kept = m is not None and os.fstat(m[1]).st_nlink > 0 and _HDR.unpack_from(m[2], 0)[5] < self.max_entries
        if m is not None and kept:
            base = m[0]
        else:
            files = self.files()
            base = files[-1] if files else self._create(physs[0], store_ts)
        while hashes:
            try:
                fd, mm = self._map(base, checked=kept)
            except OSError as exc:
                raise io_error(exc, f"open index file {self.path(base)}") from exc
            kept = False
            begin_ts, _end_ts, _begin_phys, end_phys, slots, count = _HDR.unpack_from(mm, 0)
            if physs[0] <= end_phys:  # already indexed (recovery replays records): skip them
                i = bisect.bisect_right(physs, end_phys)
                hashes, physs = hashes[i:], physs[i:]
                if not hashes:
                    return
            room = self.max_entries - count
            if room <= 0:
                base = self._create(physs[0], store_ts)
                continue
            self._add_to(base, fd, mm, hashes[:room], physs[:room], store_ts, begin_ts, count)
            hashes, physs = hashes[room:], physs[room:]
            if hashes:
                base = self._create(physs[0], store_ts)

    def _add_to(self, base: int, fd: int, mm: mmap.mmap, hashes: list[int], physs: list[int], store_ts: int,
                begin_ts: int, count: int) -> None:
        """Append entries to one file. Order, for a crash at any point: entries (invisible
        past ``indexCount``), then slots, then the header. A slot left pointing at an entry
        past ``indexCount`` by a killed writer is resolved by :meth:`repair`."""
        tdiff = max(0, min((store_ts - begin_ts) // 1000, 0x7FFFFFFF))
        slots = self.slots
        if len(hashes) >= _ARRAYS_FROM and "numpy" in sys.modules:
            self._add_arrays(fd, mm, base, hashes, physs, tdiff, count)
            _HDR.pack_into(mm, 0, begin_ts, store_ts, base, physs[-1], slots, count + len(hashes))
            return
        pack_entry = _ENTRY.pack
        n = count
        entries = bytearray()
        if len(hashes) >= _WHOLE_TABLE:
            # big batch: the slot table as an array (one copy in, one copy out)
            table = array.array("i")
            table.frombytes(mm[F.INDEX_HEADER_SIZE:self.table_end])
            if _LITTLE:
                table.byteswap()
            for h, phys in zip(hashes, physs):
                sl = h % slots
                prev = table[sl]
                if prev >= n or prev < 0:   # [count, n) are this batch's own entries
                    prev = self._resolve(fd, prev, count)
                entries += pack_entry(h, phys, tdiff, prev)
                table[sl] = n
                n += 1
            self._write_entries(fd, base, entries, count)
            if _LITTLE:
                table.byteswap()
            mm[F.INDEX_HEADER_SIZE:self.table_end] = table.tobytes()
        else:
            sps = [_HDR_SIZE + h % slots * 4 for h in hashes]
            if self._add_distinct(fd, mm, base, hashes, physs, tdiff, count, sps):
                n = count + len(hashes)
            else:
                unpack_slot = _SLOT.unpack_from
                pack_slot = _SLOT.pack_into
                touched: dict[int, int] = {}
                for h, phys, sp in zip(hashes, physs, sps):
                    seen = touched.get(sp)
                    if seen is not None:
                        prev = seen
                    else:
                        prev = unpack_slot(mm, sp)[0]
                        if prev >= count or prev < 0:
                            prev = self._resolve(fd, prev, count)
                    entries += pack_entry(h, phys, tdiff, prev)
                    touched[sp] = n
                    n += 1
                self._write_entries(fd, base, entries, count)
                for sp, v in touched.items():
                    pack_slot(mm, sp, v)
        _HDR.pack_into(mm, 0, begin_ts, store_ts, base, physs[-1], slots, n)

    def _add_distinct(self, fd: int, mm: mmap.mmap, base: int, hashes: list[int], physs: list[int],
                      tdiff: int, count: int, sps: list[int]) -> bool:
        """:meth:`_add_to`'s entries and slots when no two keys of the batch share a slot
        (``sps``: each key's slot position), the usual case for a few hundred keys in ~128k
        slots: each entry's ``prevIndex`` is then its slot's value before the batch, and the
        loop's steps are C iterations (``map``, one ``join``). The same bytes in the same order
        as the loop (entries, then slots). False, having done nothing, when slots repeat."""
        k = len(hashes)
        if k == 1:   # one key (a single send): the same steps without the list machinery
            sp = sps[0]
            prev = _SLOT.unpack_from(mm, sp)[0]
            if prev >= count or prev < 0:   # left by a killed writer
                prev = self._resolve(fd, prev, count)
            self._write_entries(fd, base, _ENTRY.pack(hashes[0], physs[0], tdiff, prev), count)
            _SLOT.pack_into(mm, sp, count)
            return True
        if len(set(sps)) != k:
            return False
        prevs = [t[0] for t in map(_SLOT.unpack_from, repeat(mm), sps)]
        if max(prevs) >= count or min(prevs) < 0:   # left by a killed writer
            prevs = [p if 0 <= p < count else self._resolve(fd, p, count) for p in prevs]
        self._write_entries(fd, base, b"".join(map(_ENTRY.pack, hashes, physs, repeat(tdiff), prevs)), count)
        deque(map(_SLOT.pack_into, repeat(mm), sps, range(count, count + k)), maxlen=0)
        return True

    def _add_arrays(self, fd: int, mm: mmap.mmap, base: int, hashes: list[int], physs: list[int],
                    tdiff: int, count: int) -> None:
        """:meth:`_add_to`'s entries and slots for a whole batch as arrays (numpy, when this
        process has it loaded already): the same bytes as the loop, in the same order (entries,
        then slots), without a Python step per entry. An entry's ``prevIndex`` is the batch's
        previous entry in its slot, or for the first one the slot's value before the batch."""
        np = sys.modules["numpy"]
        k = len(hashes)
        h = np.array(hashes, np.int64)
        sl = h % self.slots
        idx = np.arange(count, count + k, dtype=np.int64)
        order = np.argsort(sl, kind="stable")   # each slot's entries together, in batch order
        ss = sl[order]
        first = np.ones(k, bool)
        first[1:] = ss[1:] != ss[:-1]
        prev = np.empty(k, np.int64)
        prev[order[1:][~first[1:]]] = idx[order[:-1][~first[1:]]]
        heads = order[first]
        table = np.frombuffer(mm, ">i4", self.slots, F.INDEX_HEADER_SIZE)
        try:
            old = table[sl[heads]].astype(np.int64)
            for j in np.flatnonzero((old >= count) | (old < 0)).tolist():
                old[j] = self._resolve(fd, int(old[j]), count)   # left by a killed writer
            prev[heads] = old
            ent = np.empty(k, _np_entry(np))
            ent["hash"] = h
            ent["phys"] = physs
            ent["tdiff"] = tdiff
            ent["prev"] = prev
            self._write_entries(fd, base, ent.tobytes(), count)
            last = np.ones(k, bool)
            last[:-1] = first[1:]
            table[ss[last]] = idx[order[last]]
        finally:
            del table   # the map is closed later: no view of it may outlive this call

    def _write_entries(self, fd: int, base: int, entries: bytes | bytearray, count: int) -> None:
        try:
            pwrite_all(fd, entries, self.table_end + count * F.INDEX_ENTRY_SIZE)
        except OSError as exc:
            raise io_error(exc, f"append to {self.path(base)}") from exc

    def _resolve(self, fd: int, value: int, count: int) -> int:
        """A slot value a killed writer left past ``indexCount``: its entries were written
        before the slot, so following their ``prevIndex`` leads back to the chain as it was."""
        seen = 0
        while value >= count and seen < 1 << 20:
            seen += 1
            raw = os.pread(fd, F.INDEX_ENTRY_SIZE, self.table_end + value * F.INDEX_ENTRY_SIZE)
            if len(raw) < F.INDEX_ENTRY_SIZE:
                return 0
            prev = _ENTRY.unpack(raw)[3]
            if prev >= value:
                return 0
            value = prev
        return value if value > 0 else 0

    def repair(self) -> int:
        """Point every slot of the newest file that a killed writer left past ``indexCount``
        back at its chain (recovery runs this before re-indexing). Returns slots fixed."""
        files = self.files()
        if not files:
            return 0
        path = self.path(files[-1])
        try:
            fd = open_private(path, os.O_RDWR)
        except OSError:
            return 0
        fixed = 0
        try:
            hdr = os.pread(fd, F.INDEX_HEADER_SIZE, 0)
            if len(hdr) < F.INDEX_HEADER_SIZE:
                return 0
            count = _HDR.unpack(hdr)[5]
            raw = os.pread(fd, self.slots * 4, F.INDEX_HEADER_SIZE)
            table = array.array("i")
            table.frombytes(raw[: len(raw) - len(raw) % 4])
            if _LITTLE:
                table.byteswap()
            for sl, v in enumerate(table):
                if v >= count or v < 0:
                    good = self._resolve(fd, v, count) if v > 0 else 0
                    os.pwrite(fd, _SLOT.pack(good), F.INDEX_HEADER_SIZE + sl * 4)
                    fixed += 1
        finally:
            os.close(fd)
        return fixed

    def remove_leftovers(self) -> None:
        """Remove files a writer was making when it died (``_create``'s temp files)."""
        for leftover in self.dir.glob(".*.tmp"):
            try:
                leftover.unlink()
            except OSError:
                pass

    def drop_from(self, base: int) -> None:
        """Remove file ``base`` and every later one (recovery re-indexes their records)."""
        self.close()
        for later in [b for b in self.files() if b >= base]:
            try:
                self.path(later).unlink()
            except FileNotFoundError:
                pass

    def fence(self, end_phys: int) -> None:
        """Forget offsets at or past ``end_phys``: files that begin there go, an older file's
        end offset moves back so those offsets are indexed again (recovery, a batch's undo)."""
        self.truncate_after(end_phys)
        for base in self.files():
            hdr = list(self.header(base))
            if hdr[3] >= end_phys:
                hdr[3] = end_phys - 1
                fd = open_private(self.path(base), os.O_WRONLY)
                try:
                    pwrite_all(fd, _HDR.pack(*hdr), 0)
                finally:
                    os.close(fd)

    def truncate_after(self, end_phys: int) -> None:
        """Forget index files that begin at or after ``end_phys`` (recovery); entries of
        older files that point past it are filtered at lookup."""
        for base in self.files():
            if base >= end_phys:
                self.path(base).unlink()

    # -- reading ---------------------------------------------------------------------------
    def lookup(self, key: str, limit: int = 64, damaged: list[str] | None = None) -> list[int]:
        """Commit-log offsets whose entry hash matches ``key``, newest first (unverified);
        ``damaged`` gets each file too short for its header (it cannot answer)."""
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
                    if damaged is not None:
                        damaged.append(str(self.path(base)))
                    continue
                _b, _e, _bp, _ep, slots, count = _HDR.unpack(hdr)
                if slots != self.slots or count < 1:
                    continue
                table_end = F.INDEX_HEADER_SIZE + slots * 4
                if damaged is not None and os.fstat(fd).st_size < table_end + (
                        count * F.INDEX_ENTRY_SIZE if count > 1 else 0):
                    damaged.append(str(self.path(base)))
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

