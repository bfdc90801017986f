"""Consumer offsets: where each group (or broadcast client) resumes in each queue.

Semantics are RocketMQ's: a committed offset is the **next** offset to consume (the oldest
unconsumed message), and -1 means "no offset", never "before 0".

Clustering groups — ``config/consumerOffset.json`` (:class:`ClusterOffsetStore`)
------------------------------------------------------------------------------------
One table for the whole store, the broker's ``ConsumerOffsetManager`` file (format, crc and
healing in ``offsettable.py``), with the offsets journal ``config/consumerOffset.log`` of which
it is the snapshot (``offsetjournal.py``).

Members of every group commit into this one table from their own processes, under a lock on
``consumerOffset.json.lock``. A member's commit (``journal_only``) appends one record to the
journal and nothing else (``offsetview.py``: the member's view of the table, current from the
journal's new records); the snapshot follows within a second, or when the member settles.
Other changes (resets, deletions, recovery, exactly-once stages' commits absorbed) append
their record and publish the snapshot (temp file, fsync, rename, ``.bak`` kept). Readers take
no lock, and apply journal records past the snapshot's ``journalEnd`` and exactly-once stages'
offset commits past its ``commitsApplied`` (``offsetcommits.py``). A kill -9 loses no commit
that returned; a power cut may lose the members' commits since the last snapshot (delivered
again, never skipped), never a reset or deletion, never a torn table. A damaged table stops
only the groups whose offsets it lost (exit 5) until ``store recover``.

Broadcast clients — ``offsets/<clientId>/<group>/offsets.json``
--------------------------------------------------------------
Their own files, owned by ``broadcastoffsets.py``.

Damage
------
A main file that is missing, empty, unparsable or of the wrong shape is replaced by its
``.bak``, and ``warn`` says so; when the ``.bak`` is unreadable too, :class:`CorruptionError`
names the file (starting over from 0 or the end unasked would redeliver or skip everything).
The write after a fallback does not rotate the unreadable file into ``.bak``.

Directories are created 0700, files 0600.
"""
from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from store import fsutil
from store.errors import CorruptionError, LockHeldError, UsageError, io_error
from store.errors import warn as say_warning
from store.flock import close_kept, keep, wait_flock
from store.layout import Layout, lock_beside
from store.log import offsetcommits, offsettable
from store.log.offsettable import (
    NO_OFFSET,
    TOPIC_GROUP_SEPARATOR,
    ClusterTable,
    is_int,
    split_key,
    table_key,
)
from store.log.offsetview import SNAPSHOT_S, OffsetView
from store.names import (
    validate_any_topic,
    validate_group,
)

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Any

__all__ = ["NO_OFFSET", "TOPIC_GROUP_SEPARATOR", "ClusterOffsetStore", "GroupOffsets", "table_key"]

LOCK_TIMEOUT_S = 30.0

Warn = Callable[[str], None]   # where warnings go, one line each
QueueKey = tuple[str, int]     # (topic, queueId)


