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
import datetime as _dt
import inspect
from types import TracebackType
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from store.client.aio_producer import Worker
from store.client.message import Message
from store.client.paths import PathLike
from store.client.producer import Body
from store.errors import UsageError
from store.tx.producer import TransactionProducer, TransactionSendResult

if TYPE_CHECKING:
    from store.tx.check import CheckReport
    from store.tx.transaction import EndResult

AsyncAnswer = Callable[[Message], Any]   # -> TxState (or str, None), or an awaitable of one


def _on_loop(fn: AsyncAnswer, loop: asyncio.AbstractEventLoop) -> Callable[[Message], Any]:
    """``fn`` for the worker thread: an awaitable it returns is awaited on ``loop``."""
    def call(msg: Message) -> Any:
        answer = fn(msg)
        if inspect.isawaitable(answer):
            async def wait() -> Any:
                return await answer
            return asyncio.run_coroutine_threadsafe(wait(), loop).result()
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
    transaction UNKNOWN, as with the sync producer.
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
        local = None if local_tx is None else _on_loop(local_tx, asyncio.get_running_loop())
        result: TransactionSendResult = await self._call(
            lambda tp: tp.send(topic, body, local_tx=local, tags=tags, keys=keys, sharding_key=sharding_key,
                               queue=queue, properties=properties))
        return result

    async def commit(self, tx_id: str) -> EndResult:
        """Commit ``tx_id`` (see :meth:`store.TransactionProducer.commit`)."""
        result: EndResult = await self._call(lambda tp: tp.commit(tx_id))
        return result

    async def rollback(self, tx_id: str) -> EndResult:
        """Roll back ``tx_id`` (see :meth:`store.TransactionProducer.rollback`)."""
        result: EndResult = await self._call(lambda tp: tp.rollback(tx_id))
        return result

    async def check_pending(self, timeout: float | _dt.timedelta = 6, max_checks: int = 15) -> CheckReport:
        """One pass of the check service, ``check`` awaited for each transaction (see
        :meth:`store.TransactionProducer.check_pending`)."""
        if self.check is None:
            raise UsageError("check_pending needs a check function: AsyncTransactionProducer(check=...)")
        check = _on_loop(self.check, asyncio.get_running_loop())

        def one_pass(tp: TransactionProducer) -> CheckReport:
            tp.check = check
            return tp.check_pending(timeout, max_checks)
        report: CheckReport = await self._call(one_pass)
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

    async def __aenter__(self) -> "AsyncTransactionProducer":
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"AsyncTransactionProducer(path={str(self.path)!r}{', closed' if self._closed else ''})"
