"""The asyncio consumer: :class:`AsyncConsumer`, a member of a consumer group whose runtime runs
on the event loop (``store/client/aio_driver.py``): no thread of its own, waiting on the
store's change notification through the loop's readers."""
from __future__ import annotations

import asyncio
import datetime as _dt
import time
import weakref
from pathlib import Path
from types import TracebackType
from typing import Any, AsyncIterator, Awaitable, Callable, Iterable, Union

from store import names
from store.client.aio_driver import drive
from store.client.aio_life import AsyncLife
from store.client.aio_shared import off_loop
from store.client.aio_sinks import IN_HANDLER, AsyncIteratorSink, HandlerCalls, TaskSink
from store.client.consumer import ITER_BATCH, ITER_CACHE_BYTES, PREFETCH, Consumer
from store.client.consumer_args import StartFrom, set_retries, start_position, tag_filter
from store.client.handoff import DrainedEvent, InHand
from store.client.message import Message
from store.client.paths import PathLike, resolve_store_path
from store.client.rules import check_consume_options, check_flush
from store.client.runtime import ConsumerRuntime
from store.errors import UsageError

AsyncHandler = Callable[[Message], Union[Awaitable[object], object]]


class AsyncConsumer:
    """A member of a consumer group on ``topic`` for asyncio programs: :class:`store.Consumer`
    name for name, argument for argument, awaited.

    ::

        async with store.AsyncConsumer("orders", group="billing", start_from="first") as consumer:
            async for msg in consumer.messages(exit_at_end=True):
                await handle(msg)

    It is a member like any other (``mqctl consume`` processes and :class:`store.Consumer`
    share the group's queues, locks and offsets with it). Its runtime runs in the event loop:
    a turn pulls, hands out and commits; between turns it waits on the store's change
    notification (inotify registered with ``loop.add_reader``; polling where there is none),
    so a waiting consumer holds no thread and uses no CPU. A consumer belongs to the loop it
    was first used in (another loop's use is a UsageError) until that loop ends: it leaves
    its group then, and joins again if used in a new loop (``asyncio.run`` twice). It joins
    its group at its first await (entering ``async with``, the first message, :meth:`run`),
    not when it is made: opening the store (which may recover it) and joining (under the
    group's mutex) run on the loop's commit thread, as do its offset commits, so none of
    them stalls the loop; ``client_id`` is known from then on.

    * :meth:`messages` iterates, at-least-once, as :meth:`store.Consumer.messages`: a message
      counts as consumed when the loop asks for the next one, or when the ``async with``
      block is left normally; leaving it by an exception (a cancellation too) delivers the
      message in hand again. With ``to=`` it is an exactly-once stage (:meth:`commit_with`).
    * :meth:`run` awaits ``handler(msg)`` for each message, ``concurrency`` at a time, with
      the retries of :meth:`store.Consumer.run`.

    Cancelling the task that iterates or runs (``task.cancel()``, ``asyncio.timeout``) stops
    the member cleanly: what was handled is committed and persisted, queue locks are
    released, the member leaves its group and the message in hand is delivered again. A
    cancellation while it joins (entering ``async with``, starting :meth:`run`) makes it leave
    as soon as the join is done, before the cancellation reaches the task. One never closed
    leaves as a closed one does (the message in hand delivered again) when it is collected,
    when its loop ends (the runner cancels its tasks) or when the process exits. The
    arguments and errors are :class:`store.Consumer`'s (bad arguments raise when it is made;
    a missing store or topic too; a client id in use at the first await).
    """

    def __init__(self, topic: str, group: str, path: PathLike | None = None, *, orderly: bool = False,
                 broadcast: bool = False, start_from: StartFrom = "last",
                 tags: str | Iterable[str] | None = "*", client_id: str | None = None,
                 dedup: bool = False) -> None:
        # The arguments are checked here; the member itself (the store opened, which may
        # recover it, the group joined under its mutex) is made at the first await (``async
        # with``, the iteration, run) on the loop's commit thread, off the loop. It is a sync
        # Consumer's, never iterated or run: only its runtime is driven, on the event loop.
        names.validate_consumable_topic(topic)
        names.validate_group(group)
        check_consume_options(broadcast=broadcast, orderly=orderly, dedup=dedup)
        start_position(start_from)
        tag_filter(tags)
        self.path = resolve_store_path(path)
        _check_topic(self.path, topic)
        self.topic, self.group = topic, group
        self.client_id = None if client_id is None else names.validate_client_id(client_id)   # (set on joining)
        self.orderly, self.broadcast = bool(orderly), bool(broadcast)
        self._args: dict[str, Any] = dict(orderly=orderly, broadcast=broadcast, start_from=start_from, tags=tags,
                                          client_id=client_id, dedup=dedup)
        self._member: Consumer | None = None
        self._rt: ConsumerRuntime | None = None
        self._opening: asyncio.Future[Consumer] | None = None
        self._stop_run = False
        self._mode: str | None = None
        self._sink: AsyncIteratorSink | None = None   # (and the batch in hand: its ``hand``)
        self._driver: asyncio.Task[None] | None = None
        self._run_ended: asyncio.Event | None = None   # (while a run() is in flight: set when it returns)
        self._iteration = 0
        self._live = 0
        self._stop_iter = False
        self._closed = False
        self._new_life()

    def _new_life(self) -> None:
        # (dropped unclosed, it leaves all the same: the finalizer holds its life, not it)
        self._life = life = AsyncLife()
        self._dropped = weakref.finalize(self, life.dropped)

    # -- iterator style ----------------------------------------------------------------------
    def messages(self, exit_at_end: bool = False, timeout: float | None = None, *, to: str | None = None,
                 flush: str = "async") -> AsyncIterator[Message]:
        """``async for`` over the messages of the queues this member holds, as
        :meth:`store.Consumer.messages`: ``exit_at_end`` stops once the queues held are
        drained up to their end at the call, ``timeout`` after that many seconds with nothing
        new; without either it goes on until :meth:`stop` or :meth:`close`. At-least-once:
        the message in hand is committed when the loop asks for the next one. ``to``/``flush``:
        an exactly-once stage, whose outputs :meth:`commit_with` gives (checked at the first
        message). A loop body that blocks the event loop (no ``await``) holds back the
        member's commits with everything else on it: what it consumed is committed once it
        awaits."""
        self._check_open()
        if self._mode == "run":
            raise UsageError("this consumer runs a handler (run()); use another AsyncConsumer to iterate")
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0):
            raise UsageError(f"timeout must be a number of seconds >= 0, not {timeout!r}")
        check_flush(flush)
        self._mode = "iterate"
        self._settle_in_hand(commit=False)
        self._iteration += 1
        self._live = self._iteration
        return self._iterate(self._iteration, exit_at_end, timeout, to, flush)

    def __aiter__(self) -> AsyncIterator[Message]:
        """``async for msg in consumer`` is ``async for msg in consumer.messages()``."""
        return self.messages()

    async def _open(self) -> ConsumerRuntime:
        """The member, made on the first call (on the loop's commit thread: opening the store
        may recover it, joining takes the group's mutex); later calls and concurrent ones
        share it. A cancelled caller leaves the opening to finish (:meth:`close` leaves, at
        once or when the join is done: :meth:`_joined`)."""
        if self._closed:
            raise UsageError("this consumer is closed")
        self._check_loop()
        if self._rt is not None:
            return self._rt
        if self._opening is None:
            self._opening = asyncio.ensure_future(off_loop(self._join))
            self._opening.add_done_callback(self._joined)
        await asyncio.shield(self._opening)
        if self._closed or self._rt is None:
            raise UsageError("this consumer is closed")
        return self._rt

    def _join(self) -> Consumer:
        member = Consumer(self.topic, self.group, self.path, **self._args)
        member.runtime.keeper.threaded = False   # every member of the event loop in its one thread
        return member

    def _joined(self, opening: asyncio.Future[Consumer]) -> None:
        if opening.cancelled() or opening.exception() is not None:
            return
        member = opening.result()
        if self._closed:
            # closed (or its ``async with`` cancelled) while it joined: it leaves now, not
            # never. (On the loop: a member that holds no queue yet has nothing to commit.)
            member.close()
            return
        self._member = member
        self._rt, self.client_id = member.runtime, member.client_id
        self._life.joined(member, self._rt, asyncio.get_running_loop())

    def _check_loop(self) -> None:
        """A member belongs to the loop it joined in. Once that loop has ended (the member
        left then) the consumer joins again in the loop it is used in now, as a new member
        that takes up the group's offsets; while it has not, another loop may not use it."""
        life, loop = self._life, asyncio.get_running_loop()
        if life.loop is None or (life.loop is loop and not life.loop_ended):
            return
        if life.loop is not loop and not life.loop_ended and not life.loop.is_closed():
            raise UsageError("this AsyncConsumer is a member in another event loop, which has not ended: "
                             "use it in the loop it was first used in, or make one AsyncConsumer per loop")
        life.leaving = True
        life.leave()   # (its loop was closed with it open: nothing of it runs)
        self._dropped.detach()
        self._member = self._rt = self._opening = self._sink = self._driver = None
        self._new_life()

    def _ensure_driver(self, rt: ConsumerRuntime) -> asyncio.Task[None]:
        """The runtime's loop as a task of the running loop (again, after an ``exit_at_end``
        iteration ended it)."""
        task = self._driver
        if task is None or task.done():
            error = None if task is None or task.cancelled() else task.exception()
            if error is not None:
                raise error
            task = self._driver = self._life.driver = asyncio.get_running_loop().create_task(drive(rt))
            sink = self._sink
            if sink is not None:   # an iterator waiting for a batch looks why it ended
                task.add_done_callback(lambda _t: sink.wake_reader())
        return task

    async def _iterate(self, iteration: int, exit_at_end: bool, timeout: float | None, to: str | None,
                       flush: str) -> AsyncIterator[Message]:
        rt = await self._open()
        if self._iteration != iteration:
            return   # a newer messages() loop took over meanwhile
        if self._sink is None:
            if to is not None:
                rt.set_stage(to, flush)
            self._sink = AsyncIteratorSink(PREFETCH, 1 if self.orderly else ITER_BATCH)
            self._sink.cache_bytes = ITER_CACHE_BYTES   # (the sync iterator's read-ahead, the same reason)
            rt.set_sink(self._sink)
            self._life.sink = self._sink
        sink = self._sink
        drained = DrainedEvent(sink.wake_reader)
        rt.o.exit_at_end = exit_at_end
        if exit_at_end:
            rt.snapshot_ends()
        rt.drained = drained
        driver = self._ensure_driver(rt)
        last = time.monotonic()
        while True:
            if self._iteration != iteration:
                return   # a newer messages() loop took over
            self._settle_in_hand(commit=True)   # the loop asked for the next one
            if self._closed or self._stop_iter:
                self._stop_iter = False
                return
            if rt.fatal is not None:
                raise rt.fatal
            if exit_at_end and drained.is_set():
                return
            if driver.done():
                if rt.stop_requested:
                    return
                driver = self._ensure_driver(rt)   # (raises what ended it, if anything)
            wait = None if timeout is None else max(0.0, last + timeout - time.monotonic())
            item = await sink.get(wait)
            if item is None:
                if timeout is not None and time.monotonic() - last >= timeout:
                    return
                continue
            fut, msgs = item
            if self._iteration != iteration or self._closed:
                fut.set_result((None, "released"))
                return
            hand = sink.hold(fut, msgs)
            for msg in hand.messages():
                yield msg
                if self._live != iteration or hand.cut:   # (cut: its queue was given away)
                    break
            last = time.monotonic()

    def _settle_in_hand(self, commit: bool) -> None:
        """As :meth:`store.Consumer._settle_in_hand`: the message in hand consumed (``commit``)
        or handed back with the rest of its batch."""
        sink = self._sink
        hand = None if sink is None else sink.hand
        if sink is None or hand is None:
            return
        sink.hand = None
        hand.settle(commit)

    def commit_with(self, outputs: Any) -> None:
        """As :meth:`store.Consumer.commit_with`: ``outputs`` of the message in hand of
        ``messages(to=…)``, written to the stage's topic with its offset when it is committed."""
        (self._sink or InHand()).commit_with(None if self._rt is None else self._rt.stage, outputs)

    # -- push style ----------------------------------------------------------------------------
    async def run(self, handler: AsyncHandler, *, concurrency: int = 4, exit_at_end: bool = False,
                  max_reconsume: int | None = None, retry_delay: float | _dt.timedelta | None = None,
                  to: str | None = None, flush: str = "async") -> None:
        """Await ``handler(msg)`` for every message until stopped, with the retries of
        :meth:`store.Consumer.run`: returning means consumed, raising means failed
        (concurrent: to the retry topic, then the dead-letter topic after ``max_reconsume``;
        orderly: the queue suspended ``retry_delay`` s and the message retried in place).
        ``handler`` is an ``async def`` function (a plain function is called on the loop).

        ``concurrency``: handler calls at a time (orderly: still one per queue).
        ``exit_at_end``: return once the queues held are drained up to their end at the call;
        otherwise return after :meth:`stop` or :meth:`close` (or the ``async with`` block
        left), once the handler calls in flight have finished (the member leaves its group);
        a close while it joins (its first use) makes it return too, a run() called on a closed
        consumer raises UsageError. Cancelled, the running handler calls are cancelled, their messages delivered again,
        what finished is committed, and the member leaves its group.
        ``to``/``flush``: an exactly-once stage, as :meth:`store.Consumer.run`'s (what
        ``handler`` returns is sent to ``to`` in one atomic write with the offset)."""
        self._check_open()
        if self._mode == "iterate":
            raise UsageError("this consumer iterates (messages()); use another AsyncConsumer to run a handler")
        if not callable(handler):
            raise UsageError("handler must be callable: handler(msg)")
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or not 1 <= concurrency <= 4096:
            raise UsageError(f"concurrency must be 1-4096, not {concurrency!r}")
        check_flush(flush)
        self._check_loop()   # (a member of another loop: its UsageError, and that member left alone)
        self._mode = "run"
        try:
            rt = await self._open()
        except BaseException as exc:
            closed = self._closed and isinstance(exc, UsageError)
            await self._close(commit=False)   # (cancelled while joining: it leaves, as below)
            if closed:
                return   # closed while it joined (its first use): as a moment later, it returns
            raise
        if self._stop_run:
            rt.stop()   # (stopped while it joined)
        set_retries(rt, orderly=self.orderly, broadcast=self.broadcast, max_reconsume=max_reconsume,
                    retry_delay=retry_delay)
        stage = None if to is None else rt.set_stage(to, flush)
        calls = HandlerCalls(handler, rt.state, stage, self.orderly)
        sink = calls.sink = self._life.sink = TaskSink(calls, concurrency)
        rt.set_sink(sink)
        rt.o.exit_at_end = exit_at_end
        if exit_at_end:
            rt.snapshot_ends()
        self._life.serving = True
        self._run_ended = ended = asyncio.Event()
        try:
            await self._serve(rt, sink, stage)
        finally:
            self._run_ended = None
            try:
                if self._closed and self._member is not None:
                    self._member.close()   # (closed meanwhile: leave now, whoever waits for it)
            finally:
                ended.set()

    async def _serve(self, rt: ConsumerRuntime, sink: TaskSink, stage: object) -> None:
        try:
            await drive(rt)
            await sink.drain()   # (stopped: the handler calls in flight finish and count)
        except BaseException:
            # cancelled (Ctrl-C under asyncio.run, as it consumes or waits for those calls), or
            # failed: end the handler calls, commit what finished, leave
            rt.stop()
            sink.cancel()
            await sink.drain()
            rt.shutdown(wait_handlers=True)
            raise
        finally:
            self._life.serving = False
        if rt.state.halted():
            rt.shutdown(wait_handlers=True)
            if rt.fatal is not None:
                raise rt.fatal
            return
        rt.dispatcher.collect(block=False)
        if stage is None:
            await off_loop(lambda: rt.keeper.persist(force=True))   # (its fsyncs on the loop's commit thread)
        rt.keeper.persist(force=True)

    # -- stopping -----------------------------------------------------------------------------
    def stop(self) -> None:
        """Make a running :meth:`run` return (the member then leaves its group), or the
        current (or else the next) :meth:`messages` loop end."""
        if self._mode == "run":
            self._stop_run = True
            if self._rt is not None:
                self._rt.stop()
        else:
            self._stop_iter = True
            self._live = -1
            if self._sink is not None:
                self._sink.wake_reader()

    async def close(self) -> None:
        """Leave the group: persist offsets, release queue locks; the message in hand is not
        committed and is delivered again (as :meth:`store.Consumer.close`). Idempotent. With
        :meth:`run` going in another task, it also stops it and awaits its return: the handler
        calls in flight finish and count (as :meth:`store.Consumer.close` from another thread);
        the loop goes on meanwhile. From a handler call, it stops :meth:`run`, which leaves
        once that call has returned. (A handler that never returns holds the close up:
        cancel :meth:`run`'s task instead, which cancels it.)"""
        await self._close(commit=False)

    async def _close(self, commit: bool) -> None:
        if self._closed:
            await self._run_returned()   # (closed from a handler call: leaving async with waits)
            return
        self._closed = True
        self._live = -1
        self._dropped.detach()
        self._life.closing()
        self._settle_in_hand(commit=commit)
        if self._rt is None and self._opening is not None:
            await asyncio.wait({self._opening})   # (joining: leave once it has)
        rt, member = self._rt, self._member
        if rt is None or member is None:
            return   # never joined
        rt.stop()
        if self._run_ended is not None:
            # run() is in flight in another task: it returns once its handler calls in flight
            # have finished (their outcomes count, as when the sync Consumer is closed while
            # it runs, or mqctl consume gets a SIGTERM), and leaves. Waited for here, as the
            # runtime's shutdown below must find nothing out: those calls need this loop.
            await self._run_returned()
            if self._run_ended is not None:
                return   # (from one of those calls: run() leaves once it has returned)
        driver, self._driver = self._driver, None
        if driver is not None and not driver.done():
            driver.cancel()
            await asyncio.gather(driver, return_exceptions=True)
        if self._sink is not None:
            self._sink.release_all()
            rt.dispatcher.collect(block=False)
        try:
            if rt.stage is None and not rt.stopped.is_set():
                # the last commit on the loop's commit thread: the shutdown then finds
                # nothing left to write (and writes nothing)
                await off_loop(lambda: rt.keeper.persist(force=True))
        finally:
            member.close()   # (nothing is out: its shutdown waits for nothing)

    async def _run_returned(self) -> None:
        """Await the return of the :meth:`run` in flight, if any; not from one of its handler
        calls (it would wait for itself)."""
        ended, sink = self._run_ended, self._life.sink
        if ended is None or (isinstance(sink, TaskSink) and IN_HANDLER.get() is sink):
            return
        await ended.wait()

    def _check_open(self) -> None:
        if self._closed or (self._rt is not None and self._rt.stopped.is_set() and not self._life.loop_ended):
            raise UsageError("this consumer is closed")

    async def __aenter__(self) -> AsyncConsumer:
        self._check_loop()   # (a member of another loop: its UsageError, and that member left alone)
        try:
            await self._open()
        except BaseException:
            # cancelled (``asyncio.timeout``) or failed while joining: ``__aexit__`` will not
            # run, so the member leaves here (once its join is done), not at the process's end
            await self._close(commit=False)
            raise
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self._close(commit=exc_type is None)

    def __repr__(self) -> str:
        mode = "orderly" if self.orderly else "concurrently"
        return (f"AsyncConsumer(topic={self.topic!r}, group={self.group!r}, client_id={self.client_id!r}, "
                f"{'broadcast, ' if self.broadcast else ''}{mode}{', closed' if self._closed else ''})")


def _check_topic(path: Path, topic: str) -> None:
    """StoreNotFoundError / TopicNotFoundError when made, as :class:`store.Consumer` raises
    them: the store's settings and topic table read, nothing recovered (that waits for the
    first await, off the loop)."""
    from store.log.messagestore import Store
    st = Store.open(path, recover=False)
    try:
        st.topic(topic)
    finally:
        st.close()
