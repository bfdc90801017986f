"""The key index: ``topic#key`` → commit-log offsets, without scanning the log.

Each file ``index/<20-digit begin offset>`` is RocketMQ's IndexFile shape (``format.py``): a 40-byte
header, a slot table of ``INDEX_SLOTS`` ints, then 20-byte entries chained newest to oldest through
``prevIndex``. The header and slot table (512 KiB) are written as real zeros when the file is created,
so a slot write never needs a new block; every write is a ``pwrite`` (a full disk surfaces as an error;
a file cut short under a writer cannot kill it, as a write through a map did with SIGBUS: the writer
begins a new file, and the next lookup repairs the cut one, ``indexends.py``).

Crash order inside a batch: entries first, then slots, then the header (``indexCount``,
``endPhyOffset``). Entries past ``indexCount`` are invisible and are overwritten by the next batch;
recovery first points any slot a killed writer left past ``indexCount`` back along the entries'
``prevIndex`` (:meth:`KeyIndex.repair`), then re-adds records past ``endPhyOffset`` (idempotent).
Lookups check each hit against the record itself, so a hash collision or a stale slot costs a read,
never a wrong answer; a hit where no record starts is the file's damage, repaired by the lookup
(``reads.py``). Retention deletes files only through :meth:`KeyIndex.remove_files` (then syncs the dir).
"""
from __future__ import annotations

import array
import bisect
import os
import struct
import sys
from collections import deque
from collections.abc import Sequence
from itertools import repeat
from pathlib import Path

from store import fsutil
from store.errors import CorruptionError, io_error
from store.fsutil import SegmentListing, ensure_dir, fdatasync_path, open_private, pwrite_all, sync_dir_if_changed
from store.layout import segment_file
from store.log import filestat, indexchains
from store.log import format as F
from store.log.record import crc32

_CRC_MASK = F.CRC_MASK
TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Any, Callable

_HDR, _SLOT, _ENTRY, _HDR_SIZE = F.INDEX_HEADER, F.INDEX_SLOT, F.INDEX_ENTRY, F.INDEX_HEADER_SIZE
_LITTLE = sys.byteorder == "little"
_FEW = 8              # fewer keys than this read and write their slots one by one (KeyIndex._add_to)
_ARRAYS_FROM = 256    # a batch this big, with numpy loaded, is indexed as arrays (indexchains.add_arrays)
# Slots at most this far apart are written back in one write: a call costs more than copying
# that much. Measured (CPU of the writes of a batch's slots, 512 KiB table, random slots, 2
# cores under load ~14): 100 keys 54 us with 4 KiB, 37 us with 16 KiB, 35 us with the whole
# span; 8 keys 6.8 us with 4 or 16 KiB, 25 us with the whole span.
_RUN_GAP = 16384

# The loop of _add_to in C (``nativecheck.index_add``) where the package was built with it:
# entries, slots and the ranges to write back (a build of an older source lacks it).
_add_native: Any = None
try:
    from store.log import nativecheck
    _add_native = getattr(nativecheck, "index_add", None)
except ImportError:
    pass


def key_hash(key: str | bytes) -> int:
    return int(crc32(key.encode() if isinstance(key, str) else key)) & _CRC_MASK


