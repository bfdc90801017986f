"""Offset commits in the commit log: how an exactly-once stage's outputs and its group's
offsets become durable together (``mqctl consume --to``, ``Consumer.run(handler, to=…)``).

A stage's write batch is its outputs (messages for other topics, and the copies of failed
inputs for the retry topic or the DLQ) followed by one *commit record*: a message in the
system topic ``RMQ_SYS_OFFSET_COMMIT`` (one queue) whose body says which offsets the batch
commits. The batch is atomic (``atomicbatch.py``: every record carries the SYSFLAG bit
``ATOMIC_BATCH``, the commit record, last, ``ATOMIC_END`` as well): recovery cuts a batch that
has no end record at the log's tail (a writer killed inside its write, or a power cut that kept
only a prefix of it), so after any crash the log holds a stage's batch whole or not at all.
A commit record is one of the topic below, never told by its flags: every producer batch of
several messages ends in an ``ATOMIC_END`` record too.
The delay scheduler seals its passes the same way, with a progress record of its own
(``positions.DelayProgress``, :func:`records_after`): retries come back once.

Commit record body (compact JSON, UTF-8)::

    {"group": "G", "offsets": [["TOPIC", queueId, nextOffset], ...], "epochs": {"TOPIC": n}}

``epochs`` are the reset epochs (``offsettable.py``) the member loaded for those topics. A
record is *applied* to the offset table (the offsets become the group's) only while the
table's epoch of its topic is the same: an ``offsets reset``, ``offsets delete`` or ``topic
delete`` bumps the epoch, so a commit computed before it can never undo it, whenever it is
read. Records are applied in log order, and only forward: a stage's offsets of a queue only
grow within an epoch, and a record read after the table (past ``commitsApplied``) may be older
than what a plain member of the group committed since (a stage killed, its last records never
taken into the table, the group then consumed on without ``--to``): set as given, it would move
the group's offsets back on every read, and the same messages would come again.

The offset table (``consumerOffset.json``) records in ``commitsApplied`` the offset in the
commit topic's queue up to which it includes these records. Readers of the table apply the
records after it in memory (``ClusterOffsetStore``), so a group's offsets as anyone reads
them include every commit in the log; a write of the table *absorbs* only the records that are
durable (below the checkpoint's synced end, or a point the caller made durable): the table
file, which is fsynced, must never hold an offset whose outputs a power cut could take back.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from store import names
from store.layout import Layout
from store.log import checkpoint as ckpt
from store.log import format as F
from store.log.commitlog import CommitLog
from store.log.consumequeue import ConsumeQueue
from store.log.record import Draft, RecordError

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:   # (the offset table is its caller's: not imported by every sender)
    from typing import Any, Protocol

    from store.log.offsettable import ClusterTable

TOPIC = names.OFFSET_COMMIT_TOPIC
QueueKey = tuple[str, int]


@dataclass(eq=False, repr=False)   # (neither is used: start-up, store/__init__.py)
class OffsetCommit:
    """What one stage batch commits: ``group``'s next offsets, and the epochs they assume."""

    group: str
    offsets: dict[QueueKey, int]
    epochs: dict[str, int] = field(default_factory=dict)

    def to_draft(self) -> Draft:
        body = {"group": self.group, "offsets": [[t, q, o] for (t, q), o in sorted(self.offsets.items())],
                "epochs": {t: self.epochs.get(t, 0) for t in sorted({t for t, _q in self.offsets})}}
        return Draft(topic=TOPIC, body=json.dumps(body, separators=(",", ":")).encode(), queue_id=0)

    @classmethod
    def parse(cls, body: bytes) -> OffsetCommit | None:
        """The commit in a record's body; None for a body of any other shape (never applied)."""
        try:
            obj = json.loads(body)
            group = obj["group"]
            offsets = {(str(t), int(q)): int(o) for t, q, o in obj["offsets"]}
            epochs = {str(t): int(n) for t, n in obj.get("epochs", {}).items()}
        except (ValueError, TypeError, KeyError, AttributeError):
            return None
        if not isinstance(group, str) or any(q < 0 or o < 0 for (_t, q), o in offsets.items()):
            return None
        return cls(group, offsets, epochs)


if TYPE_CHECKING:   # (a protocol for type checkers: at run time nothing checks it)
    class BatchEnd(Protocol):
        """What ends an atomic batch: an offset commit, or the delay scheduler's progress
        (``positions.py``), as the draft of the batch's last record."""

        def to_draft(self) -> Draft: ...


def seal(outputs: list[Draft], end: BatchEnd) -> list[Draft]:
    """The drafts of one atomic batch: the outputs, then its end record (the write flags
    them: ``atomicbatch.py``)."""
    return [*outputs, end.to_draft()]


def _records(layout: Layout, topic: str, after: int) -> tuple[list[tuple[int, int, bytes | None]], int]:
    """The records of system topic ``topic`` (queue 0) from queue offset ``after`` — each as
    (its queue offset, where it ends in the log, its body or None when it cannot be read) —
    and the queue's end. ``after`` is clamped to the queue (one shorter than ``after`` lost
    durable records: ``store recover`` accepted the loss, and its new records are read from
    its end)."""
    d = layout.queue_dir(topic, 0)
    if not d.is_dir():
        return [], 0
    q = ConsumeQueue(d)
    log: CommitLog | None = None
    out: list[tuple[int, int, bytes | None]] = []
    try:
        end = q.max_offset()
        pos = max(min(after, end), q.min_offset())
        while pos < end:
            entries = q.read_entries(pos, 4096)
            if not entries:
                break
            log = log or _commitlog(layout)
            for phys, size, _tags in entries:
                out.append((pos, phys + size, _body(log, phys, size, topic)))
                pos += 1
        return out, end
    finally:
        q.close()
        if log is not None:
            log.close()


