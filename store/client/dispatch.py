"""Handing a consumer group member's pulled messages to its sink, and applying what comes back.

What consuming a batch *means* is the sink's business (:mod:`store.client.sinks`):

* an inline sink runs on the loop's thread, and a batch counts as consumed when its
  ``consume`` returned (``mqctl consume`` writing to stdout: consumed once flushed; an
  exception commits nothing of that batch and stops the consumer);
* a pool sink is handed batches to work on elsewhere (``--exec`` children in a thread pool,
  Python handlers in a thread pool, the iterator of :meth:`store.Consumer.messages` in the
  caller's thread) and answers each with a future of an :data:`~store.client.sinks.Outcome`:
  consumed, failed (:class:`~store.client.retry.Retrier`) or released (handed back untouched,
  to be delivered again). An iterator's sink also says how far into the batch in its hand
  the loop got (``progress``): that prefix is settled as consumed, and committed, every
  ``persist_every_s`` while the batch is in hand (:meth:`Dispatcher.take_progress`); the
  batch's outcome applies to the rest. Of a queue given away it hands back at once what it
  read ahead, and the batch in hand after the message in hand (:meth:`Dispatcher.let_go`).

Orderly mode hands out one batch at a time per queue (``ProcessQueue.busy``) and checks the
queue's lock before every batch (an inline write blocked past the lease lets the queue go:
``Holdings.lapsed``). A handler sink (``interleave``: ``--exec``, Python handlers) is fed
round-robin across the queues held, a batch of each in turn, the next hand-out starting after
the queue served last: as RocketMQ's concurrent consumer submits each queue's pulls to its pool
as they come, every queue a member holds makes progress, and a backlog in one delays a message
of another by a batch per queue, not by the whole backlog. (A batch is ``--batch``, or what a
Python handler gets through in 50 ms: a round is not cut finer: more hand-overs and pulls.)
"""
from __future__ import annotations

import math
import time
from dataclasses import replace

from store import names
from store.client.holding import Holdings
from store.client.offset_keeper import OffsetKeeper
from store.client.options import ConsumeOptions, RunState
from store.client.process_queue import ProcessQueue
from store.client.retry import Retrier, original_topic
from store.client.sinks import is_pool_sink, rest_outcome
from store.errors import HandlerError
from store.log.offsets import QueueKey, Warn
from store.log.record import Message

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    import concurrent.futures as cf
    from typing import Any, Callable, Sequence

    from store.client.dedup import DedupLog
    from store.client.sinks import InlineSink, PoolSink


