"""Transactions: :class:`TransactionProducer`, :class:`TxState`, :class:`TransactionSendResult`.

A thin layer over ``store/tx/transaction.py`` (half messages, commit, rollback) and
``store/tx/check.py`` (the check service), the same code ``mqctl tx`` runs.
"""
from __future__ import annotations

import datetime as _dt
import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

from store import names
from store.client.handle import StoreClient
from store.client.message import Message
from store.client.paths import PathLike, resolve_store_path
from store.client.producer import Body, body_bytes, check_route, check_route_args
from store.client.properties import build_properties
from store.client.rules import check_flush
from store.errors import UsageError

if TYPE_CHECKING:
    from store.log import record
    from store.log.messagestore import Store
    from store.tx.check import TransactionCheckReport
    from store.tx.transaction import TransactionEnd


class TxState(str, enum.Enum):
    """What a local transaction (or a check) says: RocketMQ's ``LocalTransactionState``."""

    COMMIT = "COMMIT"
    """Commit: the message becomes visible to consumers."""
    ROLLBACK = "ROLLBACK"
    """Roll back: the message is never delivered."""
    UNKNOWN = "UNKNOWN"
    """Not decided yet: the check service asks again later."""

    def __str__(self) -> str:
        return self.value


LocalTransaction = Callable[[Message], "TxState | str | None"]
Checker = Callable[[Message], "TxState | str | None"]


def _state(answer: object, tx_id: str, who: str, warn: Callable[[str], None]) -> TxState:
    """``who``'s answer (``local transaction``, ``check``) as a state: a TxState or its name
    (RocketMQ's ``COMMIT_MESSAGE``/``ROLLBACK_MESSAGE`` too); None is UNKNOWN. Anything else
    is UNKNOWN with a warning: ``True`` or ``1`` is no commit, and a typo must not pass unseen."""
    if isinstance(answer, TxState):
        return answer
    if isinstance(answer, str):
        word = answer.strip().upper()
        word = {"COMMIT_MESSAGE": "COMMIT", "ROLLBACK_MESSAGE": "ROLLBACK"}.get(word, word)
        if word in TxState.__members__:
            return TxState[word]
    if answer is not None:
        warn(f"transaction {tx_id}: the {who} answered {answer!r}, not a TxState (COMMIT, ROLLBACK or "
             f"UNKNOWN); left UNKNOWN")
    return TxState.UNKNOWN


@dataclass(frozen=True)
class TransactionSendResult:
    """What :meth:`TransactionProducer.send` did.

    ``tx_id`` is the transaction id, also the ``msg_id`` consumers will see once it is
    committed. ``state`` is what the local transaction answered (``TxState.UNKNOWN`` when
    there was none, it raised, or it answered nothing usable); ``transaction_state`` is what
    the store holds afterwards: ``PREPARED``, ``COMMITTED`` or ``ROLLED_BACK`` (the fields of
    ``mqctl tx send``'s line). ``queue_id`` is the queue the message goes to on commit."""

    tx_id: str
    state: TxState
    transaction_state: str
    topic: str
    queue_id: int
    offset_msg_id: str

    @property
    def msg_id(self) -> str:
        return self.tx_id