class KeyIndex:
    def __init__(self, directory: Path, slots: int = F.INDEX_SLOTS, entries: int = F.INDEX_ENTRIES) -> None:
        self.dir = directory
        self.slots = slots
        self.max_entries = entries
        self.table_end = F.INDEX_HEADER_SIZE + slots * 4
        self._listing = SegmentListing(directory)
        # The newest file's descriptor stays open between batches, and a copy of its slot
        # table with the header last written (``_add_to``): reading the slots anew for each
        # batch cost a read per slot touched, or the whole table. (base, fd)
        self._open: tuple[int, int] | None = None
        self._table: bytearray | None = None
        self._hdr: tuple[int, int, int, int, int, int] | None = None
        self._hdr_raw = b""   # (``_hdr`` as written, while it is not None)

    def files(self) -> list[int]:
        return self._listing.bases()

    def path(self, base: int) -> Path:
        return segment_file(self.dir, base)

    def _file(self, base: int, checked: bool = False) -> int:
        """The descriptor of file ``base``, reused while the file is still linked (one
        ``fstat``, unless the caller just ``checked``): a file removed or replaced by a new
        one of the same name (a rebuild renames it into place) is opened anew."""
        m = self._open
        if m is not None and m[0] == base and (checked or filestat.untimed(m[1])[0]):
            return m[1]
        self.close()
        try:
            fd = open_private(self.path(base), os.O_RDWR)
        except OSError as exc:
            raise io_error(exc, f"open index file {self.path(base)}") from exc
        self._open = (base, fd)
        return fd

    def close(self) -> None:
        self._table = self._hdr = None
        if self._open is not None:
            fd = self._open[1]
            self._open = None
            os.close(fd)

    def header(self, base: int, data: bytes | None = None) -> tuple[int, int, int, int, int, int]:
        if data is not None:   # (of the file's bytes as the caller read them)
            return _HDR.unpack_from(data, 0)
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
        tmp = fsutil.temp_path(path)
        try:
            fd = open_private(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
            try:
                pwrite_all(fd, _HDR.pack(begin_ts, begin_ts, begin_phys, -1, self.slots, 1), 0)
                # the slot table as real zeros, not a hole: slot writes then never need a block
                pwrite_all(fd, bytes(self.table_end - _HDR_SIZE), _HDR_SIZE)
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except OSError as exc:
            for leftover in (tmp, path):
                try:
                    leftover.unlink()
                except OSError:
                    pass
            # (the size said: an index file is made whole, its slot table written as zeros)
            raise io_error(exc, f"create index file {path} ({self.table_end:,} bytes, written whole)") from exc
        self._listing = SegmentListing(self.dir)
        return begin_phys

    def sync_files(self, since_end: int, since_s: int = 0) -> None:
        """``fdatasync`` every index file that may hold entries for offsets at or after
        ``since_end`` (the newest, and any that ends there or later): the derived-durability
        step of :meth:`Store.flush_durable`."""
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
            if data is None:
                with open(self.path(base), "rb") as fh:
                    data = fh.read() if thorough else fh.read(F.INDEX_HEADER_SIZE)
        except OSError as exc:
            return f"unreadable: {exc.strerror or exc}"
        why = self._header_problem(base, data, size)
        if why is not None or not thorough:
            return why
        return indexchains.problem(data, self.table_end, _HDR.unpack_from(data, 0)[5], base)

    def _header_problem(self, base: int, head: bytes, size: int) -> str | None:
        """Why a file of ``size`` bytes that begins with ``head`` cannot be trusted by its size
        and its header's own fields, or None (:meth:`problem`; a writer's look before a batch)."""
        if size < self.table_end or len(head) < F.INDEX_HEADER_SIZE:
            return f"shorter ({size} bytes) than its header and slot table ({self.table_end} bytes)"
        _bts, _ets, begin_phys, end_phys, slots, count = _HDR.unpack_from(head, 0)
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
        return None

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
        self.add_hashes([crc32(k if isinstance(k, bytes) else k.encode()) & _CRC_MASK for k, _ in items],
                        [p for _, p in items], store_ts)

    def add_hashes(self, hashes: list[int], physs: list[int], store_ts: int) -> None:
        """Like :meth:`add`, with each key given as its :func:`key_hash` (the producer's fast
        path computes them without building the keys). ``physs`` is ascending."""
        if not hashes:
            return
        # The file the last batch wrote is still the newest when linked and not full: a later
        # one is begun only once it is full, and one recovery removes or rebuilds is unlinked.
        m = self._open
        hdr = self._sound_header(*m) if m is not None else None
        if m is not None and hdr is not None and hdr[5] < self.max_entries:
            base = m[0]
        else:
            files = self.files()
            base, hdr = files[-1] if files else self._create(physs[0], store_ts), None
        made = False
        while hashes:
            fd = self._file(base, checked=hdr is not None)
            hdr = hdr or self._sound_header(base, fd)
            if hdr is None:   # cut by hand: not appended to (holes); the next lookup repairs it
                if made:
                    raise CorruptionError(str(self.path(base)), 0, "index file cut short as it was made")
                base, made = self._create(physs[0], store_ts), True
                continue
            end_phys, count = hdr[3], hdr[5]
            if physs[0] <= end_phys:  # indexed (recovery replays records): skipped, but of the
                # file's last record only the keys it holds (a roll may have split its keys)
                i, j = bisect.bisect_left(physs, end_phys), bisect.bisect_right(physs, end_phys)
                i += min(j - i, indexchains.keys_of_last(fd, self.table_end, count, end_phys)) if j > i else 0
                hashes, physs = hashes[i:], physs[i:]
                if not hashes:
                    return
            room = self.max_entries - count
            if room > 0:
                self._add_to(base, fd, hdr, hashes[:room], physs[:room], store_ts)
                hashes, physs = hashes[room:], physs[room:]
            if hashes:
                base, hdr = self._create(physs[0], store_ts), None

    def _sound_header(self, base: int, fd: int) -> tuple[int, int, int, int, int, int] | None:
        """The header of open file ``base`` for a batch to append to, or None: unlinked
        (recovery removed or replaced it), or found unsound (:meth:`_header_problem`: cut)."""
        try:
            links, size, _ino = filestat.untimed(fd)
            raw = os.pread(fd, F.INDEX_HEADER_SIZE, 0)
        except OSError as exc:
            raise io_error(exc, f"read {self.path(base)}") from exc
        known = self._hdr
        if (known is not None and links and raw == self._hdr_raw and known[2] == base
                and size >= self.table_end + known[5] * F.INDEX_ENTRY_SIZE):
            # the header this handle wrote last (sound when written: ``_add_to``), over every
            # entry it counts: what ``_header_problem`` would find, without its look
            return known
        if not links or self._header_problem(base, raw, size) is not None:
            return None
        return _HDR.unpack(raw)

    def _add_to(self, base: int, fd: int, hdr: tuple[int, int, int, int, int, int], hashes: list[int],
                physs: list[int], store_ts: int) -> None:
        """Append entries to one file. Order, for a crash at any point: entries (invisible
        past ``indexCount``), then slots, then the header. A slot left pointing at an entry
        past ``indexCount`` by a killed writer is resolved by :meth:`repair`."""
        begin_ts, count = hdr[0], hdr[5]
        tdiff = max(0, min((store_ts - begin_ts) // 1000, 0x7FFFFFFF))
        # This handle's copy of the slot table (at the file's positions) is current while the
        # header is the one it wrote last (every batch ends with the header; slots a killed
        # writer left past ``indexCount`` resolve to the copy's values). Read anew for all but
        # a few keys, or when this handle wrote the last batch (a producer alone keeps it).
        copy = self._table if self._hdr == hdr else None
        if copy is None and (len(hashes) >= _FEW or self._hdr == hdr):
            copy = self._read_table(fd, base)
        self._table = self._hdr = None   # (until the header below is written)
        if copy is None:
            self._add_few(fd, base, hashes, physs, tdiff, count)
        else:
            # the entries and the copy's slots in C where built (None: a slot a killed writer
            # left, which the Python loops, its definition, resolve)
            added = None if _add_native is None else _add_native(copy, self.slots, hashes, physs, tdiff, count,
                                                                 _RUN_GAP)
            if added is None:
                entries, positions = self._entries(fd, copy, hashes, physs, tdiff, count)
                added = entries, indexchains.runs(positions, _RUN_GAP, self.table_end)
            self._write_entries(fd, base, added[0], count)
            view = memoryview(copy)
            for start, stop in added[1]:
                self._write(fd, base, view[start:stop], start)
        new = (begin_ts, store_ts, base, physs[-1], self.slots, count + len(hashes))
        raw = _HDR.pack(*new)
        self._write(fd, base, raw, 0)
        self._table, self._hdr, self._hdr_raw = copy, new, raw

    def _add_few(self, fd: int, base: int, hashes: list[int], physs: list[int], tdiff: int, count: int) -> None:
        """:meth:`_add_to`'s few keys without a current copy: each slot read and written."""
        touched: dict[int, int] = {}
        entries = bytearray()
        for n, (h, phys) in enumerate(zip(hashes, physs), count):
            sp = _HDR_SIZE + h % self.slots * 4
            prev = touched.get(sp, -1)
            if prev < 0:
                raw = os.pread(fd, 4, sp)
                prev = _SLOT.unpack(raw)[0] if len(raw) == 4 else 0
                if prev >= count or prev < 0:
                    prev = self._resolve(fd, prev, count)
            entries += _ENTRY.pack(h, phys, tdiff, prev)
            touched[sp] = n
        self._write_entries(fd, base, entries, count)
        for sp, v in touched.items():
            self._write(fd, base, _SLOT.pack(v), sp)

    def _entries(self, fd: int, copy: bytearray, hashes: list[int], physs: list[int], tdiff: int,
                 count: int) -> tuple[bytes | bytearray, list[int]]:
        """The batch's entries, and the file positions of the slots changed (updated in
        ``copy``): each entry's ``prevIndex`` is its slot's value before it (the batch's
        previous entry in that slot, or what the slot held, ``_resolve``d when a killed writer
        left it past ``count``), the slot then the entry's number. The definition of
        ``nativecheck.index_add``; as arrays for big batches (numpy loaded), and as ``map``
        steps when no two keys share a slot (the usual case for a few hundred keys in ~128k
        slots: each ``prevIndex`` is then its slot's value before the batch)."""
        sps = [_HDR_SIZE + h % self.slots * 4 for h in hashes]
        if len(hashes) >= _ARRAYS_FROM and "numpy" in sys.modules:
            return indexchains.add_arrays(copy, self.slots, hashes, physs, tdiff, count,
                                          lambda v: self._resolve(fd, v, count))
        distinct = self._entries_distinct(fd, copy, hashes, physs, tdiff, count, sps)
        if distinct is not None:
            return distinct
        unpack_slot = _SLOT.unpack_from
        touched: dict[int, int] = {}
        entries = bytearray()
        for n, (h, phys, sp) in enumerate(zip(hashes, physs, sps), count):
            prev = touched.get(sp)
            if prev is None:
                prev = unpack_slot(copy, sp)[0]
                if prev >= count or prev < 0:
                    prev = self._resolve(fd, prev, count)
            entries += _ENTRY.pack(h, phys, tdiff, prev)
            touched[sp] = n
        deque(map(_SLOT.pack_into, repeat(copy), touched.keys(), touched.values()), maxlen=0)
        return entries, list(touched)

    def _entries_distinct(self, fd: int, copy: bytearray, hashes: list[int], physs: list[int], tdiff: int,
                          count: int, sps: list[int]) -> tuple[bytes, list[int]] | None:
        """:meth:`_entries` when no two keys share a slot (``sps``: each key's slot position),
        else None (nothing changed)."""
        if len(set(sps)) != len(sps):
            return None
        prevs = [t[0] for t in map(_SLOT.unpack_from, repeat(copy), sps)]
        if max(prevs) >= count or min(prevs) < 0:   # left by a killed writer
            prevs = [p if 0 <= p < count else self._resolve(fd, p, count) for p in prevs]
        deque(map(_SLOT.pack_into, repeat(copy), sps, range(count, count + len(sps))), maxlen=0)
        return b"".join(map(_ENTRY.pack, hashes, physs, repeat(tdiff), prevs)), sps

    def _read_table(self, fd: int, base: int) -> bytearray:
        copy = bytearray(self.table_end)   # (its first bytes, the header's, unused)
        try:
            got = os.preadv(fd, [memoryview(copy)[_HDR_SIZE:]], _HDR_SIZE)
        except OSError as exc:
            raise io_error(exc, f"read {self.path(base)}") from exc
        copy[_HDR_SIZE + got:] = bytes(self.table_end - _HDR_SIZE - got)   # (cut under the look)
        return copy

    def _write_entries(self, fd: int, base: int, entries: bytes | bytearray, count: int) -> None:
        self._write(fd, base, entries, self.table_end + count * F.INDEX_ENTRY_SIZE)

    def _write(self, fd: int, base: int, data: bytes | bytearray | memoryview, pos: int) -> None:
        try:
            pwrite_all(fd, data, pos)
        except OSError as exc:
            raise io_error(exc, f"write {self.path(base)}") from exc

    def _resolve(self, fd: int, value: int, count: int) -> int:
        return indexchains.resolve(fd, self.table_end, value, count)

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
        for leftover in self.dir.glob(fsutil.TEMP_GLOB):
            leftover.unlink(missing_ok=True)

    def remove_files(self, bases: list[int], warn: Callable[[str], None], each: Callable[[str], None]) -> None:
        """Delete files ``bases``, in order (retention: never the last), durably (``fsutil.unlink_all``)."""
        self.close()
        fsutil.unlink_all(self.dir, [F.segment_name(b) for b in bases], warn, each)

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
        end offset moves back so those offsets are indexed again (recovery, a batch's undo),
        its entries for them go (``indexCount`` moves back too: a lookup would take one for
        the index's damage), and slots past ``indexCount`` point back at their chains."""
        self.truncate_after(end_phys)
        self.close()
        for base in self.files():   # (the newest alone, now, can reach ``end_phys``)
            hdr = list(self.header(base))
            if hdr[3] >= end_phys:
                hdr[3] = end_phys - 1
                fd = open_private(self.path(base), os.O_RDWR)
                try:
                    hdr[5] = indexchains.kept(fd, self.table_end, hdr[5], end_phys)
                    pwrite_all(fd, _HDR.pack(*hdr), 0)
                finally:
                    os.close(fd)
        self.repair()

    def truncate_after(self, end_phys: int) -> None:
        """Forget index files that begin at or after ``end_phys`` (recovery; :meth:`fence`
        forgets an older file's entries that point past it)."""
        for base in self.files():
            if base >= end_phys:
                self.path(base).unlink()

    # -- reading ---------------------------------------------------------------------------
    def lookup(self, key: str, limit: int = 64, damaged: list[tuple[int, str]] | None = None,
               sources: list[int] | None = None) -> list[int]:
        """Commit-log offsets whose entry hash matches ``key``, newest first (unverified).
        ``damaged`` gets ``(file, why)`` of each file that cannot answer: too short for its
        header, or a chain its walk finds damaged (:func:`indexchains.walk`); its hits stop
        there (what the walk found before is kept). ``sources`` gets the file each hit came
        from (beside it: an entry that leads to no record is that file's damage)."""
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
                        damaged.append((base, "is shorter than its header"))
                    continue
                _b, _e, _bp, _ep, slots, count = _HDR.unpack(hdr)
                if slots != self.slots or count < 1:
                    continue
                table_end = F.INDEX_HEADER_SIZE + slots * 4
                if damaged is not None and os.fstat(fd).st_size < table_end + (
                        count * F.INDEX_ENTRY_SIZE if count > 1 else 0):
                    damaged.append((base, "is shorter than its header says"))
                why = indexchains.walk(fd, table_end, slots, count, h, limit, out)
                if sources is not None:
                    sources += [base] * (len(out) - len(sources))
                if why is not None and damaged is not None:
                    damaged.append((base, why))
                if len(out) >= limit:
                    return out
            finally:
                os.close(fd)
        return out
