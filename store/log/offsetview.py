"""A group member's view of the offset table, kept current from the offsets journal: what
makes a member's commit one appended ``set`` record (``offsetjournal.py``) instead of a
rewrite of the snapshot (``offsettable.py``).

Under the table's lock, a commit reads only the journal's records appended since the view
last read it (one open, fstat and pread), applies them to the view, checks the reset epochs
and the forward-only rule against it, appends its record and unlocks: no snapshot written, no
fsync. The view is loaded again, the whole table, when the journal is another file (a
compaction renamed a new one into place) or starts at another ``base``, when it is shorter
than the view has read, or when the snapshot names an end past it. When the table is not in
a state a record alone may change (no journal yet, a damaged copy in use, offsets named
lost), :meth:`OffsetView.commit` declines and the caller writes the whole table.

The other members' commits (records in a commit's form, ``offsetjournal.sets_only``) are not
decoded as they are read: they wait, as read, until a commit of this view names one of the
queues they may set (``offsetjournal.may_set``), the view writes the snapshot, or another
member's snapshot holds them (the view then takes that table, which it reads anyway to learn
its ``journalEnd``). So a member of a busy group decodes the records that concern it, not
every member's: what a commit spends on each record of the others is a CRC and a pattern
match. Any other record (a reset's, a deletion's, a full one) is applied at once, after those
waiting before it.

Readers see a commit as soon as it returned: they apply the journal's records past the
snapshot's ``journalEnd``. A kill -9 loses nothing that was appended (the page cache has it).
A power cut may lose the records appended since the journal was last synced, which it is
before every snapshot: the snapshot is written by a commit that finds records no snapshot
holds appended before it, the oldest of them older than :data:`SNAPSHOT_S` (its age: since this
view appended it, when it was the first past the snapshot; else, as no record says when it
was appended, the snapshot's), or the journal grown :data:`SNAPSHOT_BYTES` past it, and by
:meth:`OffsetView.settle` (a member idle or closing). So a one-shot consume's commits (its
join's, its batches') write one snapshot, at its end, however old the one it found.
"""
from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from store import fsutil
from store.errors import StoreIOError
from store.layout import Layout
from store.log import offsetjournal as oj
from store.log import offsettable
from store.log.offsettable import NO_OFFSET, ClusterTable, table_key

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Any

SNAPSHOT_S = 1.0            # a commit writes the snapshot when the last one is older than this
SNAPSHOT_BYTES = 64 << 10   # ... or when the journal ran this far past its journalEnd

QueueKey = tuple[str, int]
Look = tuple[int, int, int]   # (inode, mtime_ns, size) of the snapshot


def look_at(path: Any) -> Look | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


@dataclass(eq=False, repr=False)   # (neither is used: start-up, store/__init__.py)
class _Seen:
    """How far the view has read, and what of the snapshot it knows."""

    ident: tuple[int, int]      # the journal file read
    base: int
    end: int                    # the journal's end, as far as read
    state: dict[str, Any]       # the table in its JSON shape, every record up to ``end`` applied but ``waiting``
    snap_look: Look             # the snapshot's (inode, mtime_ns, size)
    snap_end: int               # the snapshot's journalEnd
    applied: int                # the end of the last record applied to ``state``
    # Records that only set offsets, read but not applied (payload, its end), in the journal's
    # order. No record applied after one of them sets an offset it may set: applied later,
    # they make the table they make in order.
    waiting: list[tuple[bytes, int]] = field(default_factory=list)
    waiting_text: bytearray = field(default_factory=bytearray)   # their payloads joined (one search)
    # (time.time()) when this view appended the first record past the snapshot it knows, 0.0
    # when another process's came first (its age unknown: the snapshot's stands for it)
    first_at: float = 0.0


