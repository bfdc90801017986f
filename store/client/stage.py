"""An exactly-once pipeline stage: a group member whose outputs and offsets are written in one
atomic batch (``mqctl consume --to DST``, ``Consumer.run(handler, to="DST")``).

Handlers (threads, ``--exec`` children, the iterator's caller) :meth:`Stage.emit` the outputs
of each input message as they finish, in any order. When the runtime settles a message
(consumed, or a failed one sent back to the retry topic or the DLQ, whose copy is its output)
its outputs move to the queue's *pending* list under its queue offset. A commit of the group's
offsets (:class:`~store.client.offset_keeper.OffsetKeeper`, at its usual pace) then writes,
per queue, the outputs of every input below the committed offset, in queue order, followed by
the commit record (``store/log/offsetcommits.py``): one write batch under the store's write
lock, after checking that this member still holds those queues' locks. Outputs of an input
above the committed offset (an earlier one still in a handler) wait for the next commit, so a
stage's outputs appear in its inputs' queue order whatever the handler concurrency.

Nothing of this reaches the offset table directly: readers of the table apply the commit
records after it, and the table absorbs them once they are durable. A crash or a ``kill -9``
loses the pending outputs and the uncommitted offsets together: the next owner of a queue
starts at the last commit and runs the handlers again for what came after it.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace

from store import names
from store.client.rules import ArgNames, usage
from store.errors import MessageTooLargeError, StoreError, UsageError, topic_not_created
from store.log import format as F
from store.log.messagestore import Store
from store.log.offsetcommits import OffsetCommit
from store.log.offsets import QueueKey
from store.log.record import (
    PROP_KEYS,
    PROP_SHARDING_KEY,
    PROP_TAGS,
    RESERVED_PROPERTIES,
    Draft,
    Message,
)

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Any, Callable, Iterable, Mapping, Sequence

    from store.client.message import Message as ClientMessage

    Output = Any   # bytes | str | dict (body, keys, tags, sharding_key/shardingKey, properties)


class LostQueueError(StoreError):
    """A stage's commit found a queue lock gone (the queue went to another member), or the
    offsets of ``topics`` reset since the member loaded them."""

    def __init__(self, message: str, topics: set[str] | None = None) -> None:
        super().__init__(message)
        self.topics = topics or set()


@dataclass
class Stage:
    """The outputs of a member's inputs, waiting for their offsets (see the module docstring)."""

    store: Store
    group: str
    to: str
    sync: bool = False
    orderly: bool = False     # outputs without a sharding key stay in their input's queue number
    by_record: dict[int, list[Draft]] = field(default_factory=dict)   # input record -> outputs
    pending: dict[QueueKey, dict[int, list[Draft]]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    _n: int | None = None     # the output topic's queues
    _order: bool | None = None   # whether it is ordered (read once: a topic's order never changes)

    def emit(self, m: Message | ClientMessage, outputs: Iterable[Output] | Output | None) -> None:
        """The outputs of input ``m`` (any thread; called again, it replaces them). An output the
        write would refuse raises here (UsageError, MessageTooLargeError), as the failure of
        ``m``'s handler (retried, then dead-lettered, naming it) or at the ``commit_with`` line
        that made it: refused by the stage's write instead, it stopped the stage on every
        restart, its good outputs with it, without naming the input."""
        drafts = self._placed(m, [to_draft(self.to, o, self._queues()) for o in _as_list(outputs)])
        limit = self.store.settings.max_message_size
        for d in drafts:
            if len(d.body) > limit:
                raise MessageTooLargeError(f"an output of {len(d.body)} bytes exceeds the store's limit "
                                           f"of {limit} bytes")
            if d.sharding_key is None and d.queue_id < 0:
                if self._ordered():
                    raise UsageError(f"topic {self.to!r} is ordered: give each output a sharding_key or a queue, "
                                     f"or consume orderly (its outputs keep their input's queue)")
        with self.lock:
            self.by_record[m.commitlog_offset] = drafts

    def copy(self, m: Message | ClientMessage) -> None:
        """Input ``m`` copied to the output topic: body, tags, keys, sharding key and user
        properties (a redelivery's too, under the topic it was first sent to)."""
        props = {k: v for k, v in m.properties.items() if k not in RESERVED_PROPERTIES or k in _COPIED}
        sharding = m.properties.get(PROP_SHARDING_KEY)
        d = Draft(topic=self.to, body=bytes(m.body), properties=props, sharding_key=sharding,
                  flag=m.flag, born_timestamp=m.born_timestamp, sysflag=F.ATOMIC_BATCH)   # (seal's flag)
        with self.lock:
            self.by_record[m.commitlog_offset] = self._placed(m, [d])

    def _placed(self, m: Message | ClientMessage, drafts: list[Draft]) -> list[Draft]:
        """An orderly stage's outputs with neither a sharding key nor a queue go to their
        input's queue number, so that a queue's order carries on; others are placed by the write."""
        if not self.orderly:
            return drafts
        n = self._queues()
        return [d if d.sharding_key is not None or d.queue_id >= 0 else replace(d, queue_id=m.queue_id % n)
                for d in drafts]

    def _ordered(self) -> bool:
        if self._order is None:   # (per output it cost two stats: a fifth of a stage's rate)
            self._order = self.store.has_topic(self.to) and self.store.topic(self.to).order
        return self._order

    def _queues(self) -> int:
        if self._n is None:
            self._n = self.store.topic(self.to).queues if self.store.has_topic(self.to) else \
                self.store.settings.default_queues
        return self._n

    def emit_drafts(self, commitlog_offset: int, drafts: list[Draft]) -> None:
        """Drafts that stand for an input's outcome (its retry or dead-letter copy), instead
        of anything its handler gave (a batch dead-lettered whole keeps no output)."""
        with self.lock:
            self.by_record[commitlog_offset] = list(drafts)

    def handed_out(self, batch: Sequence[Message]) -> None:
        """A batch goes to a handler (again): what an earlier attempt gave is not its output."""
        if self.by_record:
            with self.lock:
                for m in batch:
                    self.by_record.pop(m.commitlog_offset, None)

    def settle(self, key: QueueKey, offsets_and_records: Iterable[tuple[int, int]]) -> None:
        """Inputs of queue ``key`` settled: (queue offset, commit-log offset) each."""
        with self.lock:
            q = self.pending.setdefault(key, {})
            for qoff, phys in offsets_and_records:
                q[qoff] = self.by_record.pop(phys, [])

    def forget(self, key: QueueKey) -> None:
        """A queue let go without committing (a reset): its outputs are never written."""
        with self.lock:
            self.pending.pop(key, None)

    def commit(self, offsets: Mapping[QueueKey, int], epochs: Mapping[str, int],
               fence: Callable[[], None] | None) -> None:
        """Write the outputs below ``offsets`` and the offsets, atomically."""
        drafts: list[Draft] = []
        taken: list[tuple[QueueKey, int]] = []
        with self.lock:   # (an asyncio member commits on a thread of its loop's)
            for key, off in sorted(offsets.items()):
                q = self.pending.get(key)
                if not q:
                    continue
                for qoff in sorted(k for k in q if k < off):
                    drafts += q[qoff]
                    taken.append((key, qoff))
        topics = {t for t, _q in offsets}
        commit = OffsetCommit(self.group, dict(offsets), {t: epochs.get(t, 0) for t in topics})
        self.store.put(drafts, sync=self.sync, commit=commit, fence=fence)
        with self.lock:
            for key, qoff in taken:
                self.pending.get(key, {}).pop(qoff, None)


def check_stage(store: Store | None, to: str | None, *, broadcast: bool, dedup: bool,
                no_group: bool = False, arg_names: ArgNames | None = None, consumed: str | None = None) -> None:
    """The combinations an exactly-once stage refuses (exit 2), named in the caller's spelling
    (``arg_names``: ``to``, or ``--to`` for the command line) — among them an output topic that
    is the ``consumed`` one (its outputs would be its inputs again, without end) — and (given
    the store) an output topic that does not exist where topics are not created on send (exit 3)."""
    if to is None:
        return
    names.validate_topic(to)
    if to == consumed:
        raise usage("{to} must name another topic than the one consumed", arg_names)
    if no_group:
        raise usage("{to} commits the group's offsets with the outputs: it needs a group, not --no-group",
                    arg_names)
    if broadcast:
        raise usage("{to} needs a clustering group: broadcast offsets are each member's own", arg_names)
    if dedup:
        raise usage("{dedup} is not used with {to}: a stage's outputs and offsets are written "
                    "together, so a redelivered message has no output in the topic yet", arg_names)
    if store is not None and not store.settings.auto_create_topics and not store.has_topic(to):
        raise topic_not_created(to)


def _as_list(outputs: Iterable[Output] | Output | None) -> Sequence[Output]:
    if outputs is None:
        return ()
    if isinstance(outputs, (bytes, bytearray, memoryview, str, dict)):
        return (outputs,)
    return list(outputs)


_COPIED = {PROP_TAGS, PROP_KEYS, PROP_SHARDING_KEY}
_FIELDS = {"body", "keys", "tags", "sharding_key", "shardingKey", "properties", "queueId", "queue_id"}


def to_draft(topic: str, out: Output, queues: int) -> Draft:
    """One output as a draft for ``topic`` (of ``queues`` queues): bytes or str (the body), or
    a dict with ``body`` and optional ``keys`` (a list or a comma-separated string), ``tags``,
    ``sharding_key`` (or ``shardingKey``), ``properties`` and ``queue_id``. Everything a write
    would refuse is refused here (``UsageError``), where it fails the handler's message."""
    from store.client.properties import build_properties
    if isinstance(out, (bytes, bytearray, memoryview)):
        return Draft(topic=topic, body=bytes(out), sysflag=F.ATOMIC_BATCH)
    if isinstance(out, str):
        return Draft(topic=topic, body=out.encode(), sysflag=F.ATOMIC_BATCH)
    if not isinstance(out, dict):
        raise UsageError(f"an output is bytes, str or a dict with 'body', not {type(out).__name__}")
    unknown = set(out) - _FIELDS
    if unknown:
        # (the Python spellings first, as run(to=)'s documentation writes them; the JSON ones
        # of ``mqctl consume --exec --to --output json`` are accepted as well)
        raise UsageError(f"unknown output field(s) {', '.join(sorted(unknown))} (known: body, keys, tags, "
                         f"sharding_key (or shardingKey), properties, queue_id (or queueId))")
    body = out.get("body", b"")
    if not isinstance(body, (bytes, bytearray, memoryview, str)):
        raise UsageError(f"an output's body is bytes or str, not {type(body).__name__}")
    keys = out.get("keys")
    if isinstance(keys, str):
        keys = [k for k in keys.replace(",", " ").split() if k]
    elif keys is not None and not (isinstance(keys, (list, tuple)) and all(isinstance(k, str) for k in keys)):
        raise UsageError("an output's keys are a string or a list of strings")
    user = out.get("properties") or {}
    if not isinstance(user, dict):
        raise UsageError("an output's properties are an object of names and values")
    sharding = out.get("sharding_key", out.get("shardingKey"))
    props = build_properties(tags=out.get("tags"), keys=keys, properties=user,
                             sharding_key=sharding)
    qid = out.get("queue_id", out.get("queueId"))
    if qid is not None and (isinstance(qid, bool) or not isinstance(qid, int) or not 0 <= qid < queues):
        raise UsageError(f"an output's queue id {qid!r} is not one of {topic}'s queues 0-{queues - 1}")
    return Draft(topic=topic, body=body.encode() if isinstance(body, str) else bytes(body), properties=props,
                 sharding_key=sharding, queue_id=-1 if qid is None else qid, sysflag=F.ATOMIC_BATCH)


class CopySink:
    """``mqctl consume SRC --to DST`` without ``--exec``: every message copied (an inline
    sink: consumed when its copy waits in the stage, written with its offset)."""

    raw = False

    def __init__(self, stage: Stage) -> None:
        self.stage = stage

    def consume(self, batch: list[Message]) -> None:
        for m in batch:
            self.stage.copy(m)

    def write_raw(self, bodies: Sequence[bytes | memoryview]) -> None:
        raise RuntimeError("a copy sink takes messages")
