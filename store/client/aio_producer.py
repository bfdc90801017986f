"""The asyncio producer: :class:`AsyncProducer`, a :class:`store.Producer` whose writes (and
fsyncs) run off the event loop, in one worker thread of the producer.

The worker takes sends from a queue in order and hands each result back to the loop
(``loop.call_soon_threadsafe``). With ``flush="sync"`` it writes with group commit
(``store/client/groupcommit.py``): a send written while an fsync runs is covered by the next
one, and the worker settles (waits for the fsyncs, then answers every send they covered) only
when no send waits to be written, so many tasks sending at once share fsyncs, as concurrent
``mqctl send --flush sync`` batches do.
"""
from __future__ import annotations

import asyncio
import queue
import threading
from types import TracebackType
from typing import TYPE_CHECKING, Any, Callable, Generic, Iterable, Mapping, Sequence, TypeVar

from store.client.paths import PathLike
from store.client.producer import Body, Delay, Producer, body_list

if TYPE_CHECKING:
    from store.client.sendresult import SendResult

_T = TypeVar("_T")
_Job = tuple[Callable[[Any], Any], asyncio.AbstractEventLoop, "asyncio.Future[Any]"]
_MAX_UNSETTLED = 64   # sends written but not yet answered, at most, before the worker settles


def _answer(fut: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if fut.cancelled():
        return
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result(result)


class Worker(Generic[_T]):
    """A thread that runs calls on ``target`` one at a time, in order, for an event loop:
    :meth:`call` awaits one. ``settle(target)``, when given, runs once no call waits (and
    after at most ``_MAX_UNSETTLED`` calls): the calls' answers wait for it (a producer's
    fsyncs), and its error fails all of them."""

    def __init__(self, target: _T, settle: Callable[[_T], None] | None = None, name: str = "mq-producer") -> None:
        self.target = target
        self._settle_fn = settle
        self.jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    async def call(self, call: Callable[[_T], Any]) -> Any:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        self.jobs.put((call, loop, fut))
        return await fut

    def stop(self) -> None:
        """End the thread once every call put is answered."""
        self.jobs.put(None)
        self.thread.join()

    def _run(self) -> None:
        unsettled: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[Any], Any]] = []
        while True:
            job = self.jobs.get()
            if job is None:
                self._settle(unsettled)
                return
            call, loop, fut = job
            try:
                result = call(self.target)
            except BaseException as exc:  # noqa: BLE001 - raised to the awaiting task
                self._settle(unsettled)
                loop.call_soon_threadsafe(_answer, fut, None, exc)
                continue
            unsettled.append((loop, fut, result))
            if self._settle_fn is None or self.jobs.empty() or len(unsettled) >= _MAX_UNSETTLED:
                self._settle(unsettled)

    def _settle(self, unsettled: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[Any], Any]]) -> None:
        """Answer every call made so far (once ``settle`` made it as durable as promised)."""
        if not unsettled:
            return
        error: BaseException | None = None
        if self._settle_fn is not None:
            try:
                self._settle_fn(self.target)
            except BaseException as exc:  # noqa: BLE001 - a failed fsync fails every send it covered
                error = exc
        for loop, fut, result in unsettled:
            loop.call_soon_threadsafe(_answer, fut, result, error)
        unsettled.clear()


class AsyncProducer:
    """Sends messages to a store from asyncio code: :class:`store.Producer` name for name,
    argument for argument, awaited::

        async with store.AsyncProducer(flush="sync") as producer:
            r = await producer.send("orders", b"payload", tags="paid", keys=["order-7"])

    No write blocks the event loop: the writes and fsyncs run in a thread of the producer.
    ``flush="sync"``: a send returns once an fsync covers it; sends awaited at the same time
    (from many tasks) share fsyncs (group commit). Sends are written in the order they were
    awaited. A send whose task is cancelled while it waits may still be stored (as a send
    interrupted by a crash): its result is dropped.
    """

    def __init__(self, path: PathLike | None = None, *, flush: str = "async",
                 group_commit: bool | None = None) -> None:
        """``group_commit`` as :class:`store.Producer`'s (it applies to ``flush="sync"`` only):
        by default on with ``flush="sync"``, so that sends awaited together share fsyncs;
        ``False`` gives each send an fsync of its own before it returns."""
        sync = flush == "sync"
        self._producer = Producer(path, flush=flush, group_commit=sync if group_commit is None else group_commit)
        self.path, self.flush = self._producer.path, flush
        self.group_commit: bool = self._producer.group_commit
        self._worker: Worker[Producer] | None = None
        self._closed = False

    async def _call(self, call: Callable[[Producer], Any]) -> Any:
        if self._closed:
            from store.errors import UsageError
            raise UsageError("this producer is closed")
        if self._worker is None:
            self._worker = Worker(self._producer, Producer.settle)
        return await self._worker.call(call)

    async def send(self, topic: str, body: Body, tags: str | None = None,
                   keys: str | Sequence[str] | None = None, sharding_key: str | None = None,
                   queue: int | None = None, properties: Mapping[str, str] | None = None,
                   delay: Delay | None = None, msg_id: str | None = None) -> SendResult:
        """Send one message; a :class:`store.SendResult` (see :meth:`store.Producer.send`)."""
        results = await self.send_many(topic, [body], tags=tags, keys=keys, sharding_key=sharding_key,
                                       queue=queue, properties=properties, delay=delay,
                                       msg_ids=None if msg_id is None else [msg_id])
        return results[0]

    async def send_many(self, topic: str, bodies: Iterable[Body], tags: str | None = None,
                        keys: str | Sequence[str] | None = None, sharding_key: str | None = None,
                        queue: int | None = None, properties: Mapping[str, str] | None = None,
                        delay: Delay | None = None,
                        msg_ids: Sequence[str | None] | None = None) -> list[SendResult]:
        """Send several messages as one batch (one write, all or nothing); one
        :class:`store.SendResult` per body (see :meth:`store.Producer.send_many`)."""
        data = body_list(bodies)   # (an iterator is read here, on the caller's side)
        ids = None if msg_ids is None else list(msg_ids)
        results: list[SendResult] = await self._call(
            lambda p: p.send_many(topic, data, tags=tags, keys=keys, sharding_key=sharding_key, queue=queue,
                                  properties=properties, delay=delay, msg_ids=ids))
        return results

    async def close(self) -> None:
        """Answer every send (durable as ``flush`` promises), end the worker, release the
        store. Idempotent."""
        if self._closed:
            return
        worker = self._worker
        try:
            if worker is not None:
                await self._call(lambda p: None)   # every send before it answered
        finally:
            self._closed, self._worker = True, None
            if worker is not None:
                worker.stop()   # (at once: nothing is left to write)
            self._producer.close()

    async def __aenter__(self) -> AsyncProducer:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    def __repr__(self) -> str:
        commit = "" if self.group_commit == (self.flush == "sync") else f", group_commit={self.group_commit!r}"
        closed = ", closed" if self._closed else ""
        return f"AsyncProducer(path={str(self.path)!r}, flush={self.flush!r}{commit}{closed})"
