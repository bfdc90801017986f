"""The checkpoint: the store's clean/dirty marker (64 bytes; layout in ``format.py``).

Written when the store is made (fsynced: there is no older version to fall back on), then
in place after every batch, under the write lock. It is small enough that the write is one
sector; a torn or missing checkpoint fails its CRC and simply makes the next opener run a full
recovery, which is always safe. The writes after the first are not fsynced: every value in it
is a lower bound of the truth at the moment it was written, so an older version that survives
a power cut only makes recovery start earlier.
"""
from __future__ import annotations

import os
import zlib
from dataclasses import dataclass
from pathlib import Path

from store.errors import io_error
from store.fsutil import open_private
from store.log import filestat
from store.log import format as F
from store.log.commitlog import CommitLog


@dataclass
class Checkpoint:
    """The checkpoint's fields (their layout in ``format.py``)."""

    written_end: int = 0
    last_store_ts: int = 0
    synced_end: int = 0
    boot_id: bytes = bytes(16)
    derived_end: int = 0
    derived_at: int = 0

    def pack(self) -> bytes:
        body = F.CHECKPOINT.pack(F.CHECKPOINT_MAGIC, F.CHECKPOINT_VERSION, self.written_end,
                                 self.last_store_ts, self.synced_end, self.boot_id,
                                 self.derived_end, self.derived_at & 0x7FFFFFFF, 0)[:60]
        return body + (zlib.crc32(body) & F.CRC_MASK).to_bytes(4, "big")


@dataclass(eq=False, repr=False)   # (neither is used: start-up, store/__init__.py)
class Hints:
    """What one store handle has made durable itself since it was opened (its fsync threads
    write these; the next checkpoint it writes carries them): the commit log below ``synced``,
    consume queues and key index below ``derived`` (at ``derived_at``, s since the epoch).
    ``flush_due``: a batch found the durable point too far behind (``writebatch.py``);
    ``unflushed_since``: when (``time.monotonic``) the oldest write not yet covered by a flush
    this handle started was made, at the latest (an earlier writer's included), 0.0 for none."""

    synced: int = 0
    derived: int = 0
    derived_at: int = 0
    flush_due: bool = False
    unflushed_since: float = 0.0


def current_boot_id() -> bytes:
    """The kernel's boot id: a different one means the machine restarted since."""
    try:
        # uuid.UUID(text).bytes without importing uuid (+platform): ~3 ms of every start-up
        raw = bytes.fromhex(Path("/proc/sys/kernel/random/boot_id").read_text().strip().replace("-", ""))
        if len(raw) != 16:
            raise ValueError("not a UUID")
        return raw
    except (OSError, ValueError):
        return bytes(16)


def acked_end(cp: Checkpoint | None, rebooted: bool, end: int) -> int:
    """Where the log (ending at ``end``) is known to have been acknowledged whole, by ``cp``
    (``rebooted``: written on another boot): its synced end, and on this boot its written end
    too when the log still reaches it (every batch below it was written whole before the
    checkpoint moved past it; the page cache keeps it). Bytes missing or damaged below it are
    damage, never a torn write: an unfinished batch is cut whole only past it (recovery, and
    ``store check`` saying what recovery will cut)."""
    if cp is None:
        return 0
    return max(cp.synced_end, cp.written_end if not rebooted and end >= cp.written_end else 0)


