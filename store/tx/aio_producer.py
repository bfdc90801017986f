"""The asyncio transaction producer: :class:`AsyncTransactionProducer`, a
:class:`store.TransactionProducer` whose store work runs in a worker thread of its own
(``store/client/aio_producer.py``'s :class:`~store.client.aio_producer.Worker`) and whose
``local_tx`` and ``check`` may be ``async def`` functions, awaited on the event loop.

The sync producer runs in the worker; an async ``local_tx`` (or ``check``) called there only
makes a coroutine, which the worker hands to the loop (``asyncio.run_coroutine_threadsafe``)
and waits for: the loop is never blocked, and the steps (half message, local transaction,
commit or rollback) are those of ``mqctl tx``.
"""
from __future__ import annotations

import asyncio
import concurrent.futures as cf
import datetime as _dt
import inspect
import threading
from types import TracebackType
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from store.client.aio_producer import Worker
from store.client.message import Message
from store.client.paths import PathLike
from store.client.producer import Body
from store.errors import UsageError
from store.tx.producer import TransactionProducer, TransactionSendResult

if TYPE_CHECKING:
    from store.tx.check import TransactionCheckReport
    from store.tx.transaction import TransactionEnd

AsyncAnswer = Callable[[Message], Any]   # -> TxState (or str, None), or an awaitable of one


