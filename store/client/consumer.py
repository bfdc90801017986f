"""The consumer: :class:`Consumer`, a member of a consumer group, iterator or push style."""
from __future__ import annotations

import datetime as _dt
import operator
import threading
import time
import weakref
from types import TracebackType
from typing import Any, Iterable, Iterator

from store import names
from store.client.consumer_args import (
    Handler,
    StartFrom,
    default_client_id,
    ids_in_use,
    ids_lock,
    run_batch_size,
    set_retries,
    start_position,
    tag_filter,
)
from store.client.consumer_life import IN_HANDLER, Life
from store.client.handoff import (
    PERSIST_EVERY_S,
    DrainedEvent,
    InHand,
    IteratorSink,
    as_client_messages,
    walk_batch,
)
from store.client.message import Message
from store.client.options import ConsumeOptions
from store.client.paths import PathLike, resolve_store_path
from store.client.rules import check_consume_options, check_flush
from store.client.runtime import ConsumerRuntime
from store.client.sinks import Outcome, ThreadPoolSink
from store.client.stage import Stage
from store.errors import UsageError

# (sharedread: the pulls a consumer runs, loaded with the class, so a program's ``from store
# import Consumer`` pays for the read path there, not in its first pull; the store's own
# module leaves it to the first pull, for writers)
from store.log import sharedread  # noqa: F401
from store.log.messagestore import Store

PREFETCH = 16            # batches handed to the iterator ahead of the loop body, at most
ITER_BATCH = 1000        # messages per batch (concurrent mode; orderly hands one at a time)
ITER_CACHE_BYTES = 8 << 20   # bodies the iterator's pulls keep read ahead, all queues together:
                         # memory the process reuses batch after batch. RocketMQ's 1000 messages
                         # a queue was the whole backlog at 64 KiB, each page faulted in afresh
                         # (100 MB of 64 KiB bodies: 45 -> 27 us of CPU a message, measured)