class Dispatcher:
    """The member's sink and the batches out in it (see the module docstring)."""

    def __init__(self, opts: ConsumeOptions, run: RunState, held: Holdings, keeper: OffsetKeeper,
                 retrier: Retrier, warn: Warn, wake: Callable[[], None]) -> None:
        self.o = opts
        self.warn = warn
        self.run = run
        self.held = held
        self.keeper = keeper
        self.retrier = retrier
        self.wake = wake
        self.inline: InlineSink | None = None
        self.pool: PoolSink | None = None
        self.raw_fast = False
        self.client_fast = False        # build store.Message objects straight from columns
        # the sink's optional attributes (PoolSink), read once in set_sink
        self.per_message = False
        self.spread = 1
        self.interleave = False         # a batch of each queue in turn (see the module docstring)
        self.turn = 0                   # where the next round-robin hand-out starts
        self.idle_check: Callable[[], None] | None = None
        self.in_write = False           # an inline sink is writing: a second signal interrupts it
        # the batches out, each with the process queue that handed it out: a queue let go and
        # taken again meanwhile (a reset) has a new one, which the batch is nothing to (collect)
        self.futures: dict[cf.Future[Any], tuple[QueueKey, ProcessQueue, list[Message]]] = {}
        # an iterator's sink: how far into the batch in hand its loop got (see take_progress)
        self.progress: Callable[[], tuple[cf.Future[Any], int] | None] | None = None
        self.partly: dict[cf.Future[Any], int] = {}   # messages of a batch out settled already
        self.progress_at = 0.0                         # when progress was last looked at
        self.wake_on_done = True
        self.due = math.inf   # when the loop should take a turn for the dispatcher's sake
        self.dedup: DedupLog | None = None
        # batches whose consumed messages a pool sink's thread recorded in the dedup log
        # already (id -> the batch, kept so that its id is not reused meanwhile)
        self.recorded: dict[int, list[Message]] = {}
        self.consumed = 0
        self.last_activity = time.monotonic()

    def set_sink(self, sink: InlineSink | PoolSink) -> None:
        """Where batches go from now on. Only while no batch is out."""
        if self.futures:
            raise RuntimeError("cannot change the sink while batches are out")
        o = self.o
        self.inline, self.pool = (None, sink) if is_pool_sink(sink) else (sink, None)
        self.raw_fast = self.inline is not None and bool(getattr(sink, "raw", False)) and not o.dedup
        self.client_fast = (self.pool is not None and bool(getattr(sink, "client_messages", False))
                            and not o.orderly and not o.dedup)
        every_s = max(0.0, float(getattr(sink, "persist_every_s", 0.0) or 0.0))
        self.keeper.pace(self.inline is not None, every_s)
        self.per_message = self.pool is not None and bool(getattr(sink, "per_message", False))
        self.spread = max(1, int(getattr(sink, "spread", 0) or 0)
                          or (self.pool.max_in_flight if self.pool is not None else 1))
        self.interleave = self.pool is not None and bool(getattr(sink, "interleave", False)) and not o.orderly
        self.idle_check = getattr(self.inline, "idle_check", None)
        self.progress = getattr(self.pool, "progress", None) if not o.orderly else None
        # a batch settled wakes the loop, unless its consumer runs the pulls that feed it itself
        self.wake_on_done = not getattr(self.pool, "feeds_itself", False)
        if self.pool is not None and o.dedup and hasattr(self.pool, "on_outcome"):
            self.pool.on_outcome = self._record_outcome
        if self.pool is not None and hasattr(self.pool, "may_start"):   # (Holdings.may_start)
            self.pool.may_start = self.held.may_start

    def reader_feeds(self) -> bool:
        """Whether the pool sink's reader runs the pulls that feed it now (an iterator walking
        its batches, ``handoff.feed``): a turn that found work is then not followed by another
        at once; the loop looks again when something is due (a progress look, a commit)."""
        return not self.wake_on_done and not getattr(self.pool, "waiting", True)

    def budget(self) -> int:
        """How many more messages may be handed out (``count``)."""
        if self.o.count is None:
            return 1 << 30
        return max(0, self.o.count - self.consumed - sum(len(m) for _k, _pq, m in self.futures.values()))

    # -- handing out -----------------------------------------------------------------------
    def dispatch_all(self) -> bool:
        """Hand out what the held queues have cached, as far as the sink takes it."""
        worked = False
        o, run, pool, held = self.o, self.run, self.pool, self.held
        pqs, locks = held.pqs, held.locks
        sized = self.per_message and not o.orderly
        # per-message sinks: batches sized to the backlog of every queue held (spread over the
        # batches the sink may have out, or its ``spread``), one message each when little waits;
        # full batches while the queues hold more than ``spread`` of them (handed out or not):
        # every thread has a batch then, and a pull's worth cut in ``spread`` parts would only
        # cost more hand-overs (and commits)
        waiting = sum(len(p.msgs) - len(p.in_flight) for p in pqs.values()) if sized else 0
        spread = self.spread
        if sized and pool is not None and sum(len(p.msgs) for p in pqs.values()) >= spread * pool.batch:
            sized = False
        items = list(pqs.items())
        first = self.turn % len(items) if self.interleave and items else 0
        more = True
        while more:   # (rounds: only a round-robin sink goes round more than once)
            more = False
            for i in range(len(items)):
                pos = (first + i) % len(items)
                key, pq = items[pos]
                if run.stop_requested or run.fatal is not None:
                    return worked
                if pqs.get(key) is not pq:
                    continue   # dropped (its lock lost) in an earlier round of this call
                while True:
                    budget = self.budget()
                    if budget <= 0:
                        return worked
                    if pool is not None and len(self.futures) >= pool.max_in_flight:
                        return worked
                    n = min(budget, pool.batch if pool is not None else 1024)
                    if sized:
                        n = max(1, min(n, waiting // spread))
                    if o.orderly and (pq.busy or pq.suspended_until > time.monotonic() or not pq.msgs):
                        break
                    if not o.orderly and len(pq.in_flight) >= len(pq.msgs):
                        break
                    lock = locks.get(key)
                    # orderly: the lock file's identity checked before every batch; concurrent: every 100 ms
                    if lock is not None and not lock.is_valid(0 if o.orderly else 100):
                        if lock.held:  # (a deleted or replaced lock file was reported by qlocks)
                            self.warn(f"the lock of {key[0]}/{key[1]} was not renewed in time; dropping the queue")
                        held.lose(key)
                        break
                    if o.orderly:
                        batch = pq.take(n)
                        pq.busy = True
                    else:
                        batch = pq.next_batch(n)
                    if not batch:
                        break
                    if self.dedup is not None and not o.orderly:
                        batch = self._without_recorded(key, pq, batch)
                        if not batch:
                            continue
                    if self.keeper.stage is not None:
                        self.keeper.stage.handed_out(batch)
                    worked = True
                    waiting -= len(batch)
                    if self.inline is not None:
                        if not self._consume_inline(key, pq, batch):
                            return True   # a stop cut the write short
                        if held.lapsed(key, len(batch), self.warn):
                            break
                    else:
                        assert pool is not None
                        submit_locked = getattr(pool, "submit_locked", None)
                        if submit_locked is not None and lock is not None and lock.held:
                            # The handler inherits a descriptor of the queue's lock file: the OS
                            # lock stays held while any handler of this queue runs, so even if
                            # this process dies, no new owner starts the queue before its
                            # handlers are gone.
                            fut = submit_locked(batch, original_topic(batch[0]), lock.share_fd())
                        else:
                            fut = pool.submit(batch, original_topic(batch[0]))
                        if self.wake_on_done:
                            fut.add_done_callback(lambda _f: self.wake())
                        self.futures[fut] = (key, pq, batch)
                        self.held.handed[id(batch)] = (key, pq)   # (Holdings.may_start)
                        if o.orderly:
                            break
                    if self.interleave:
                        # the next batch from the next queue: this round's, or the next hand-out's
                        self.turn, more = pos + 1, True
                        break
        return worked

    def _without_recorded(self, key: QueueKey, pq: ProcessQueue, batch: list[Message]) -> list[Message]:
        """``batch`` less the messages whose id the dedup log recorded after they were pulled
        (``pulling.py`` checks at the pull): a copy on another queue, or further on in this
        one, pulled before the first copy's handler completed. They are consumed without a
        handler run, and not counted, as a copy skipped at the pull is."""
        dedup = self.dedup
        assert dedup is not None
        dedup.refresh()
        seen = dedup.seen
        skip = [m for m in batch if m.uniq_key and seen(m.uniq_key)]
        if not skip:
            return batch
        off = pq.remove(skip)
        if off >= 0:
            self.keeper.advance(key, off)
        gone = set(map(id, skip))
        return [m for m in batch if id(m) not in gone]

    def _consume_inline(self, key: QueueKey, pq: ProcessQueue, batch: list[Message]) -> bool:
        # An exception (BrokenPipe) propagates: what was written whole is committed. False: a stop cut it short.
        assert self.inline is not None
        self.in_write = True
        try:
            self.inline.consume([_present(m) for m in batch] if names.is_retry_topic(key[0]) else batch)
        except BaseException as exc:
            # The leading messages whose whole line was written are consumed; the rest are not.
            done = self.completed(len(batch))
            if done:
                if self.o.orderly:
                    for m in batch[done:]:   # back in front, for whoever holds the queue next
                        pq.consuming.pop(m.queue_offset, None)
                        pq.msgs[m.queue_offset] = m
                self.succeeded(key, pq, batch[:done])
            if self._cut_by_stop(exc):
                return False
            raise
        finally:
            self.in_write = False
        self.succeeded(key, pq, batch)
        return True

    def write_raw(self, key: QueueKey, bodies: Sequence[bytes | memoryview], offsets: Sequence[int],
                  next_offset: int) -> bool:
        """Bare bodies of one queue straight to the inline sink (nothing to filter or dedup);
        the queue's offset moves only after the write returned, as on the general path. False:
        a stop cut the write short (the queue's offset moved past the lines written whole)."""
        assert self.inline is not None
        self.in_write = True
        try:
            self.inline.write_raw(bodies)
        except BaseException as exc:
            # A closed pipe, a stop or a second signal: the bodies whose whole line was written
            # (and, for a pipe, read) are consumed; the rest are not.
            done = self.completed(len(bodies))
            if done:
                self.consumed += done
                offs = list(offsets)
                self.keeper.advance(key, offs[done] if done < len(offs) else next_offset)
            if self._cut_by_stop(exc):
                return False
            raise
        finally:
            self.in_write = False
        self.consumed += len(bodies)
        self.last_activity = time.monotonic()
        return True

    def _cut_by_stop(self, exc: BaseException) -> bool:
        """Whether the inline sink ended a write because the member is stopping (it raises
        InterruptedError then, the lines written whole counted): a stop like any other."""
        return isinstance(exc, InterruptedError) and self.run.stop_requested

    def completed(self, n: int) -> int:
        """How many leading messages of the inline sink's last, failed call were delivered
        in full (its ``completed`` attribute; 0 for a sink that does not say)."""
        done = getattr(self.inline, "completed", 0)
        return max(0, min(n, done if isinstance(done, int) else 0))

    # -- outcomes --------------------------------------------------------------------------
    def collect(self, block: bool) -> bool:
        """Apply the outcomes of the pool sink's finished batches (``block``: wait for one)."""
        if not self.futures:
            self.due = math.inf
            return False
        if self.progress is not None:
            self._look_at_progress()
        # (here, as in the pool sinks: an inline sink's process never loads concurrent.futures)
        import concurrent.futures as cf
        futures, pqs, dropping = self.futures, self.held.pqs, self.held.dropping
        done = [f for f in futures if f.done()]
        if not done and block:
            done = list(cf.wait(list(futures), return_when=cf.FIRST_COMPLETED).done)
        for fut in done:
            key, out_of, batch = futures.pop(fut)
            self.held.handed.pop(id(batch), None)
            recorded = self.recorded.pop(id(batch), None) is batch
            pq = pqs.get(key) or dropping.get(key)
            try:
                ok, why = fut.result()
            except (HandlerError, cf.CancelledError) as exc:
                if isinstance(exc, HandlerError):
                    self.run.fatal = exc
                    self.run.stop_requested = True
                ok, why = None, str(exc)
            if self.partly:
                settled = self.partly.pop(fut, 0)
                if settled:   # (an outcome counts from the batch's start; ``batch`` is its rest)
                    ok = rest_outcome(ok, settled, len(batch))
            if pq is not out_of:
                self._stale(pq, batch)
                continue
            if isinstance(ok, list) and self.o.orderly and ok:
                # in order: a failure holds back the whole batch (retried in place)
                self.failed(key, pq, batch, ok[0][1])
            elif isinstance(ok, list):
                failed = dict(ok)
                good = [m for i, m in enumerate(batch) if i not in failed]
                if good:
                    self.succeeded(key, pq, good, recorded)
                for i, reason in failed.items():
                    self.failed(key, pq, [batch[i]], reason)
            elif ok is None:
                self._released(pq, batch)
            elif ok is not True and isinstance(ok, int) and 0 < ok < len(batch) and not self.o.orderly:
                # the iterator consumed the first ``ok`` messages and gave the rest back
                self.succeeded(key, pq, batch[:ok])
                self._released(pq, batch[ok:])
            elif ok:
                self.succeeded(key, pq, batch, recorded and ok is True)
            else:
                self.failed(key, pq, batch, why)
        return bool(done)

    def _stale(self, pq: ProcessQueue | None, batch: list[Message]) -> None:
        """A batch handed out by a holding of its queue that was let go since (``offsets reset``
        under the member, :meth:`OffsetKeeper._reload_after_reset`): its outcome is no one's.
        The queue starts again from its stored offset; the queue taken again (``pq``) may have
        handed the messages out again already. Applied to it, the outcome settled a message
        whose new run was still out (a stage then committed past it with no outputs). A stage
        forgets the outputs it gave, unless its message is out again (the new run's to settle)."""
        stage = self.keeper.stage
        if stage is not None:
            again = set() if pq is None else (pq.in_flight | set(pq.consuming))
            stage.handed_out([m for m in batch if m.queue_offset not in again])

    def _record_outcome(self, batch: list[Message], outcome: Any) -> None:
        """In a pool sink's thread, as soon as a handler's outcome is known (``on_outcome``):
        its consumed messages go to the dedup log now, not when the loop collects the batch
        (which may be after other handlers' batches, a pull or a commit: a crash meanwhile
        would hand them all out again). Whatever fails here is recorded by the loop instead
        (:meth:`succeeded`), which reports the error."""
        ok = outcome[0] if isinstance(outcome, tuple) and outcome else None
        if ok is True:
            done = batch
        elif isinstance(ok, list) and not (ok and self.o.orderly):
            failed = {i for i, _why in ok}
            done = [m for i, m in enumerate(batch) if i not in failed]
        else:
            return   # failed, released, or partly consumed: the loop settles it
        dedup = self.dedup
        if dedup is None:
            return
        try:
            dedup.record([m.uniq_key for m in done if m.uniq_key])
        except Exception:   # (the loop's record reports it)
            return
        self.recorded[id(batch)] = batch

    def _look_at_progress(self) -> None:
        """Once per ``every_s`` while an iterator has batches out: what its loop consumed of
        the batch in its hand is committed now (a kill -9 then hands again no more than with
        a handler's batches: what the last ``every_s`` consumed), and the loop wakes for the
        next look (``due``) however long the batch stays in hand."""
        now, every_s = time.monotonic(), self.keeper.every_s
        if now >= self.progress_at + every_s:
            self.progress_at = now
            if self.take_progress():
                self.keeper.persist_idle(handlers_busy=False)   # (what moved, at once)
        self.due = self.progress_at + every_s

    def take_progress(self) -> bool:
        """Settle as consumed the messages of the batch in an iterator's hand that its loop
        has consumed (those before the one in hand): their offsets move while a slow loop is
        still in the batch. The batch stays out with the rest; its outcome, when it comes,
        counts from its start (``partly``). True if anything was settled."""
        got = self.progress() if self.progress is not None else None
        if got is None:
            return False
        fut, consumed = got
        entry = self.futures.get(fut)
        new = consumed - self.partly.get(fut, 0)
        if entry is None or new <= 0:
            return False   # (settled and collected already, or nothing new)
        key, out_of, batch = entry
        if (self.held.pqs.get(key) or self.held.dropping.get(key)) is not out_of:
            return False   # (let go since: see _stale)
        pq = out_of
        self.futures[fut] = (key, pq, batch[new:])
        self.partly[fut] = consumed
        self.succeeded(key, pq, batch[:new])
        return True

    def let_go(self) -> None:
        """(Queues being dropped, before their drops are settled.) An iterator's sink hands back
        at once what it has out of them (``InHand.let_go``): applied now."""
        let_go = getattr(self.pool, "let_go", None) if self.held.dropping else None
        if let_go is not None and let_go(self.futures, self.held.dropping):
            self.collect(block=False)

    def _released(self, pq: ProcessQueue, batch: list[Message]) -> None:
        """Hand a batch back untouched: the next dispatch takes it again, in order."""
        if self.o.orderly:
            pq.make_again()
            pq.busy = False
        else:
            pq.release(batch)

    def succeeded(self, key: QueueKey, pq: ProcessQueue, batch: list[Message], recorded: bool = False) -> None:
        """``recorded``: the batch's messages are in the dedup log already (``on_outcome``)."""
        stage = self.keeper.stage
        if stage is not None:
            stage.settle(key, [(m.queue_offset, m.commitlog_offset) for m in batch])
        if self.dedup is not None and not recorded:
            self.dedup.record([m.uniq_key for m in batch if m.uniq_key])
        if self.o.orderly:
            off = pq.commit()
            pq.busy = False
        else:
            off = pq.remove(batch)
        if off >= 0:
            self.keeper.advance(key, off)
        self.consumed += len(batch)
        self.last_activity = time.monotonic()

    def failed(self, key: QueueKey, pq: ProcessQueue, batch: list[Message], why: str) -> None:
        self.last_activity = time.monotonic()
        # --count K bounds the messages taken, whatever their outcome: a failed one counts
        # (it was handed to the handler), or a failing handler would take message after
        # message, each retried or dead-lettered, until stopped
        self.consumed += len(batch)
        if self.retrier.failed(key, pq, batch, why):
            self.succeeded(key, pq, batch)   # settled: committed (and counted once, above)
            self.consumed -= len(batch)

    def retry_due(self) -> None:
        """Retry the send-backs that failed earlier and are due now, in the holding their message
        is out of: one being let go gets it back (its drop waits for it; the next holder
        delivers it), one let go since is nothing to it (as a stale batch, ``_stale``)."""
        for key, pq, m in self.retrier.due():
            if self.held.pqs.get(key) is pq:
                # (the retrier's, not self.failed: the message was counted when its handler failed)
                self.last_activity = time.monotonic()
                self.retrier.failed(key, pq, [m], "retry after a failed send-back")
            elif self.held.dropping.get(key) is pq:
                pq.release([m])

    # -- stopping --------------------------------------------------------------------------
    def finish(self, wait_handlers: bool) -> None:
        """Stop the pool sink: the batches not started are handed back (when the sink says so),
        the running ones end (``wait_handlers``) or are ended (``abort``); what finished is applied."""
        pool = self.pool
        if pool is None:
            return
        if getattr(pool, "cancel_on_stop", False):   # (queued batches handed back: a stop starts none)
            for fut in list(self.futures):
                fut.cancel()
        abort = getattr(pool, "abort", None)
        if not wait_handlers and abort is not None:
            abort()   # end the running handlers (they are not counted as consumed)
        if wait_handlers or abort is not None:
            # The batches in handlers finish (or were ended), and what finished is committed.
            while self.futures:
                self.collect(block=True)
        else:
            self.collect(block=False)   # what finished counts (the rest is delivered again)
        pool.shutdown(wait_handlers)


def _present(m: Message) -> Message:
    """A retry-topic message as its consumer sees it: under its original topic."""
    topic = original_topic(m)
    return m if topic == m.topic else replace(m, topic=topic)