class _Awaited:
    """The caller's side of one ``local_tx`` run: the caller gave up (its ``send`` cancelled,
    or timed out) and the awaitable's run on the loop, to cancel with it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.given_up = False
        self.running: cf.Future[Any] | None = None

    def give_up(self) -> None:
        with self.lock:
            self.given_up = True
            if self.running is not None:
                self.running.cancel()


def _on_loop(fn: AsyncAnswer, loop: asyncio.AbstractEventLoop,
             awaited: _Awaited | None = None) -> Callable[[Message], Any]:
    """``fn`` for the worker thread: an awaitable it returns is awaited on ``loop``; with
    ``awaited``, not once its caller gave up (cancelled with it: the transaction stays UNKNOWN,
    for the check service, as after any exception of ``fn``)."""
    def call(msg: Message) -> Any:
        if awaited is not None and awaited.given_up:
            raise cf.CancelledError("the caller of send() was cancelled before its local transaction ran")
        answer = fn(msg)
        if inspect.isawaitable(answer):
            async def wait() -> Any:
                return await answer
            fut = asyncio.run_coroutine_threadsafe(wait(), loop)
            if awaited is not None:
                with awaited.lock:
                    awaited.running = fut
                    if awaited.given_up:
                        fut.cancel()
            try:
                return fut.result()
            except cf.CancelledError:
                raise cf.CancelledError("the caller of send() was cancelled while its local transaction "
                                        "ran") from None
        return answer
    return call


class AsyncTransactionProducer:
    """Transactional messages from asyncio code: :class:`store.TransactionProducer` name for
    name, argument for argument, awaited::

        async def local_tx(msg: store.Message) -> store.TxState:
            return store.TxState.COMMIT if await charge_card(msg.text) else store.TxState.ROLLBACK

        async with store.AsyncTransactionProducer(check=check) as tp:
            r = await tp.send("payments", b"...", local_tx=local_tx, keys=["order-7"])

    ``local_tx`` and ``check`` may be ``async def`` (awaited on the loop) or plain functions
    (called in the producer's worker thread, off the loop). Exceptions in them leave the
    transaction UNKNOWN, as with the sync producer. A ``send`` cancelled (or timed out) while
    queued stores nothing; one cancelled while its async ``local_tx`` runs cancels it, and the
    transaction stays UNKNOWN, for the check service.
    """

    def __init__(self, path: PathLike | None = None, *, check: AsyncAnswer | None = None,
                 flush: str = "async") -> None:
        if check is not None and not callable(check):
            raise UsageError("check must be callable: check(msg) -> TxState")
        self._tp = TransactionProducer(path, flush=flush)
        self.path, self.check = self._tp.path, check
        self._worker: Worker[TransactionProducer] | None = None
        self._closed = False

    async def _call(self, call: Callable[[TransactionProducer], Any]) -> Any:
        if self._closed:
            raise UsageError("this transaction producer is closed")
        if self._worker is None:
            self._worker = Worker(self._tp, name="mq-tx-producer")
        return await self._worker.call(call)

    async def send(self, topic: str, body: Body, *, local_tx: AsyncAnswer | None = None,
                   tags: str | None = None, keys: str | Sequence[str] | None = None,
                   sharding_key: str | None = None, queue: int | None = None,
                   properties: Mapping[str, str] | None = None) -> TransactionSendResult:
        """Store a half message, await ``local_tx(msg)`` and commit or roll back on its answer
        (see :meth:`store.TransactionProducer.send`)."""
        if local_tx is not None and not callable(local_tx):
            raise UsageError("local_tx must be callable: local_tx(msg) -> TxState")
        awaited = _Awaited()
        local = None if local_tx is None else _on_loop(local_tx, asyncio.get_running_loop(), awaited)
        def send(tp: TransactionProducer) -> TransactionSendResult:
            if awaited.given_up:   # (cancelled while queued for the worker: nothing is stored)
                raise cf.CancelledError("the caller of send() was cancelled before it was sent")
            return tp.send(topic, body, local_tx=local, tags=tags, keys=keys, sharding_key=sharding_key,
                           queue=queue, properties=properties)
        try:
            result: TransactionSendResult = await self._call(send)
        except asyncio.CancelledError:
            # A caller that gave up (cancelled, timed out) gives up its send: one still queued for
            # the worker stores nothing, an async local transaction is cancelled (one not started
            # never runs) and the transaction stays UNKNOWN for the check service. It went on and
            # committed, and a caller retrying after a timeout sent the message twice. (A plain
            # function already running in the worker thread cannot be stopped: it finishes and its
            # answer counts, as does an answer already being written.)
            awaited.give_up()
            raise
        return result

    async def commit(self, tx_id: str) -> TransactionEnd:
        """Commit ``tx_id`` (see :meth:`store.TransactionProducer.commit`)."""
        result: TransactionEnd = await self._call(lambda tp: tp.commit(tx_id))
        return result

    async def rollback(self, tx_id: str) -> TransactionEnd:
        """Roll back ``tx_id`` (see :meth:`store.TransactionProducer.rollback`)."""
        result: TransactionEnd = await self._call(lambda tp: tp.rollback(tx_id))
        return result

    async def check_pending(self, timeout: float | _dt.timedelta = 6, max_checks: int = 15) -> TransactionCheckReport:
        """One pass of the check service, ``check`` awaited for each transaction (see
        :meth:`store.TransactionProducer.check_pending`)."""
        if self.check is None:
            raise UsageError("check_pending needs a check function: AsyncTransactionProducer(check=...)")
        check = _on_loop(self.check, asyncio.get_running_loop())

        def one_pass(tp: TransactionProducer) -> TransactionCheckReport:
            tp.check = check
            return tp.check_pending(timeout, max_checks)
        report: TransactionCheckReport = await self._call(one_pass)
        return report

    async def pending(self) -> list[str]:
        """The ids of the unresolved transactions, oldest first."""
        ids: list[str] = await self._call(lambda tp: tp.pending())
        return ids

    async def close(self) -> None:
        """Wait for the calls under way, end the worker, release the store. Idempotent."""
        if self._closed:
            return
        worker = self._worker
        try:
            if worker is not None:
                await self._call(lambda tp: None)
        finally:
            self._closed, self._worker = True, None
            if worker is not None:
                worker.stop()
            self._tp.close()

    async def __aenter__(self) -> AsyncTransactionProducer:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"AsyncTransactionProducer(path={str(self.path)!r}{', closed' if self._closed else ''})"