def _commitlog(layout: Layout) -> CommitLog:
    """The store's commit log, to read records by offset, with the segment size the store's
    opener uses: store.json's, its .bak's when that is the one that reads or agrees with the
    segments (``settings.load``, ``settings.agreeing``; what they warn of, the opener says)."""
    from store.errors import DataError
    from store.log import settings

    def quiet(_message: str) -> None:
        pass

    try:
        found = settings.load(layout, quiet)
        log = CommitLog(layout.commitlog_dir, found.commitlog_segment_size)
        agreed = settings.agreeing(layout, found, log, quiet)
    except DataError:   # (no store.json at all: no store opens here either)
        return CommitLog(layout.commitlog_dir, F.COMMITLOG_SEGMENT_SIZE)
    return log if agreed is found else CommitLog(layout.commitlog_dir, agreed.commitlog_segment_size)


def _body(log: CommitLog, phys: int, size: int, topic: str) -> bytes | None:
    """The body of the ``topic`` record at ``phys``; None when it is missing or damaged."""
    try:
        m = log.read(phys, size)
    except (RecordError, OSError):
        return None
    return m.body if m.topic == topic else None


def records_after(layout: Layout, topic: str, after: int) -> tuple[list[bytes], int]:
    """(the bodies of system topic ``topic``'s records after queue offset ``after``, in
    order, the queue's end); unreadable ones are left out."""
    records, end = _records(layout, topic, after)
    return [body for _at, _end, body in records if body is not None], end


@dataclass(eq=False, repr=False)   # (neither is used: start-up, store/__init__.py)
class Pending:
    """The commit records after a table's ``commitsApplied``: ``commits`` in log order, each
    with the log offset its record ends at and its offset in the commit queue; ``end`` the
    commit queue's offset after them."""

    commits: list[tuple[OffsetCommit, int, int]]
    end: int

    def durable(self, durable_end: int) -> Pending:
        """The leading commits whose records end at or below ``durable_end``."""
        for i, (_c, log_end, qoff) in enumerate(self.commits):
            if log_end > durable_end:
                return Pending(self.commits[:i], qoff)
        return self


def queue_end(layout: Layout) -> int:
    """The commit queue's end (0: no commit was ever written)."""
    d = layout.queue_dir(TOPIC, 0)
    if not d.is_dir():
        return 0
    q = ConsumeQueue(d)
    try:
        return q.max_offset()
    finally:
        q.close()


def read_after(layout: Layout, applied: int, durable: int = 0) -> Pending:
    """Every commit record after queue offset ``applied``. A record that cannot be read stops
    the reading (a writer may be between its entry and a reader's look) unless it lies below
    ``durable`` (damage, reported by ``store check``: nothing can be applied from it)."""
    commits: list[tuple[OffsetCommit, int, int]] = []
    records, end = _records(layout, TOPIC, applied)
    pos = min(applied, end)
    for at, log_end, body in records:
        commit = OffsetCommit.parse(body) if body is not None else None
        if commit is not None:
            commits.append((commit, log_end, at))
        elif log_end > durable:
            return Pending(commits, at)
        pos = at + 1
    return Pending(commits, pos)


def durable_end(layout: Layout) -> int:
    """How far the commit log is known to be on disk (the checkpoint's synced end)."""
    cp = ckpt.read(layout.checkpoint)
    return cp.synced_end if cp is not None else 0


def overlay(layout: Layout, table: ClusterTable) -> bool:
    """Apply every commit record after ``table.applied`` to ``table`` (in memory: a read).
    False when some are gone or could not be read: ``store clean`` may have absorbed them into
    the table file and deleted their segment since this table was read (retention absorbs
    before it deletes: the caller reads the file again), or one is being written."""
    end = queue_end(layout)
    if end == table.applied:
        return True
    pending = read_after(layout, table.applied)
    for commit, _end, _at in pending.commits:
        apply_commit(commit, table.epoch, table.get, table.put)
    skipped = pending.commits[0][2] > table.applied if pending.commits else False
    return pending.end >= end and not skipped


def absorb(layout: Layout, table: ClusterTable, durable: int) -> None:
    """Apply the durable commit records after ``table.applied`` and move it past them (the
    table's lock held: the caller writes the table)."""
    if queue_end(layout) == table.applied:
        return
    durable = max(durable, durable_end(layout))
    pending = read_after(layout, table.applied, durable).durable(durable)
    for commit, _end, _at in pending.commits:
        apply_commit(commit, table.epoch, table.get, table.put)
    table.applied = pending.end


def apply_commit(commit: OffsetCommit, epoch_of: Any, get: Any, put: Any) -> None:
    """Apply one commit through ``epoch_of(topic, group)``, ``get(topic, group, queue)`` and
    ``put(topic, group, queue, offset)``: only the topics whose epoch is still the one the
    commit assumed, and only offsets ahead of the table's (see the module docstring)."""
    for (topic, qid), off in commit.offsets.items():
        if epoch_of(topic, commit.group) == commit.epochs.get(topic, 0) and off > get(topic, commit.group, qid):
            put(topic, commit.group, qid, off)