class Consumer:
    """A member of a consumer group on ``topic``, like one ``mqctl consume`` process.

    ::

        with store.Consumer("orders", group="billing", start_from="first") as consumer:
            for msg in consumer.messages(exit_at_end=True):
                print(msg.queue_id, msg.queue_offset, msg.text)

    The consumer joins its group when it is first used (entering the ``with`` block,
    :meth:`messages`, :meth:`run`), as :class:`store.AsyncConsumer` does, not when it is made
    (its arguments are checked then, and the store and topic looked up), and leaves it when it
    is closed (the end of the ``with`` block, or :meth:`close`): offsets are persisted, queue
    locks released, as when ``mqctl consume`` gets SIGTERM. A consumer the program drops
    without closing it leaves too, once it is garbage-collected (or when the process exits).
    While it is a member it shows in ``mqctl consumers``, and the group's queues are shared
    between it and every other member, Python or command line, with one allocation strategy
    (``averagely``) over one membership.

    Arguments:
      ``topic``, ``group``: what to consume, as whom. ``path``: the store directory (``None``:
      ``$MQCTL_STORE``, else ``~/.mqctl/store``); the store and topic must exist.
      ``orderly``: one member at a time per queue, under the same queue locks as
      ``mqctl consume --orderly``, messages of a queue in queue order, one at a time.
      ``broadcast``: every member gets every message (offsets kept per client).
      ``start_from``: where a group new to the topic starts: ``"first"``, ``"last"``
      (the default, as in RocketMQ), a :class:`datetime.datetime` or ms since the epoch. A
      queue without a committed offset in a topic the group has offsets in (added by a
      ``topic update`` while it was stopped, say) starts at its first message. A naive
      datetime is local time, as Python reads it (``datetime.timestamp()``: so
      ``datetime.now() - timedelta(hours=1)`` is an hour ago), unlike a time written without
      an offset on the command line (``--from 2026-11-30T10:00``), which is UTC; give the
      datetime a ``tzinfo`` to say which.
      ``tags``: a subscription expression, ``"*"`` or ``"A || B"``, or a list (tuple, any
      iterable) of tags, one tag an item: ``["A", "B"]`` is ``"A || B"`` (an empty item, an
      expression as an item, or an empty list is a UsageError).
      ``client_id``: the member's id (default ``HOST@PID``; broadcast: ``HOST@DEFAULT``, so a
      restarted broadcast consumer resumes its own offsets); unique among live members.
      ``dedup``: skip redeliveries of message ids this group already consumed.

    Two ways to consume, one per consumer:

    * :meth:`messages` iterates, at-least-once: a message counts as consumed when the loop
      asks for the next one, or when the ``with`` block is left normally. If the loop body
      raises, the message in hand is not committed and is delivered again.
    * :meth:`run` hands each message to a function in a pool of threads, with RocketMQ's
      retries: a function that raises sends the message to the group's retry topic (and to
      its dead-letter queue in the end), or, orderly, retries it in place.

    Offsets of what was consumed reach the store when nothing is in flight, at least twice a
    second while messages stream, and when the consumer is closed: a process that dies
    without closing (``kill -9``) has the messages of its last half second (at least the
    last 128 per queue) and those in hand delivered again, to this group.

    Errors are :class:`store.StoreError` subclasses: ``StoreNotFoundError`` and
    ``TopicNotFoundError`` (nothing to consume) when it is made, ``ClientIdInUseError``
    (another live member has ``client_id``) when it joins, ``UsageError`` (a bad argument, or
    a closed consumer used) before anything joins.
    """

    def __init__(self, topic: str, group: str, path: PathLike | None = None, *, orderly: bool = False,
                 broadcast: bool = False, start_from: StartFrom = "last",
                 tags: str | Iterable[str] | None = "*", client_id: str | None = None,
                 dedup: bool = False) -> None:
        names.validate_consumable_topic(topic)
        names.validate_group(group)
        check_consume_options(broadcast=broadcast, orderly=orderly, dedup=dedup)
        from_where, from_ts = start_position(start_from)
        self.path = resolve_store_path(path)
        root = str(self.path)
        if client_id is not None:
            cid = names.validate_client_id(client_id)
        elif broadcast:
            from store.client.options import default_broadcast_client_id
            cid = default_broadcast_client_id()   # stable: a restart resumes its offsets
        else:
            cid = default_client_id(root, group)
        self.topic, self.group, self.client_id = topic, group, cid
        self.orderly, self.broadcast = bool(orderly), bool(broadcast)
        opts = ConsumeOptions(topic=topic, group=group, orderly=self.orderly, broadcast=self.broadcast,
                              from_where=from_where, from_timestamp=from_ts, tags=tag_filter(tags),
                              client_id=cid, dedup=bool(dedup), install_signals=False,
                              client_id_given=client_id is not None)
        st = Store.open(self.path)
        try:
            st.topic(topic)   # (TopicNotFoundError now; the group is joined at the first use)
            self._rt = ConsumerRuntime(st, opts)
        except BaseException:
            st.close()
            raise
        id_key = (root, group, cid)
        with ids_lock:
            ids_in_use.add(id_key)
        self._life = life = Life(self._rt, st, id_key)
        # (a consumer dropped unclosed leaves: the finalizer holds its life, not the consumer)
        self._dropped = weakref.finalize(self, life.dropped)
        self._iteration = 0

    @property
    def runtime(self) -> ConsumerRuntime:
        """The member's runtime, joined to the group, for a driver of its own
        (:class:`store.AsyncConsumer` runs it on an event loop); this consumer then neither
        iterates nor runs, and the driver closes it (:meth:`close`): dropped, it no longer
        leaves by itself (its runtime may still be driven)."""
        self._life.join()
        self._dropped.detach()
        return self._rt

    # -- iterator style ----------------------------------------------------------------------
    def messages(self, exit_at_end: bool = False, timeout: float | None = None, *, to: str | None = None,
                 flush: str = "async") -> Iterator[Message]:
        """Iterate over the messages of the queues this member holds.

        ``exit_at_end``: stop once the queues held are drained up to where they ended when
        this call was made. ``timeout``: stop after that many seconds with nothing new.
        Without either, iterate until the consumer is closed (from another thread) or
        :meth:`stop` is called.

        Delivery is at-least-once: the message in hand is committed when the loop asks for
        the next one, or when the ``with`` block ends normally (:meth:`close` called by itself
        does not). If the loop body raises out of the ``with`` block, it is not: it is delivered again (to
        this group, after a restart or to another member). A message in hand when a new
        ``messages()`` loop starts (the last one was left by ``break`` or an exception that
        was caught) is delivered again, first.

        ``to``: an exactly-once stage (see :meth:`run`); :meth:`commit_with` gives the outputs
        of the message in hand, written with its offset when it is committed.
        """
        self._check_open()
        life = self._life
        if life.mode == "run":
            raise UsageError("this consumer runs a handler (run()); use another Consumer to iterate")
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0):
            raise UsageError(f"timeout must be a number of seconds >= 0, not {timeout!r}")
        check_flush(flush)
        rt = self._rt
        # (a close() from another thread meanwhile: before or after, whole; from a signal
        # handler in this thread: it leaves at the end of this start, see Life.starting)
        with life.lock, life.starting():
            if life.closed:
                return iter(())   # (closed since this call began: as a moment later, it ends)
            if life.sink is None:
                self._stage(to, flush)
                life.join()
                if life.closed:
                    return iter(())   # (by a signal handler since: the start leaves, see Life.starting)
                life.mode = "iterate"
                sink = life.sink = IteratorSink(PREFETCH, 1 if self.orderly else ITER_BATCH)
                sink.cache_bytes = ITER_CACHE_BYTES
                rt.set_sink(sink)
                # the iterating thread waits for a batch without a timeout: whatever ends its
                # loop wakes it (the member's loop ending, stop(), close(), a newer loop)
                rt.loop_ended = DrainedEvent(sink.wake_reader)
                rt.start()
            sink = life.sink
        if life.settle_in_hand(commit=False):
            rt.wake.set()   # (the loop collects it: the iterator's batches settled wake it not)
        drained = DrainedEvent(sink.wake_reader)

        def configure() -> None:
            rt.o.exit_at_end = exit_at_end
            if exit_at_end:
                rt.snapshot_ends()
                rt.drained = drained
        rt.call_soon(configure)
        self._iteration += 1
        self._live = self._iteration
        sink.wake_reader()   # a loop still waiting in another thread: it ends
        return self._iterate(self._iteration, exit_at_end, timeout, drained)

    def __iter__(self) -> Iterator[Message]:
        """``for msg in consumer`` is ``for msg in consumer.messages()``."""
        return self.messages()

    def _iterate(self, iteration: int, exit_at_end: bool, timeout: float | None,
                 drained: threading.Event) -> Iterator[Message]:
        rt, life, sink = self._rt, self._life, self._life.sink
        assert sink is not None
        last = time.monotonic()
        sink.fed = False
        try:
            while True:
                if self._iteration != iteration:
                    return  # a newer messages() loop took over
                life.settle_in_hand(commit=True)  # the loop asked for the next one
                if life.closed or self._stop_iter:
                    self._stop_iter = False
                    return
                if rt.fatal is not None:
                    raise rt.fatal
                if rt.loop_ended.is_set():
                    return
                if exit_at_end and drained.is_set():
                    return   # (drained: no batch is out, none waits in the sink)
                # (this thread runs the pulls that feed it, and waits only when they found nothing)
                item = sink.take(rt, None if timeout is None else max(0.0, last + timeout - time.monotonic()))
                if item is None:
                    if timeout is not None and time.monotonic() - last >= timeout:
                        return
                    continue
                fut, msgs = item
                if self._iteration != iteration or life.closed:
                    fut.set_result((None, "released"))
                    return
                # The message in hand is the last one this iterator gave (its position is read
                # off the range walked, here and by the member's loop): no bookkeeping per
                # message, a look whether this loop was stopped, closed or taken over, or its
                # batch's queue given away (``hand.cut``: see InHand.let_go). Rows build each
                # message as it is given, so the loop's last one is usually gone by then.
                hand = sink.hold(fut, msgs)
                for msg in hand.messages():
                    yield msg
                    if self._live != iteration or hand.cut:
                        break
                if hand.cut and self._iteration == iteration:
                    # its queue was given away: what the loop consumed of it is committed, the
                    # rest handed back, and the queue let go now (the member's loop, woken)
                    life.settle_in_hand(commit=True)
                    rt.wake.set()
                last = time.monotonic()
        finally:
            sink.waiting = True   # (no loop: the member's loop feeds the sink, see take)
            if not rt.stopped.is_set():
                rt.wake.set()   # what this loop settled last is collected and committed now

    _stop_iter = False
    _live = 0       # the messages() loop that may go on (-1: none; stop() or close() came)

    # -- push style ----------------------------------------------------------------------------
    def run(self, handler: Handler, *, threads: int = 4, exit_at_end: bool = False,
            max_reconsume: int | None = None, retry_delay: float | _dt.timedelta | None = None,
            to: str | None = None, flush: str = "async") -> None:
        """Hand every message to ``handler(msg)`` until stopped, with RocketMQ's retries.

        ``to``: an exactly-once pipeline stage. What ``handler`` returns (a body as bytes or
        str, a dict with ``body``, ``keys``, ``tags``, ``sharding_key``, ``properties``, a list
        of those, or None for nothing) is sent to topic ``to`` in one atomic write with the
        group's offset for ``msg``: after a crash or ``kill -9`` (and a power cut with
        ``flush="sync"``) both are there or neither, and the message is handled again only if
        neither is. A failing handler sends nothing. Outputs keep their inputs' queue order.

        ``handler`` returning means consumed; raising (any ``Exception``) means failed:

        * concurrent mode: the message goes to the group's retry topic ``%RETRY%GROUP`` and
          comes back after the next delay level (10 s, 30 s, 1 m, ... 2 h), or after
          ``retry_delay`` seconds; after ``max_reconsume`` redeliveries (default 16) it goes
          to the dead-letter topic ``%DLQ%GROUP`` instead;
        * orderly mode: the queue is suspended for ``retry_delay`` seconds (default 1) and the
          same message retried in place, before anything after it in its queue; with
          ``max_reconsume`` it goes to the dead-letter topic after that many retries
          (default: retried forever).

        ``threads``: handler calls at a time (orderly: still one per queue). With a backlog,
        a thread takes up to 1000 messages of a queue at once, as many as ``handler`` got through
        in 50 ms so far, and calls it for each in turn (each failure is still retried on its
        own); with little waiting, one at a time.
        After :meth:`stop`, a thread calls ``handler`` for no further message of its batch (the
        rest is delivered again, later), unless one of the batch already failed.
        Offsets are committed as messages finish, in queue order. ``exit_at_end``:
        return once the queues held are drained up to their end at the call. Otherwise it
        returns when :meth:`stop` or :meth:`close` is called, from another thread or from
        ``handler`` (after :meth:`close`, the member has left its group by then), and raises
        ``KeyboardInterrupt`` at Ctrl-C, after leaving. Called on a closed consumer, it raises
        UsageError.
        """
        self._check_open()
        life = self._life
        if life.mode == "iterate":
            raise UsageError("this consumer iterates (messages()); use another Consumer to run a handler")
        if not callable(handler):
            raise UsageError("handler must be callable: handler(msg)")
        from inspect import iscoroutinefunction
        if iscoroutinefunction(handler) or iscoroutinefunction(type(handler).__call__):
            # its call returns a coroutine, never run: each message would count as consumed
            raise UsageError("handler is an async function: run it with store.AsyncConsumer(...).run(handler)")
        if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= 256:
            raise UsageError(f"threads must be 1-256, not {threads!r}")
        check_flush(flush)
        rt = self._rt
        set_retries(rt, orderly=self.orderly, broadcast=self.broadcast, max_reconsume=max_reconsume,
                    retry_delay=retry_delay)
        stage: Stage | None = None
        orderly = self.orderly   # (work() holds no reference to the consumer: see Life)

        state = rt.state   # (read for every message: the attribute, not ConsumerRuntime's property)

        def work(batch: list[Any], topic: str) -> Outcome:
            # one handler call per message; a batch (concurrent mode, a backlog) only saves
            # the hand-over to a thread per message, each failure is still its own
            failed: list[tuple[int, str]] = []
            msgs = as_client_messages(batch, topic)
            n = len(msgs)
            walk = iter(range(n))   # (what it has left says where the loop is: no count kept)
            started = time.perf_counter()
            for msg in walk_batch(msgs, walk):
                if state.stop_requested and not failed:
                    # a stop starts no new handler call: the rest of the batch goes back
                    # untouched (with a failure in it, the batch is finished: an outcome
                    # names failures or a consumed prefix, not both)
                    i = n - operator.length_hint(walk) - 1
                    return (i, "stopped") if i else (None, "stopped")
                try:
                    out = handler(msg)
                    if stage is not None:
                        stage.emit(msg, out)
                except Exception as exc:  # noqa: BLE001 - a failed message, retried
                    failed.append((n - operator.length_hint(walk) - 1,
                                   f"handler raised {type(exc).__name__}: {exc}"))
            if not orderly and n:
                sink.batch = run_batch_size((time.perf_counter() - started) / n)
            return (True, "") if not failed else (failed, "")

        def in_handler() -> None:   # (each handler thread: a close() there does not wait for run())
            IN_HANDLER.life = life

        # (a close() from another thread meanwhile: before or after, whole; from a signal handler
        # in this thread, it stops the run, which returns at once: see Life.starting)
        with life.lock, life.starting(leaves=False):
            if life.closed:
                # closed since this call began (from another thread): it returns as it would
                # have a moment later, stopped by the close; a call made after it raises
                return
            stage = self._stage(to, flush)
            life.join()
            if life.closed:
                return   # (by a signal handler since: the start leaves, see Life.starting)
            # (one message a batch until a handler call was timed: see run_batch_size)
            sink = ThreadPoolSink(work, threads, 1, per_message=True, initializer=in_handler)
            sink.client_messages = True              # (see ConsumerRuntime.set_sink)
            sink.persist_every_s = PERSIST_EVERY_S
            sink.spread = threads                    # a backlog: a batch per thread at a time
            rt.set_sink(sink)
            life.mode = "run"
            rt.o.exit_at_end = exit_at_end
            if exit_at_end:
                rt.snapshot_ends()
            life.running()
        interrupted = False
        try:
            try:
                rt.serve()
            except KeyboardInterrupt:
                # (Ctrl-C: the member has left, what finished is committed; the handler calls
                # still running are not waited for, their messages are delivered again)
                interrupted = True
                raise
            finally:
                sink.shutdown(not interrupted)
        finally:
            life.ran()   # (closed meanwhile: the member leaves now)

    def _stage(self, to: str | None, flush: str) -> Stage | None:
        return None if to is None else self._rt.set_stage(to, flush)

    def commit_with(self, outputs: Any) -> None:
        """An exactly-once stage's iterator (``messages(to=…)``): ``outputs`` are what the
        message in hand produced (as :meth:`run`'s handler returns them); they are written to
        the stage's topic in one atomic write with its offset, when it is committed (the loop
        asks for the next message, or the ``with`` block ends normally). If it is not committed
        (the loop raises out of the block), neither are they: it is delivered again. Once per
        message: a second call for the same one raises UsageError (outputs are given together)."""
        (self._life.sink or InHand()).commit_with(self._rt.stage, outputs)

    # -- stopping -----------------------------------------------------------------------------
    def stop(self) -> None:
        """Make a running :meth:`run` return (the member then leaves its group), or the
        current (or else the next) :meth:`messages` loop end. Safe to call from any thread."""
        if self._life.serving:
            self._rt.stop()
        else:
            self._stop_iter = True
            self._live = -1
            if self._life.sink is not None:
                self._life.sink.wake_reader()

    def close(self) -> None:
        """Leave the group: persist offsets, release queue locks. The message in hand (the
        last one :meth:`messages` gave, its loop left by ``break`` or by an exception) is not
        committed and is delivered again: a message counts as consumed when the loop asks for
        the next one or leaves the ``with`` block normally, and a loop body that raised must not
        lose its message to a ``finally: close()`` (so a loop body that calls it ends its loop
        with its message delivered again: to count it, ``break`` and let the ``with`` block end).
        Idempotent.

        With :meth:`run` going in another thread, it also stops it and waits for it to return
        (the handler calls in flight finish and count) and leave. From one of ``run``'s handler
        calls (or a signal handler in ``run``'s thread), it stops the run and returns at once
        (waiting would wait for itself): no new handler call starts, the call's own message
        counts as consumed if it returns normally, and ``run`` returns normally once the calls
        in flight have returned and the member has left. A close that lands while ``run`` or
        ``messages`` starts makes it return (or end) at once, as if it came a moment later; so
        does one from a signal handler in the thread that starts it (a SIGTERM handler while
        ``run`` joins the group): the start is finished, then the member leaves."""
        self._close(commit=False)

    def _close(self, commit: bool) -> None:
        self._live = -1   # (a loop in another thread stops at its next message)
        self._life.close(commit)
        self._dropped.detach()

    def _check_open(self) -> None:
        if self._life.closed or self._rt.stopped.is_set():
            raise UsageError("this consumer is closed")

    def __enter__(self) -> Consumer:
        self._life.join()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._close(commit=exc_type is None)

    def __repr__(self) -> str:
        mode = "orderly" if self.orderly else "concurrently"
        return (f"Consumer(topic={self.topic!r}, group={self.group!r}, client_id={self.client_id!r}, "
                f"{'broadcast, ' if self.broadcast else ''}{mode}{', closed' if self._life.closed else ''})")
