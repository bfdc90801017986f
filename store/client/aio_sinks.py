"""The sinks of an asyncio consumer (:class:`store.AsyncConsumer`), living on the event loop
that drives its runtime (``store/client/aio_driver.py``): every method runs in the loop's
thread, so the ``concurrent.futures`` futures the runtime reads are resolved there too.

* :class:`AsyncIteratorSink` hands batches to ``async for msg in consumer.messages()``, which
  resolves each one's future as the sync iterator does (``store/client/handoff.py``).
* :class:`TaskSink` runs ``work(batch, topic)`` as a task per batch, ``concurrency`` at a time;
  :meth:`store.AsyncConsumer.run`'s work is :class:`HandlerCalls`.
"""
from __future__ import annotations

import asyncio
import collections
import concurrent.futures as cf
import contextvars
import inspect
import time
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Sequence

from store.client.consumer_args import run_batch_size
from store.client.handoff import PERSIST_EVERY_S, InHand, as_client_messages, taken
from store.client.message import Message
from store.client.sinks import Outcome

if TYPE_CHECKING:
    from store.client.options import RunState
    from store.client.stage import Stage

Batch = tuple["cf.Future[Outcome]", Sequence[Message]]


class AsyncIteratorSink(InHand):
    """The pool sink behind :meth:`store.AsyncConsumer.messages`: batches wait in a deque for
    the iterator, which is woken through an :class:`asyncio.Event`; the batch in its hand is
    :class:`~store.client.handoff.InHand`'s, as the sync iterator's."""

    client_messages = True
    cache_bytes = 0                      # what its pulls keep in memory, all queues (see Puller)
    persist_every_s = PERSIST_EVERY_S

    def __init__(self, prefetch: int, batch: int) -> None:
        self.max_in_flight = prefetch
        self.batch = batch
        self._ready: collections.deque[Batch | None] = collections.deque()   # (None: a nudge)
        self._event = asyncio.Event()

    def submit(self, batch: list[Any], topic: str) -> cf.Future[Outcome]:
        fut: cf.Future[Outcome] = cf.Future()
        self._ready.append((fut, as_client_messages(batch, topic)))
        self._event.set()
        return fut

    async def get(self, timeout: float | None) -> Batch | None:
        """The next batch, or None after ``timeout`` s or a :meth:`wake_reader`."""
        if not self._ready:
            self._event.clear()
            # asyncio.timeout, not wait_for: on 3.11 wait_for returns the inner wait's result
            # when the caller's cancel comes in the turn the event is set, and the cancel is lost
            # (a loop cancelled by its caller, or by an asyncio.timeout around it, went on).
            try:
                async with asyncio.timeout(timeout):
                    await self._event.wait()
            except TimeoutError:
                return None
        while self._ready:
            item = self._ready.popleft()
            if taken(item):   # (not one cancelled: of a queue given away)
                return item
        return None

    def wake_reader(self) -> None:
        self._ready.append(None)
        self._event.set()

    def release_all(self) -> None:
        """Hand back every batch not taken by the iterator (they are delivered again)."""
        woken = False
        while self._ready:
            item = self._ready.popleft()
            woken = woken or item is None
            if item is not None and not item[0].done():
                item[0].set_result((None, "released"))
        if woken:   # (a wake-up taken out with the batches: a reader about to wait needs it)
            self.wake_reader()

    def shutdown(self, wait: bool) -> None:
        self.release_all()


# The TaskSink whose handler call runs in this context: the call's own task and every task it
# starts (asyncio.wait_for, gather, a TaskGroup copy it), which a close must not wait for.
IN_HANDLER: contextvars.ContextVar[object] = contextvars.ContextVar("mqctl_in_handler", default=None)


class TaskSink:
    """A per-message pool sink running ``work(batch, topic)`` as an asyncio task per batch:
    at most ``concurrency`` batches (so handler calls) at a time. :meth:`drain` waits for the
    running ones (the owner calls it before the runtime's shutdown, which must not wait)."""

    client_messages = True
    persist_every_s = PERSIST_EVERY_S
    per_message = True
    cancel_on_stop = False   # a task checks for a stop before each handler call itself
    interleave = True        # a handler's: every queue held makes progress

    def __init__(self, work: Callable[[list[Any], str], Awaitable[Outcome]], concurrency: int) -> None:
        self.work = work
        self.batch = 1             # (grown by the owner once a handler call was timed)
        self.max_in_flight = concurrency
        self.spread = concurrency
        self.tasks: set[asyncio.Task[None]] = set()

    def submit(self, batch: list[Any], topic: str) -> cf.Future[Outcome]:
        fut: cf.Future[Outcome] = cf.Future()
        task = asyncio.get_running_loop().create_task(self._run(fut, batch, topic))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return fut

    async def _run(self, fut: cf.Future[Outcome], batch: list[Any], topic: str) -> None:
        # (work reports handler failures and cancellation in its outcome: what escapes it is
        # a failure of the consumer, which the runtime raises from the future)
        IN_HANDLER.set(self)   # (this task's own context)
        try:
            outcome = await self.work(batch, topic)
        except BaseException as exc:  # noqa: BLE001 - handed to the runtime through the future
            fut.set_exception(exc)
            return
        fut.set_result(outcome)

    def cancel(self) -> None:
        """Cancel the running handler calls (their messages are delivered again)."""
        for task in self.tasks:
            task.cancel()

    async def drain(self) -> None:
        """Wait until no task runs."""
        while self.tasks:
            await asyncio.gather(*self.tasks, return_exceptions=True)

    def shutdown(self, wait: bool) -> None:
        """(The tasks were drained by the owner: nothing runs.)"""


class HandlerCalls:
    """The work of :meth:`store.AsyncConsumer.run`'s :class:`TaskSink`, as
    :meth:`store.Consumer.run`'s: one ``handler(msg)`` call (awaited if it returns an
    awaitable) per message, each failure its own; a cancelled call hands back the rest of the
    batch from it (delivered again). An exactly-once ``stage`` gets what each call returned."""

    def __init__(self, handler: Callable[[Message], object], state: RunState, stage: Stage | None,
                 orderly: bool) -> None:
        self.handler, self.state, self.stage, self.orderly = handler, state, stage, orderly
        self.sink: TaskSink | None = None   # (its batch grown once a call was timed)

    async def __call__(self, batch: list[Any], topic: str) -> Outcome:
        handler, stage = self.handler, self.stage
        failed: list[tuple[int, str]] = []
        msgs = as_client_messages(batch, topic)
        n = len(msgs)
        started = time.perf_counter()
        for i in range(n):
            if self.state.stop_requested and not failed:
                return (i, "stopped") if i else (None, "stopped")
            try:
                result = handler(msgs[i])
                if inspect.isawaitable(result):
                    result = await result
                if stage is not None:
                    stage.emit(msgs[i], result)
            except asyncio.CancelledError:
                if not failed:
                    return (i, "cancelled") if i else (None, "cancelled")
                # (an outcome names failures or a consumed prefix, not both)
                failed.extend((j, "cancelled") for j in range(i, n))
                return failed, ""
            except Exception as exc:  # noqa: BLE001 - a failed message, retried
                failed.append((i, f"handler raised {type(exc).__name__}: {exc}"))
        if not self.orderly and n and self.sink is not None:
            self.sink.batch = run_batch_size((time.perf_counter() - started) / n)
        return (True, "") if not failed else (failed, "")