class OffsetView:
    """One member's view (not shared between threads: the caller serializes its calls)."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.journal = oj.Journal(layout.consumer_offset_log)
        self._snap_path = str(layout.consumer_offset_json)   # (a stat by it every commit: no Path built each time)
        self._seen: _Seen | None = None
        self.appended = 0          # the end of this view's last record no snapshot holds yet (0: none)
        self.appended_at = 0.0     # (monotonic) when it was appended
        self.wrote: Look | None = None   # the snapshot this view last wrote
        # Why the last snapshot could not be written (a full disk), None once one is: the
        # commits are in the journal, so a member goes on and writes it later (``settle``).
        self.snapshot_error: StoreIOError | None = None

    def commit(self, group: str, offsets: Mapping[QueueKey, int], increase_only: bool,
               expected_epochs: Mapping[str, int] | None, quick: bool = False) -> set[str] | None:
        """(Under the table's lock.) Append what ``offsets`` change as one record; the topics
        skipped for a reset epoch that moved (see ``ClusterOffsetStore.commit``). None: the
        view declined, nothing was written (the caller writes the whole table; ``quick``: also
        when the snapshot is due, for a commit that may wait for its fsync)."""
        seen = self._current()
        if seen is None:
            return None
        # The age of the oldest record no snapshot holds: when there were such records before
        # this commit, since this view appended the first of them, or when another process
        # did, the snapshot's (at most that old); else the record is this commit's own. A
        # process's commits (a one-shot consume's) do not write the snapshot for the
        # snapshot's age, only once their first is SNAPSHOT_S old.
        now = time.time()
        age = now - (seen.first_at or seen.snap_look[1] / 1e9) if seen.end > seen.snap_end else 0.0
        if quick and seen.end > seen.snap_end and (age >= SNAPSHOT_S or self._too_far(seen)):
            return None
        if seen.waiting:
            keys: dict[str, list[int]] = {}
            for topic, queue_id in offsets:
                keys.setdefault(table_key(topic, group), []).append(queue_id)
            if any(oj.may_set(seen.waiting_text, key, queue_ids) for key, queue_ids in keys.items()):
                self._apply_waiting(seen)
        queues = seen.state.get("offsetTable", {})
        epochs = seen.state.get("resetEpoch", {})
        skipped: set[str] = set()
        changed: dict[str, dict[str, int]] = {}
        for (topic, queue_id), offset in sorted(offsets.items()):
            key = table_key(topic, group)
            if expected_epochs is not None and epochs.get(key, 0) != expected_epochs.get(topic, 0):
                skipped.add(topic)
                continue
            old = queues.get(key, {}).get(str(queue_id), NO_OFFSET)
            new = max(old, offset) if increase_only else offset
            if new != old:
                changed.setdefault(key, {})[str(queue_id)] = new
        if changed:
            record = {"set": changed}
            if seen.end <= seen.snap_end:
                seen.first_at = now   # (the first record past the snapshot: this one)
            end = self.journal.append(record, seen.end)
            oj.apply(record, seen.state)   # (no record waiting may set these: see above)
            seen.end = seen.applied = self.appended = end
            self.appended_at = time.monotonic()
        if not quick and seen.end > seen.snap_end and (age >= SNAPSHOT_S or self._too_far(seen)):
            self._snapshot(seen)   # (quick: by the next commit, or the member's settle)
        return skipped

    def _too_far(self, seen: _Seen) -> bool:
        """Whether the journal ran far enough past the snapshot to write one, whatever its age."""
        return (seen.end - seen.snap_end >= SNAPSHOT_BYTES
                or self.journal.needs_compaction(seen.end, seen.base, seen.snap_look[2]))

    def unsettled(self, now: float, quiet_s: float) -> bool:
        """Whether this view appended records that may be in no snapshot yet, the last one at
        least ``quiet_s`` ago (no lock: a cheap look before :meth:`settle`)."""
        if not self.appended or now - self.appended_at < quiet_s:
            return False
        seen = self._seen
        if seen is not None and look_at(self._snap_path) == seen.snap_look \
                and seen.snap_end >= self.appended:
            self.appended = 0
            return False
        return True

    def settle(self) -> bool:
        """(Under the table's lock.) Write the snapshot if none holds this view's records yet
        (a member idle, or closing: its commits made as durable as the snapshot); whether it
        could (False: the caller writes the whole table)."""
        seen = self._current()
        if seen is None:
            return False
        if seen.snap_end < self.appended:
            self._snapshot(seen)
            if self.snapshot_error is not None:
                return True   # (``appended`` kept: tried again at the next settle)
        self.appended = 0
        return True

    def _snapshot(self, seen: _Seen) -> None:
        """Write the snapshot of what the view has read; one that cannot be written (a full
        disk) is put off, not raised (:attr:`snapshot_error`): the commit it follows is in the
        journal already, and readers apply the journal's records past the snapshot."""
        self._apply_waiting(seen)
        table = ClusterTable.from_json(seen.state).to_json()
        try:
            end = offsettable.snapshot(self.layout, table, seen.end, seen.base, seen.snap_look[2])
        except StoreIOError as exc:
            self.snapshot_error = exc
            self._seen = None   # (read again at the next commit: a compaction may have been cut short)
            return
        self.snapshot_error = None
        self.wrote = look_at(self._snap_path)
        self.appended = 0
        if end != seen.end:   # compacted: another file now, read again at the next commit
            self._seen = None
            return
        assert self.wrote is not None
        seen.snap_look, seen.snap_end, seen.first_at = self.wrote, end, 0.0

    @staticmethod
    def _apply_waiting(seen: _Seen) -> None:
        """Apply the records waiting, in order."""
        for payload, end in seen.waiting:
            record = oj.decode(payload)
            assert record is not None, "a record of a commit's form is a JSON object"
            oj.apply(record, seen.state)
            seen.applied = end
        seen.waiting.clear()
        seen.waiting_text.clear()

    def _current(self) -> _Seen | None:
        """The view brought up to the journal's end (reloaded when it must be), or None when
        the table must be written whole."""
        seen = self._seen
        if seen is not None:
            tail = self.journal.read(seen.end, raw=True)
            if (not tail.exists or not tail.header or tail.ident != seen.ident or tail.base != seen.base
                    or tail.end < seen.end):
                seen = None
            else:
                self._take(seen, tail.frames)
                look = look_at(self._snap_path)
                if look != seen.snap_look and not self._snapshot_moved(seen, look):
                    seen = None
                if seen is not None and seen.state.get("lostOffsets"):
                    seen = None   # (a damaged copy's keys: recovery's, written whole)
        if seen is None:
            seen = self._load()
        self._seen = seen
        return seen

    def _take(self, seen: _Seen, frames: list[tuple[bytes, int]]) -> None:
        """The records read past ``seen.end``: those that only set offsets wait, any other
        is applied at once, after those waiting."""
        for payload, end in frames:
            if oj.sets_only(payload):
                seen.waiting.append((payload, end))
                seen.waiting_text += payload
            elif (record := oj.decode(payload)) is None:
                break   # (the journal ends here for readers, as at a torn record: the next append cuts it)
            else:
                self._apply_waiting(seen)
                oj.apply(record, seen.state)
                seen.applied = end
            seen.end = end

    def _snapshot_moved(self, seen: _Seen, look: Look | None) -> bool:
        """Another member wrote the snapshot: learn its journalEnd, and take its table when it
        holds every record applied and some waiting (False: it cannot be trusted as it is, the
        view is loaded again)."""
        try:
            obj = json.loads(self.layout.consumer_offset_json.read_bytes())
        except (OSError, ValueError):
            return False
        if not isinstance(obj, dict) or fsutil.crc_problem(obj) is not None:
            return False
        end = obj.get("journalEnd")
        if not offsettable.is_int(end) or end > seen.end or look is None:
            return False
        seen.snap_look, seen.snap_end, seen.first_at = look, end, 0.0
        ends = [e for _p, e in seen.waiting]
        if ends and ends[0] <= end and end >= seen.applied and (end == seen.applied or end in ends):
            try:
                seen.state = ClusterTable.from_json(obj).to_json()
            except ValueError:
                return False
            seen.waiting = [(p, e) for p, e in seen.waiting if e > end]
            seen.waiting_text = bytearray(b"".join(p for p, _e in seen.waiting))
            seen.applied = end
        return True

    def _load(self) -> _Seen | None:
        look = look_at(self._snap_path)
        loaded = offsettable.load(self.layout)
        tail = loaded.journal
        if (loaded.source != "snapshot" or loaded.lost or loaded.table.lost or not tail.exists
                or not tail.header or tail.end < loaded.snapshot_end or look is None):
            return None
        return _Seen(tail.ident, tail.base, tail.end, loaded.table.to_json(), look, loaded.snapshot_end, tail.end)