class TransactionProducer(StoreClient):
    """Sends transactional messages, as ``mqctl tx`` does (RocketMQ's half messages).

    ::

        def local_tx(msg: store.Message) -> store.TxState:
            return store.TxState.COMMIT if charge_card(msg.text) else store.TxState.ROLLBACK

        def check(msg: store.Message) -> store.TxState:      # asked about unresolved ones
            return store.TxState.COMMIT if was_charged(msg.keys[0]) else store.TxState.UNKNOWN

        with store.TransactionProducer(check=check) as tp:
            r = tp.send("payments", b"...", local_tx=local_tx, keys=["order-7"])
            tp.check_pending()          # one pass of the check service

    :meth:`send` stores a half message (invisible to consumers), runs ``local_tx`` and
    commits or rolls back on its answer; an exception in ``local_tx`` leaves the transaction
    UNKNOWN, for the check service. :meth:`commit` and :meth:`rollback` resolve a transaction
    by id (exactly once: the other resolution raises ``TransactionStateError``).
    :meth:`check_pending` asks ``check`` about every unresolved transaction older than its
    ``timeout`` and resolves it on the answer; passes of several processes (and of
    ``mqctl tx check``) run one at a time.

    ``path=None`` selects ``$MQCTL_STORE``, else ``~/.mqctl/store``. The first :meth:`send`
    creates a missing store; :meth:`commit`, :meth:`rollback`, :meth:`check_pending` and
    :meth:`pending` of a missing one raise ``StoreNotFoundError`` and create nothing.
    ``flush="sync"`` fsyncs every record before a call returns.
    """

    _what = "this transaction producer"

    def __init__(self, path: PathLike | None = None, *, check: Checker | None = None,
                 flush: str = "async") -> None:
        check_flush(flush)
        if check is not None and not callable(check):
            raise UsageError("check must be callable: check(msg) -> TxState")
        import threading

        from store.errors import StoreNotFoundError
        from store.log.messagestore import Store
        self.path = resolve_store_path(path)
        self.check = check
        self.sync = flush == "sync"
        self._closed = False
        self._opening = threading.Lock()
        try:
            self._store: Store | None = Store.open(self.path)
        except StoreNotFoundError:
            self._store = None   # made by the first send; nothing else creates it

    def _open_store(self, create: bool = False) -> Store:
        """The store, opened now if it was missing when this was made: created only for a
        ``send`` (``create``), else ``StoreNotFoundError``."""
        if self._store is None:
            from store.log.messagestore import Store
            with self._opening:
                if self._closed:
                    raise UsageError(f"{self._what} is closed")
                if self._store is None:
                    self._store = Store.open(self.path, create=create)
        return self._store

    def close(self) -> None:
        """Release the store handle (idempotent). Every result returned before stays valid."""
        with self._opening:
            self._closed = True
            super().close()

    def send(self, topic: str, body: Body, *, local_tx: LocalTransaction | None = None,
             tags: str | None = None, keys: str | Sequence[str] | None = None,
             sharding_key: str | None = None, queue: int | None = None,
             properties: Mapping[str, str] | None = None) -> TransactionSendResult:
        """Store a half message for ``topic``, then run ``local_tx(msg)`` and commit or roll
        back on its answer (``TxState``; ``None`` or anything else is UNKNOWN). Without
        ``local_tx`` the transaction stays PREPARED until :meth:`commit`, :meth:`rollback`
        or a check resolves it. The other arguments are those of :meth:`Producer.send`."""
        from store.tx.transaction import end_transaction, send_half
        names.validate_topic(topic)
        store = self._open_store(create=True)
        check_route_args(sharding_key, queue)
        check_route(store, topic, queue, sharding_key)
        if local_tx is not None and not callable(local_tx):
            raise UsageError("local_tx must be callable: local_tx(msg) -> TxState")
        props = build_properties(tags=tags, keys=keys, properties=properties, sharding_key=sharding_key)
        res = send_half(store, topic, body_bytes(body), props, queue_id=-1 if queue is None else queue,
                        sharding_key=sharding_key, sync=self.sync)
        state, stored = TxState.UNKNOWN, "PREPARED"
        if local_tx is not None:
            try:
                state = _state(local_tx(self._view(res.half, res.tx_id)), res.tx_id, "local transaction", store.warn)
            except Exception as exc:  # noqa: BLE001 - RocketMQ: the check service decides
                store.warn(f"transaction {res.tx_id}: local transaction raised {type(exc).__name__}: {exc}; "
                           f"left UNKNOWN for the check service")
                state = TxState.UNKNOWN
            if state is not TxState.UNKNOWN:
                stored = end_transaction(store, res.tx_id, state is TxState.COMMIT, sync=self.sync).state
        return TransactionSendResult(res.tx_id, state, stored, res.topic, res.queue_id, res.offset_msg_id)

    def commit(self, tx_id: str) -> TransactionEnd:
        """Commit ``tx_id`` (or the offset id of one of its records): the message becomes
        visible. A no-op if it is committed already; ``TransactionStateError`` if it was
        rolled back, ``TransactionNotFoundError`` for an unknown id."""
        return self._end(tx_id, True)

    def rollback(self, tx_id: str) -> TransactionEnd:
        """Roll back ``tx_id``: the message is never delivered. A no-op if it is rolled back
        already; ``TransactionStateError`` if it was committed."""
        return self._end(tx_id, False)

    def _end(self, tx_id: str, commit: bool) -> TransactionEnd:
        from store.tx.transaction import end_transaction, resolve_tx_id
        store = self._open_store()
        return end_transaction(store, resolve_tx_id(store, tx_id), commit, sync=self.sync)

    def check_pending(self, timeout: float | _dt.timedelta = 6, max_checks: int = 15) -> TransactionCheckReport:
        """One pass of the check service: ask ``check`` about every unresolved transaction
        whose half message is older than ``timeout`` seconds, and commit or roll back on its
        answer (UNKNOWN, or an exception, asks again in a later pass; after ``max_checks``
        checks a transaction is parked in ``TRANS_CHECK_MAX_TIME_TOPIC``). Returns the pass's
        report (``events``: one per transaction looked at)."""
        from store.tx.check import check_pass
        if self.check is None:
            raise UsageError("check_pending needs a check function: TransactionProducer(check=...)")
        if isinstance(timeout, _dt.timedelta):
            timeout = timeout.total_seconds()
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0:
            raise UsageError(f"timeout must be a number of seconds >= 0, not {timeout!r}")
        if isinstance(max_checks, bool) or not isinstance(max_checks, int) or max_checks < 1:
            raise UsageError(f"max_checks must be an int >= 1, not {max_checks!r}")
        check, store = self.check, self._open_store()

        def ask(copy: record.StoredMessage, times: int) -> str:
            try:
                return _state(check(self._view(copy, copy.uniq_key or "")), copy.uniq_key or "", "check",
                              store.warn).value
            except Exception as exc:  # noqa: BLE001 - UNKNOWN: asked again later
                store.warn(f"transaction {copy.uniq_key}: check raised {type(exc).__name__}: {exc}")
                return TxState.UNKNOWN.value
        return check_pass(store, ask, timeout_ms=int(timeout * 1000), max_checks=max_checks)

    def pending(self) -> list[str]:
        """The ids of the unresolved (PREPARED) transactions, oldest first."""
        from store.tx.check import pending
        return [p.tx_id for p in pending(self._open_store())]

    @staticmethod
    def _view(half: record.StoredMessage, tx_id: str) -> Message:
        """A half message as the local transaction and the checker see it: the real topic
        and queue, ``msg_id`` = the transaction id."""
        from store.log.record import PROP_REAL_QID, PROP_REAL_TOPIC
        m = Message.from_record(half, half.properties.get(PROP_REAL_TOPIC, half.topic))
        try:
            qid = int(half.properties.get(PROP_REAL_QID, ""))
        except ValueError:
            qid = m.queue_id
        from dataclasses import replace
        return replace(m, queue_id=qid, msg_id=tx_id or m.msg_id)

