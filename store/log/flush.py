"""Durability: what a writer makes durable, and when (``--flush sync`` and ``async``).

The commit log is made durable as a prefix (:meth:`Durability.sync_prefix`); the derived
files (consume-queue segments, key-index files, new directories) are synced behind it and
claimed in the checkpoint's ``derived_end`` (:meth:`Durability.flush_durable`), which bounds
how far back recovery re-dispatches after a power cut. An async writer's periodic flush runs in
a daemon thread (RocketMQ's FlushRealTimeService): the writer never waits for the disk.

This module writes no file of its own: it only fsyncs the owners' files.
"""
from __future__ import annotations

import os
import threading
import time

from store.errors import StoreError, io_error
from store.failpoints import failpoint
from store.layout import Layout
from store.log import checkpoint as ckpt
from store.log.commitlog import CommitLog
from store.log.consumequeue import sync_changed_queues

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Callable

    from store.log.index import KeyIndex

# How often --flush sync writers move the durable point of the consume queues and index
# themselves (sync_log); async writers move it by volume or age (writebatch.py).
DERIVED_FLUSH_INTERVAL_S = 2.0
# A background flush with at most this much of the commit log to sync is finished at close
# (:meth:`Durability.finish_flush`).
CLOSE_FINISH_BYTES = 4 * 1024 * 1024


class Durability:
    """One store handle's fsyncs: of the commit log as a prefix, and of the derived files."""

    def __init__(self, layout: Layout, commitlog: CommitLog, index_of: Callable[[], KeyIndex], hints: ckpt.Hints,
                 warn: Callable[[str], None]) -> None:
        self.layout = layout
        self.commitlog = commitlog
        self.index_of = index_of   # (a getter: the engine makes the key index on first use)
        self.hints = hints
        self.warn = warn
        self._derived_flushed = time.monotonic()
        self._flusher: threading.Thread | None = None
        self._flush_span = 0   # how much of the log the running background flush syncs

    def sync_log(self, start: int, end: int) -> None:
        """Make the commit log durable below ``end`` (``fdatasync``): the ``--flush sync``
        acknowledgement.

        For a writer that wants ``--flush sync`` without holding the write lock through the
        fsync: it writes its batch without ``sync``, then calls this with the batch's range
        and acknowledges the batch only when it returns.

        Durability is a prefix: every segment from the store's last known durable point is
        synced, not only ``[start, end)``. Otherwise another writer's unsynced records in an
        earlier segment could be lost in a power cut while this batch survives, leaving a hole
        in the log below an acknowledged record. A segment's name was made durable when it
        was created (by the writer that created it). Every ``DERIVED_FLUSH_INTERVAL_S`` the
        consume queues and key index are synced too."""
        failpoint("sync-before-fsync")
        try:
            # The checkpoint's durable point matters only below what this handle synced itself
            # (a group-committing sender's next range starts where its last one ended).
            cp = ckpt.read(self.layout.checkpoint) if self.hints.synced < start else None
            self.sync_prefix(start, end, cp)
            if time.monotonic() - self._derived_flushed >= DERIVED_FLUSH_INTERVAL_S:
                self._sync_derived(end, cp if cp is not None else ckpt.read(self.layout.checkpoint))
        except OSError as exc:
            raise io_error(exc, f"sync commit log {start}-{end}") from exc

    def sync_written(self) -> int:
        """Make the commit log durable up to its current end (a prefix, see :meth:`sync_log`).

        For a writer that is about to make a *decision* durable which depends on records it
        wrote with ``--flush async``: a consumer committing the offset of a message it sent
        back to the retry topic, the delay scheduler or the transaction check service moving
        their progress past what they re-stored. Without it, a power cut could keep the
        progress and lose the copy: the message would be gone."""
        try:
            end = self.commitlog.end()
            self.sync_prefix(end, end, ckpt.read(self.layout.checkpoint))
        except OSError as exc:
            raise io_error(exc, "sync the commit log") from exc
        return end

    def flush_durable(self, end: int | None = None) -> None:
        """Make everything written below ``end`` (default: the log's end) durable: the commit
        log as a prefix, then the consume queues and key index that point into it. A power cut
        after this loses nothing below ``end``, and the recovery after it starts there."""
        try:
            cp = ckpt.read(self.layout.checkpoint)
            if end is None:
                end = cp.written_end if cp is not None else self.commitlog.end()
            self.sync_prefix(end, end, cp)
            self._sync_derived(end, cp)
        except OSError as exc:
            raise io_error(exc, "sync the store") from exc
        self.hints.flush_due = False

    def flush_in_background(self) -> None:
        """An async writer's periodic flush, in a daemon thread: at most one at a time per
        handle; one cut short by the process exiting simply did not move the durable point."""
        self.hints.flush_due = False
        t = self._flusher
        if t is not None and t.is_alive():
            return
        cp = ckpt.read(self.layout.checkpoint)
        self._flush_span = (cp.written_end - max(self.hints.synced, cp.synced_end)) if cp is not None else 1 << 62
        self._flusher = threading.Thread(target=self._flush_quietly, name="mqctl-flush", daemon=True)
        self._flusher.start()

    def finish_flush(self) -> None:
        """At close: a background flush still running is waited for when it syncs at most
        ``CLOSE_FINISH_BYTES`` of the log (a short sender's, which the process's exit would
        otherwise always cut short: the durable point would never move while only short
        senders write). A bigger one is left to die with the process, as before: waiting
        would add its fsync, up to a segment's, to the end of a big send."""
        t = self._flusher
        if t is not None and t.is_alive() and self._flush_span <= CLOSE_FINISH_BYTES:
            t.join()

    def _flush_quietly(self) -> None:
        try:
            self.flush_durable()
        except StoreError as exc:   # nothing was promised: the next flush tries again
            self.warn(f"background flush failed: {exc}")

    def sync_prefix(self, start: int, end: int, cp: ckpt.Checkpoint | None, tail_fd: int = -1) -> None:
        """``fdatasync`` every segment from the durable point below ``start`` up to ``end``
        (:meth:`sync_log`). ``tail_fd``: a descriptor of the segment holding ``end`` that the
        caller just wrote through (a writer's, under the write lock), synced as it is."""
        log = self.commitlog
        known = max(self.hints.synced, cp.synced_end if cp is not None else 0)
        frm = min(start, known)
        if log.segment_of(frm) != log.segment_of(max(end - 1, frm)):
            # more than one segment: none below the oldest one retention left (a segment that
            # is gone needs nothing either way: datasync skips it; this only skips the walk)
            frm = max(frm, log.min_offset())
        base = log.segment_of(frm)
        last = log.segment_of(end - 1) if tail_fd >= 0 else -1
        while base < end:
            if base == last:
                os.fdatasync(tail_fd)
            else:
                log.datasync(base)
            base += log.segment_size
        if end > self.hints.synced:
            self.hints.synced = end

    def _sync_derived(self, end: int, cp: ckpt.Checkpoint | None) -> None:
        """Sync the consume-queue segments and index files written since the last derived
        flush, then claim ``end`` (at most the checkpoint's written end: entries below it were
        written before that checkpoint was) as durable for them."""
        claim = min(end, cp.written_end) if cp is not None else 0
        since_s = cp.derived_at if cp is not None else 0
        since_end = cp.derived_end if cp is not None else 0
        started = int(time.time())
        sync_changed_queues(self.layout, since_s)
        self.index_of().sync_files(since_end, since_s)
        if claim > self.hints.derived:
            self.hints.derived, self.hints.derived_at = claim, started
        self._derived_flushed = time.monotonic()