@contextmanager
def exclusive(lock_path: Path, timeout: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """Hold an exclusive flock on ``lock_path`` (created 0600, never deleted) for the block."""
    try:
        try:
            fd = fsutil.open_private(lock_path, os.O_RDWR | os.O_CREAT)
        except (FileNotFoundError, NotADirectoryError):
            # (its directory is made only when missing: a member commits many times a second,
            # and looking for the directory first was a stat and some Path work each time)
            fsutil.ensure_dir(lock_path.parent)
            fd = fsutil.open_private(lock_path, os.O_RDWR | os.O_CREAT)
        keep(fd)   # (not a forked child's)
    except OSError as exc:
        raise io_error(exc, f"open {lock_path}") from exc
    try:
        wait_flock(fd, lock_path, timeout)
        yield
    finally:
        close_kept(fd)  # closing the descriptor releases the lock, as does a crash


@dataclass(eq=False, repr=False)   # (neither is used: start-up, store/__init__.py)
class FallbackWatch:
    """A ``warn`` wrapper that remembers whether the ``.bak`` had to be used."""

    warn: Warn
    used: bool = False

    def __call__(self, message: str) -> None:
        self.used = True
        self.warn(message)


def _check_commit(group: str, offsets: Mapping[QueueKey, int],
                  known: tuple[set[str], set[str]] | None = None) -> None:
    """Refuse a bad group, topic, queue id or offset. ``known``: the groups and topics this
    store found valid before, not checked again (a member commits many times a second)."""
    groups, topics = known if known is not None else (set(), set())
    if group not in groups:
        validate_group(group)
    for (topic, queue_id), offset in offsets.items():
        if topic not in topics:
            validate_any_topic(topic)
        check_offset(offset, queue_id)
    if known is not None:
        groups.add(group)
        topics.update(topic for topic, _q in offsets)


def check_offset(offset: Any, queue_id: Any) -> None:
    if not is_int(queue_id) or queue_id < 0:
        raise UsageError(f"invalid queue id {queue_id!r}")
    if not is_int(offset) or offset < 0:
        raise UsageError(f"invalid offset {offset!r} for queue {queue_id}: offsets are >= 0")


# -- clustering: config/consumerOffset.json --------------------------------------------------


@dataclass(frozen=True, eq=False, repr=False)   # (neither is used: start-up, store/__init__.py)
class GroupOffsets:
    """One group's offsets and reset epochs, read from a single version of the file (pass
    ``epochs`` back as ``expected_epochs`` to :meth:`ClusterOffsetStore.commit`)."""

    group: str
    offsets: dict[QueueKey, int]
    epochs: dict[str, int]

    def epoch(self, topic: str) -> int:
        return self.epochs.get(topic, 0)


class MemoryOffsetStore:
    """Offsets of a read without a group (``--no-group``): kept in memory, never written."""

    def __init__(self) -> None:
        self._table: dict[QueueKey, int] = {}

    def read(self, topic: str, queue_id: int) -> int:
        return self._table.get((topic, queue_id), -1)

    def update(self, topic: str, queue_id: int, offset: int, increase_only: bool = True) -> None:
        old = self._table.get((topic, queue_id), -1)
        self._table[(topic, queue_id)] = max(old, offset) if increase_only else offset

    def persist(self, owned: Any) -> None:
        return None


class ClusterOffsetStore:
    """The clustering groups' shared offset table, safe for concurrent processes.

    ``commit`` merges only the queues it is given, so members owning different queues never
    overwrite each other; with ``increase_only`` (concurrent consumption) an offset never moves
    backwards; with ``expected_epochs`` a commit computed before a reset is refused per topic.
    """

    def __init__(self, layout: Layout, warn: Warn | None = None) -> None:
        self.layout = layout
        self.path = layout.consumer_offset_json
        self.lock_path = lock_beside(self.path)
        self._warn = warn or say_warning
        self.view = OffsetView(layout)   # (its ``appended``: commits no snapshot holds yet)
        self._view_lock = threading.Lock()   # (one commit at a time: the view is this store's)
        self.last_written: tuple[int, int, int] | None = None   # (inode, mtime, size) of its last write
        self._told: tuple[object, ...] = ()   # the damage ``_load`` last warned of
        self._valid: tuple[set[str], set[str]] = (set(), set())   # groups and topics committed before
        self._snapshot_put_off = False   # the view's snapshot could not be written, and we said so
        self._table_put_off = False      # a change's snapshot could not be written, and we said so

    # -- reads (no lock: the file is only ever replaced by rename)
    def read(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset of one queue, or -1 when there is none."""
        return self._load(group).get(topic, group, queue_id)

    def read_group(self, group: str) -> dict[QueueKey, int]:
        """Every committed offset of ``group``, keyed by (topic, queueId)."""
        return self.snapshot(group).offsets

    def snapshot(self, group: str) -> GroupOffsets:
        """Offsets and epochs of ``group`` from one read, so that they agree with each other."""
        table = self._load(group)
        offsets = {(topic, q): o for topic, queues in table.queues_of_group(group) for q, o in queues.items()}
        epochs: dict[str, int] = {}
        for key, epoch in table.epochs.items():
            topic, owner = split_key(key)
            if owner == group:
                epochs[topic] = epoch
        return GroupOffsets(group, offsets, epochs)

    def reset_epochs(self, group: str) -> dict[str, int]:
        """The reset epochs of ``group``'s topics as :meth:`snapshot` gives them, read without
        decoding the members' commits after the snapshot (``offsettable.epochs``); the whole
        table (:meth:`snapshot`, with its warnings and refusals) when it cannot be read so."""
        every = offsettable.epochs(self.layout)
        if every is None:
            return self.snapshot(group).epochs
        out: dict[str, int] = {}
        for key, epoch in every.items():
            topic, owner = split_key(key)
            if owner == group:
                out[topic] = epoch
        return out

    def epochs_of(self, group: str) -> dict[str, int]:
        """The reset epochs of ``group``'s topics (one read of the file: no commit applied)."""
        table = offsettable.load(self.layout).table
        return {split_key(k)[0]: n for k, n in table.epochs.items() if split_key(k)[1] == group}

    def groups(self) -> list[str]:
        """Groups that have at least one committed offset, sorted."""
        return sorted({split_key(key)[1] for key, queues in self._load().offsets.items() if queues})

    def all_groups(self) -> dict[str, dict[QueueKey, int]]:
        """Every group's committed offsets from one read: group -> (topic, queueId) -> offset."""
        out: dict[str, dict[QueueKey, int]] = {}
        for key, queues in self._load().offsets.items():
            topic, group = split_key(key)
            out.setdefault(group, {}).update({(topic, q): o for q, o in queues.items()})
        return out

    def topics_of(self, group: str) -> list[str]:
        """Topics in which ``group`` has committed offsets, sorted."""
        return sorted(topic for topic, _ in self._load(group).queues_of_group(group))

    # -- writes (read-modify-write under the lock)
    def commit(
        self,
        group: str,
        offsets: Mapping[QueueKey, int],
        increase_only: bool = True,
        expected_epochs: Mapping[str, int] | None = None,
        timeout: float = LOCK_TIMEOUT_S,
        journal_only: bool = False,
    ) -> set[str]:
        """Merge ``offsets`` ((topic, queueId) → next offset) into the table.

        With ``increase_only`` the stored value becomes ``max(old, new)``, RocketMQ's
        ``updateOffset(mq, offset, true)``; without it the value is replaced (orderly mode).
        With ``expected_epochs`` (topic → epoch the caller loaded; a topic not listed is
        expected at 0), queues of a topic whose epoch moved are skipped. Returns the skipped
        topics: the caller must reload them (:meth:`snapshot`) before committing again.
        ``timeout``: seconds to wait for the table's lock (LockHeldError after; 0: fail at
        once when another process is committing, for a caller that can commit later).
        ``journal_only`` (a group member's commit): one journal record, the snapshot written
        later (see the module docstring; :meth:`settle` when the member idles or closes).
        """
        _check_commit(group, offsets, self._valid)
        skipped: set[str] = set()

        def merge(table: ClusterTable) -> bool:
            changed = False
            for (topic, queue_id), offset in sorted(offsets.items()):
                if expected_epochs is not None and table.epoch(topic, group) != expected_epochs.get(topic, 0):
                    skipped.add(topic)
                    continue
                old = table.get(topic, group, queue_id)
                new = max(old, offset) if increase_only else offset
                if new != old:
                    table.put(topic, group, queue_id, new)
                    changed = True
            return changed

        if not offsets:
            return skipped
        if not journal_only:
            # (the rename not fsynced: a cut may keep the previous commit, delivered again)
            self._update(merge, sync=False, timeout=timeout)
            return skipped
        with self._view_lock, exclusive(self.lock_path, timeout):
            view = self.view
            done = view.commit(group, offsets, increase_only, expected_epochs)
            if done is None:
                self._write_locked(merge, sync=False)
                return skipped
            if view.wrote is not None:
                self.last_written, view.wrote = view.wrote, None
            self._tell_snapshot_error()
        return done

    def try_commit(self, group: str, offsets: Mapping[QueueKey, int], increase_only: bool = True,
                   expected_epochs: Mapping[str, int] | None = None) -> set[str] | None:
        """A member's commit as :meth:`commit` with ``journal_only`` makes it, made only when
        it is quick: the table's lock free and the record all there is to write (no snapshot
        due, whose journal sync is an fsync; no whole table). None: nothing was written (commit
        with :meth:`commit`, which may wait). A member's loop commits this way in its own
        thread, sparing a hand-over to a writer thread per commit."""
        _check_commit(group, offsets, self._valid)
        if not offsets:
            return set()
        if not self._view_lock.acquire(blocking=False):
            return None
        try:
            with exclusive(self.lock_path, 0.0):
                return self.view.commit(group, offsets, increase_only, expected_epochs, quick=True)
        except LockHeldError:
            return None
        finally:
            self._view_lock.release()

    def settle(self, quiet_s: float = SNAPSHOT_S) -> None:
        """Write the snapshot if this store's ``journal_only`` commits are in none yet, the
        last of them ``quiet_s`` ago (0: at once, a member closing); else a stat at most."""
        with self._view_lock:
            view = self.view
            if not view.unsettled(time.monotonic(), quiet_s):
                return
            with exclusive(self.lock_path):
                if not view.settle():
                    self._write_locked(lambda table: False, sync=False)
                if view.wrote is not None:
                    self.last_written, view.wrote = view.wrote, None
                self._tell_snapshot_error()

    def _tell_snapshot_error(self) -> None:
        """Warn, once until it is written again, that the member's commits cannot be written
        into the table (a full disk: they are in the journal, which readers apply; the table
        is tried again at the next settle)."""
        err = self.view.snapshot_error
        if err is not None and not self._snapshot_put_off:
            self._warn(f"{err}; the offsets committed are in {self.layout.consumer_offset_log.name}, "
                       f"{self.path.name} is written again later")
        self._snapshot_put_off = err is not None

    def reset(self, group: str, topic: str, offsets: Mapping[int, int], durable_end: int = 0) -> int:
        """Set the given queues of ``topic`` exactly (backwards too); returns the new epoch.
        ``durable_end`` (also below): the log synced to it under the write lock, every stage's
        commit below it is taken in first (the epoch refuses only later, unaware ones)."""
        validate_group(group)
        validate_any_topic(topic)
        for queue_id, offset in offsets.items():
            check_offset(offset, queue_id)
        epoch = 0

        def apply(table: ClusterTable) -> bool:
            nonlocal epoch
            for queue_id, offset in offsets.items():
                table.put(topic, group, queue_id, offset)
            epoch = table.bump_epoch(topic, group)
            return True

        self._update(apply, durable_end=durable_end)
        return epoch

    def delete_topic(self, topic: str, durable_end: int = 0) -> None:
        """Drop every group's offsets of ``topic`` (``topic delete``), bumping their epochs."""
        validate_any_topic(topic)

        def drop(table: ClusterTable) -> bool:
            table.lost -= {key for key in table.lost if split_key(key)[0] == topic}
            doomed = [key for key in table.offsets if split_key(key)[0] == topic]
            for key in doomed:
                table.drop(key)
                table.bump_epoch(topic, split_key(key)[1])
            return bool(doomed)

        self._update(drop, durable_end=durable_end)

    def delete_group(self, group: str, durable_end: int = 0) -> list[str]:
        """Drop every offset of ``group`` (``offsets delete``), bumping its epochs so a member
        that loaded them before cannot write them back. Returns the topics it had offsets in."""
        validate_group(group)
        gone: list[str] = []

        def drop(table: ClusterTable) -> bool:
            table.lost -= {key for key in table.lost if split_key(key)[1] == group}
            for key in [k for k in table.offsets if split_key(k)[1] == group]:
                topic = split_key(key)[0]
                table.drop(key)
                table.bump_epoch(topic, group)
                gone.append(topic)
            return bool(gone)

        self._update(drop, durable_end=durable_end)
        return sorted(gone)

    def lost_groups(self) -> dict[str, list[str]]:   # (beyond recovery, with their topics)
        return offsettable.load(self.layout).lost_groups()

    def reset_lost(self, oldest: Callable[[str, int], int], queue_count: Callable[[str], int]) -> list[str]:
        """``store recover``: give every lost group's queues the oldest message's offset
        (``oldest(topic, queue)``; topics with ``queue_count`` 0 are gone and skipped), and
        rewrite a damaged snapshot; returns one warning line per group."""
        said: list[str] = []

        def apply(table: ClusterTable, lost: set[str]) -> bool:
            for key in sorted(set(lost)):
                topic, group = split_key(key)
                n = queue_count(topic)
                for q in range(n):
                    table.put(topic, group, q, oldest(topic, q))
                table.lost.discard(key)
                table.bump_epoch(topic, group)
                said.append(f"group {group}: offsets of topic {topic} could not be recovered; "
                            f"reset to the oldest message" + ("" if n else " (the topic is gone: dropped)"))
            return bool(lost)

        self._update(lambda table: False, sync=True, on_lost=apply)
        for line in said:
            self._warn(line)
        return said

    # -- internals
    def _load(self, group: str | None = None, again: bool = False) -> ClusterTable:
        loaded = offsettable.load(self.layout)
        if loaded.unknown:
            raise CorruptionError(str(self.path), 0, "unreadable, and so are its .bak and the offsets journal: no "
                                  "group's offsets can be trusted; run mqctl store recover (it resets the groups "
                                  "the store shows to the oldest message)")
        lost = loaded.lost_groups()
        if group is not None and group in lost:
            raise CorruptionError(str(self.path), 0, f"offsets of group {group} (topics {', '.join(lost[group])}) "
                                  f"were damaged and cannot be recovered; run mqctl store recover "
                                  f"(resets them to the oldest message)")
        if loaded.source in ("bak", "journal", "lost") and self._told != (told := (loaded.source, *loaded.problems)):
            self._told = told   # (said once per damage: a command or a member reads the table many times)
            self._warn(f"{self.path} is damaged; " + {
                "bak": "offsets come from its .bak and the offsets journal",
                "journal": "offsets come from the offsets journal",
                "lost": "no copy or journal holds its offsets: those of groups the store showed before are "
                        "lost until mqctl store recover"}[loaded.source])
        # stages' commits not in the file yet; some gone since the file was read: read it again
        if not offsetcommits.overlay(self.layout, loaded.table) and not again:
            return self._load(group, again=True)
        return loaded.table

    def absorb(self, durable_end: int = 0, sync: bool = False) -> None:
        """Write the offset commits of exactly-once stages that are durable (below the
        checkpoint's synced end, or ``durable_end``, a point the caller made durable) into
        the table file; ``sync``: durably (before the records themselves are deleted)."""
        self._update(lambda table: False, sync=sync, durable_end=durable_end)

    def _update(self, mutate: Callable[[ClusterTable], bool], sync: bool = True,
                on_lost: Callable[[ClusterTable, set[str]], bool] | None = None, durable_end: int = 0,
                timeout: float = LOCK_TIMEOUT_S) -> None:
        with exclusive(self.lock_path, timeout):
            self._write_locked(mutate, sync, on_lost, durable_end)

    def _write_locked(self, mutate: Callable[[ClusterTable], bool], sync: bool = True,
                      on_lost: Callable[[ClusterTable, set[str]], bool] | None = None,
                      durable_end: int = 0) -> None:
        """Read, change and write the whole table (the lock held): its record, then the snapshot."""
        loaded = offsettable.load(self.layout, deep=on_lost is not None)   # (recovery: a damaged journal rewritten)
        if loaded.unknown and on_lost is None:
            self._load()   # raises: only recovery starts such a table over
        if loaded.unknown:
            from store.log import offsetgroups
            groups = offsetgroups.unpinned_groups(self.layout, {split_key(k)[1] for k in loaded.lost})
            lost = f": the committed offsets of {offsetgroups.name_groups(groups)} are lost" if groups else ""
            self._warn(f"{self.path}, its .bak and the offsets journal are unreadable: the table starts "
                       f"again from the groups the store shows{lost} (they start again per their consumers' --from)")
        lost_before, applied_before = set(loaded.table.lost), loaded.table.applied
        # keys a damaged copy names stay known as lost until recover resets them
        loaded.table.lost |= loaded.lost
        offsetcommits.absorb(self.layout, loaded.table, durable_end)
        changed = mutate(loaded.table) or loaded.table.lost != lost_before or loaded.table.applied != applied_before
        changed = bool(on_lost is not None and on_lost(loaded.table, loaded.lost)) or changed
        # After a fallback, write even when nothing changed: it repairs the snapshot; when
        # the journal is ahead of it, a snapshot of the commits since.
        if changed or loaded.repair or loaded.behind:
            put_off = offsettable.write(self.layout, loaded, lost_before, applied_before, sync=sync)
            if put_off is not None and not self._table_put_off:   # (said once until it is written)
                self._warn(f"{put_off}; the change is made (it is in {self.layout.consumer_offset_log.name}, which "
                           f"readers apply), {self.path.name} is written again later")
            self._table_put_off = put_off is not None
            st = os.stat(self.path)   # (a consumer woken by the file replaced tells its own commits by it)
            self.last_written = (st.st_ino, st.st_mtime_ns, st.st_size)
        if loaded.disagrees:   # (no path of mqctl's own leads here: an edit, or a copy from elsewhere)
            self._warn(f"{self.layout.consumer_offset_log} replays to other offsets than {self.path}, which readers "
                       f"use: the journal is written again from that table")
        if loaded.damage is not None:
            dropped = " (the commits after the damage dropped: their messages are delivered again)" \
                if loaded.damage_read else ""
            self._warn(f"{self.layout.consumer_offset_log} was damaged at byte {loaded.damage[0]}: rewritten from the "
                       f"offset table{dropped}")