def read(path: Path) -> Checkpoint | None:
    """The checkpoint, or None when it is missing or fails its CRC."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    return unpack(raw)


def unpack(raw: bytes) -> Checkpoint | None:
    """The checkpoint in ``raw``, or None when it is short or fails its CRC."""
    if len(raw) < F.CHECKPOINT.size:
        return None
    magic, version, written, last_ts, synced, boot, derived, derived_at, crc = \
        F.CHECKPOINT.unpack(raw[:F.CHECKPOINT.size])
    if magic != F.CHECKPOINT_MAGIC or version != F.CHECKPOINT_VERSION:
        return None
    if zlib.crc32(raw[:60]) & F.CRC_MASK != crc:
        return None
    # A durable point is never past what was written (an older file, or damage the CRC
    # missed, must not make recovery trust more than the log holds).
    synced = max(0, min(synced, written))
    derived = max(0, min(derived, synced))
    return Checkpoint(written, last_ts, synced, boot, derived, derived_at)


class CheckpointFile:
    """The checkpoint as a writer reads and writes it once per batch (write lock held): kept
    open, a ``pread`` and a ``pwrite`` instead of two opens and closes. The file is only ever
    written in place; one that was removed (a store deleted under a running writer) is seen
    by its link count and opened anew. One thread's: others use :func:`read`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        # The bytes this handle last wrote or read, and what they say: a batch that finds its
        # own last checkpoint (no other writer since) takes it without unpacking and checking
        # it again. (Checkpoints are never changed in place: ``replace`` makes a new one.)
        self._known: tuple[bytes, Checkpoint] | None = None

    def _open(self, create: bool) -> int | None:
        fd = self._fd
        if fd is not None:
            if filestat.untimed(fd)[0]:   # (no timestamp asked: filestat.py)
                return fd
            self.close()
        try:
            fd = open_private(self.path, os.O_RDWR | (os.O_CREAT if create else 0))
        except FileNotFoundError:
            if create:
                raise
            return None
        self._fd = fd
        return fd

    def read(self) -> Checkpoint | None:
        """Like :func:`read`."""
        try:
            fd = self._open(create=False)
            if fd is None:
                return None
            raw = os.pread(fd, F.CHECKPOINT.size, 0)
        except OSError as exc:
            raise io_error(exc, f"read {self.path}") from exc
        known = self._known
        if known is not None and raw == known[0]:
            return known[1]
        cp = unpack(raw)
        self._known = None if cp is None else (raw, cp)
        return cp

    def write(self, cp: Checkpoint, checked: bool = False) -> None:
        """Like :func:`write`. ``checked``: this handle read the checkpoint through its kept
        descriptor under the same hold of the write lock (a batch's start): it is still
        linked, no second ``fstat``."""
        data = cp.pack()
        try:
            fd = self._fd if checked and self._fd is not None else self._open(create=True)
            assert fd is not None
            os.pwrite(fd, data, 0)
        except OSError as exc:
            self.close()
            raise io_error(exc, f"write {self.path}") from exc
        self._known = (data, cp)

    def close(self) -> None:
        fd, self._fd = self._fd, None
        self._known = None
        if fd is not None:
            os.close(fd)


def write(path: Path, cp: Checkpoint, *, new: bool = False) -> None:
    """Write the checkpoint at ``path``. ``new``: a new store's, over whatever a creation that
    did not finish left (its maker holds the store directory's lock), and durable (its
    directory's fsync is the caller's): a new store's is the only one there is, so a power cut
    before its first fsync would leave an empty file, not an older version."""
    try:
        fd = open_private(path, os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if new else 0))
        try:
            os.pwrite(fd, cp.pack(), 0)
            if new:
                os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise io_error(exc, f"write {path}") from exc


def lost_durable_bytes(cp: Checkpoint | None, log: CommitLog) -> tuple[str, int, str] | None:
    """``(segment, offset in it, reason)`` when the commit log ends below ``cp``'s synced end:
    records that had been made durable are gone (a file cut or replaced, not a torn write,
    which only ever loses what was never synced); None when nothing durable is missing."""
    if cp is None:
        return None
    end = log.end()
    if end >= cp.synced_end:
        return None
    base = log.segment_of(end)
    lost = cp.synced_end - end
    return (str(log.segment_path(base)), end - base,
            f"the commit log ends at offset {end}, {lost} bytes short of its durable end "
            f"{cp.synced_end}: records that were synced to disk are lost")
