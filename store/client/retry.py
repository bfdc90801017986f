"""Failed messages: RocketMQ's send-back to ``%RETRY%GROUP`` with delay levels, and the
dead-letter queue ``%DLQ%GROUP`` after the maximum number of reconsumes.

Concurrent consumption: a message that failed its ``reconsumeTimes``-th delivery is parked
in the schedule topic for delay level ``3 + reconsumeTimes`` (10 s, 30 s, 1 m, …, 2 h), then
appears in the group's retry topic with ``reconsumeTimes + 1``; once ``reconsumeTimes`` reaches
the maximum (16) it goes to the DLQ instead. Orderly consumption retries in place and sends a
message straight to the DLQ when its local retries reach the maximum (``--max-reconsume``,
``max_reconsume``). The copy keeps
the unique key, tags and keys, so ``msg show`` finds its whole history.

:class:`Retrier` is what a consumer group member does with a failed batch: retry in place
(orderly), send back to the retry topic or to the DLQ (concurrent), or give up (broadcast);
a send-back that fails is tried again here 5 s later (:data:`SEND_BACK_RETRY_S`), the message
kept handed out meanwhile: its handler does not run again.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

from store import names
from store.client.offset_keeper import OffsetKeeper
from store.client.options import ConsumeOptions
from store.client.process_queue import ProcessQueue
from store.errors import HandlerError, StoreError
from store.log.messagestore import Store
from store.log.offsets import QueueKey, Warn
from store.log.record import (
    PROP_DLQ_ORIGIN_MESSAGE_ID,
    PROP_DLQ_ORIGIN_TOPIC,
    PROP_ORIGIN_MESSAGE_ID,
    PROP_RETRY_TOPIC,
    Draft,
    Message,
)
from store.log.schedule import LEVEL_MS, delay_draft

DEFAULT_MAX_RECONSUME = 16
# How long a member waits before it tries a failed send-back again (RocketMQ's consumer
# resubmits such a message 5 s later).
SEND_BACK_RETRY_S = 5.0


def original_topic(m: Message) -> str:
    """The topic a retry-topic message was first sent to (RocketMQ renames it back)."""
    return m.properties.get(PROP_RETRY_TOPIC, m.topic) if names.is_retry_topic(m.topic) else m.topic


def _copy_properties(m: Message) -> dict[str, str]:
    props = dict(m.properties)
    props.setdefault(PROP_RETRY_TOPIC, original_topic(m))
    props.setdefault(PROP_ORIGIN_MESSAGE_ID, m.msg_id)
    return props


Put = Callable[[list[Draft]], object]


def dead_letter(store: Store, group: str, m: Message, reconsume_times: int, put: Put | None = None) -> None:
    """Store a copy of ``m`` in the group's dead-letter topic (queue 0); ``put``: instead of
    storing it now (an exactly-once stage writes it with its offset)."""
    props = _copy_properties(m)
    props[PROP_DLQ_ORIGIN_TOPIC] = original_topic(m)
    props[PROP_DLQ_ORIGIN_MESSAGE_ID] = m.msg_id
    (put or store.put)([Draft(topic=names.dlq_topic(group), body=m.body, properties=props, queue_id=0,
                     flag=m.flag, born_timestamp=m.born_timestamp, reconsume_times=reconsume_times)])


def send_back(store: Store, group: str, m: Message, max_reconsume: int,
              retry_delay_ms: int | None = None, put: Put | None = None) -> str:
    """Retry later or dead-letter; returns ``"retry"`` or ``"dlq"``."""
    if m.reconsume_times >= max_reconsume:
        dead_letter(store, group, m, m.reconsume_times, put)
        return "dlq"
    level = min(3 + m.reconsume_times, len(LEVEL_MS))
    delay = (0, retry_delay_ms) if retry_delay_ms is not None else (level, LEVEL_MS[level - 1])
    draft = Draft(topic=names.retry_topic(group), body=m.body, properties=_copy_properties(m),
                  queue_id=0, flag=m.flag, born_timestamp=m.born_timestamp,
                  reconsume_times=m.reconsume_times + 1)
    (put or store.put)([delay_draft(draft, delay, store)])
    return "retry"


class Retrier:
    """A consumer group member's failed batches (see the module docstring)."""

    def __init__(self, store: Store, opts: ConsumeOptions, keeper: OffsetKeeper, warn: Warn,
                 sent_back: Callable[[], None]) -> None:
        self.store = store
        self.o = opts
        self.keeper = keeper
        self.warn = warn
        self.sent_back = sent_back   # a copy went to the retry topic: delayed messages soon due
        self.max_reconsume: int | None = None
        # failed send-backs: when due, the queue, the holding the message is out of, the message
        self.retry_later: list[tuple[float, QueueKey, ProcessQueue, Message]] = []
        self.retries_sent = 0   # copies sent to the retry topic (not the DLQ) by this member
        # messages this member settled without their handler succeeding (dead-lettered, or a
        # broadcast one skipped): what ``mqctl consume`` turns into exit 1
        self.gave_up = 0

    def set_retries(self, max_reconsume: int | None, retry_delay_ms: int | None, suspend_ms: int) -> None:
        """Failed batches: retries before the DLQ (None: 16 concurrent, unlimited
        orderly), the fixed retry delay instead of the levels (concurrent), and the pause
        before a retry in place (orderly)."""
        o = self.o
        o.max_reconsume, o.retry_delay_ms, o.suspend_ms = max_reconsume, retry_delay_ms, suspend_ms
        self.max_reconsume = max_reconsume if max_reconsume is not None else (
            None if o.orderly else DEFAULT_MAX_RECONSUME)

    def failed(self, key: QueueKey, pq: ProcessQueue, batch: list[Message], why: str) -> bool:
        """Deal with a failed batch. True: it is settled without being consumed (dead-lettered
        in orderly mode, or broadcast: never retried): the caller commits it like a consumed
        batch, but does not count it."""
        o = self.o
        if o.orderly:
            exhausted = []
            for m in batch:
                n = pq.retries.get(m.queue_offset, m.reconsume_times) + 1
                pq.retries[m.queue_offset] = n
                # RocketMQ counts local retries on the message itself (reconsumeTimes++), so
                # the next delivery shows MQ_RECONSUME_TIMES=n and a dead letter carries it.
                pq.consuming[m.queue_offset] = replace(m, reconsume_times=n)
                if self.max_reconsume is not None and n > self.max_reconsume:
                    exhausted.append(m)
            if exhausted and len(exhausted) == len(batch) and not o.broadcast:
                for m in batch:
                    dead_letter(self.store, o.group, m, m.reconsume_times, self._put_for(m))
                self.gave_up += len(batch)
                self.keeper.resent = True
                self.warn(f"{key[0]}/{key[1]}@{batch[0].queue_offset}: {why}; moved to {names.dlq_topic(o.group)}")
                return True
            self.warn(f"{key[0]}/{key[1]}@{batch[0].queue_offset}: {why}; retrying in place in {o.suspend_ms} ms")
            pq.make_again()
            pq.busy = False
            pq.suspended_until = time.monotonic() + o.suspend_ms / 1000
            return False
        if o.broadcast:
            self.warn(f"{key[0]}/{key[1]}@{batch[0].queue_offset}: {why}; broadcast messages are not retried")
            self.gave_up += len(batch)
            return True
        for m in batch:
            try:
                # (a message built for a client sink, not a record, is sent back as the record it
                # came from)
                rec = m if isinstance(m, Message) else self.store.get(m.commitlog_offset)
                where = send_back(self.store, o.group, rec, self.max_reconsume or 0, o.retry_delay_ms,
                                  self._put_for(m))
            except StoreError as exc:
                # Nothing of the copy was stored (a put is all or nothing). The message stays
                # handed out, not released: a released one would be handed to the handler again
                # at once, fail again, and queue one more send-back per run (a full disk turned
                # two failed messages into a thousand dead letters). Its send-back alone is
                # tried again, once, when it is due.
                self.warn(f"could not send {m.uniq_key if isinstance(m, Message) else m.msg_id} "
                          f"back ({exc}); retrying here in {SEND_BACK_RETRY_S:g} s")
                self.retry_later.append((time.monotonic() + SEND_BACK_RETRY_S, key, pq, m))
                continue
            if where == "dlq":
                self.warn(f"{key[0]}/{key[1]}@{m.queue_offset}: {why}; reconsumed {m.reconsume_times} times, "
                          f"moved to {names.dlq_topic(o.group)}")
            else:
                self.warn(f"{key[0]}/{key[1]}@{m.queue_offset}: {why}; will be redelivered through "
                          f"{names.retry_topic(o.group)} (reconsume {m.reconsume_times + 1} of {self.max_reconsume})")
            self.keeper.resent = True
            if where != "dlq":
                self.retries_sent += 1
            else:
                self.gave_up += 1
            self.sent_back()
            off = pq.remove([m])
            if self.keeper.stage is not None:
                self.keeper.stage.settle(key, [(m.queue_offset, m.commitlog_offset)])
            if off >= 0:
                self.keeper.advance(key, off)
        return False

    def _put_for(self, m: Message) -> Put | None:
        """Where a copy of failed ``m`` goes: stored now, or (an exactly-once stage) written
        with the offset that settles ``m``, as its only output."""
        stage = self.keeper.stage
        if stage is None:
            return None
        return lambda drafts: stage.emit_drafts(m.commitlog_offset, drafts)

    def due(self) -> list[tuple[QueueKey, ProcessQueue, Message]]:
        """The messages whose send-back failed and is due again now, each with the holding it
        is out of (taken off the list)."""
        now = time.monotonic()
        due = [(key, pq, m) for t, key, pq, m in self.retry_later if t <= now]
        self.retry_later = [r for r in self.retry_later if r[0] > now]
        return due

    def report_waiting(self) -> None:
        """At the end of an ``exit_at_end`` run: it stopped at the ends seen at its start, so the
        copies it sent back are all still waiting; it exits 0 (everything there was taken), but
        says so."""
        sent = self.retries_sent
        if self.o.exit_at_end and sent:
            self.warn(f"{sent} failed message{'s' if sent != 1 else ''} wait{'s' if sent == 1 else ''} in "
                      f"{names.retry_topic(self.o.group)} for a retry; run the consumer again to handle them")

    def report_given_up(self, stop_requested: bool) -> None:
        """A run that ended on its own (``exit_at_end``, ``count``, ``idle_timeout_s``) after
        giving up on a message failed: :class:`HandlerError` (the CLI's exit 1). A member
        stopped by SIGINT/SIGTERM or ``stop()`` says it and ends normally: being stopped is
        not a failure, and the dead-letter topic keeps what it gave up on."""
        n = self.gave_up
        if not n:
            return
        where = ("broadcast messages are not retried" if self.o.broadcast
                 else f"moved to {names.dlq_topic(self.o.group)}; see: mqctl dlq list -g {self.o.group}")
        text = f"gave up on {n} message{'s' if n != 1 else ''} ({where})"
        if stop_requested:
            self.warn(text)
            return
        raise HandlerError(text)
