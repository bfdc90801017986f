"""Transactional messages: half messages, the op log and end-transaction.

RocketMQ's design (reference §8) on a store without a broker: every step is a write under the
store's write lock by whichever ``mqctl`` process does it. The check service, which resolves
what nobody committed or rolled back, and its progress file are in ``txcheck.py``.

Records
-------
Half message: ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0, sysflag NOT, so it is dispatched to the half
topic's consume queue and to no queue of the real topic (its consumers never see it)::

    body, TAGS, KEYS, user properties     as the producer gave them
    UNIQ_KEY = __transactionId__ = txId   32 hex digits (UniqKeyGenerator), fixed before the write
    REAL_TOPIC, REAL_QID                  the queue chosen at send time (sharding key, explicit
                                          queue or round robin: Store.select_queue)
    TRAN_MSG = true
    TRANSACTION_CHECK_TIMES = n           only on copies re-appended by the check service

Op record: ``RMQ_SYS_TRANS_OP_HALF_TOPIC`` queue 0, tag ``d``, body = the half-queue offsets it
finishes in ASCII decimal, each followed by a comma (``b"17,21,"``), and::

    __transactionId__ = KEYS = txId       KEYS puts it in the key index (op topic # txId)
    TRAN_OP = COMMIT | ROLLBACK | CHECK | DISCARD
                                          why those offsets are finished: resolved, superseded
                                          by a re-appended copy, or parked after too many checks

Committed message: topic REAL_TOPIC, queue REAL_QID, sysflag COMMIT, PREPARED TX OFFSET = the
commit-log offset of the half copy it was made from; body, flag, born timestamp and every
property of that copy except REAL_TOPIC, REAL_QID and TRAN_MSG (so UNIQ_KEY = txId, TAGS, KEYS).

Discarded copy: ``TRANS_CHECK_MAX_TIME_TOPIC`` queue 0, the half copy as it was when its checks
ran out (for manual handling: ``tx commit`` / ``tx rollback`` still resolve it).

State and exactly-once resolution
---------------------------------
Every record of a transaction carries txId as UNIQ_KEY or in KEYS, so :func:`load` finds them
all through the key index. The state is COMMITTED when a committed message or a COMMIT op exists,
else ROLLED_BACK when a ROLLBACK op exists, else DISCARDED when a discarded copy or a DISCARD op
exists, else PREPARED. A half copy is *live* while no op names its queue offset.

Whatever writes (commit, rollback, a check's re-append, a discard) holds the write lock from
reading the state to its last write, after recovering any tail a killed writer left
(``Store.ensure_recovered``), so two processes never both decide to commit. Each step writes
its main record first and its op record second, with a failpoint between (``failpoints.py``);
a crash there leaves the main record, which already determines the state:

* commit killed after the committed message: the state is COMMITTED; a repeated ``tx commit``,
  or the check service meeting the live copy, only writes the missing COMMIT op.
* check killed after the re-appended copy: two live copies; the next check of either appends
  one new copy and marks *all* live copies finished with one CHECK op (it costs one count).
* discard killed after the parked copy: the state is DISCARDED; the op is written next time.

Failpoints placed here: ``tx-send-after-half``, ``tx-commit-after-real``, ``tx-commit-after-op``,
``tx-rollback-after-op`` (the check service's are listed in ``txcheck.py``).

Differences from RocketMQ: one op record per resolution (4.x), not 5.x's batches; an
end-transaction past a custom immunity is not refused; the state is found by txId through the
key index rather than by the half message's offsets, which is what makes a repeated or crashed
resolution safe. With ``--flush async`` a machine crash can lose a committed message whose op
survived (it is never written twice); ``--flush sync`` orders them on disk.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from store.errors import NotFoundError, TransactionNotFoundError, TransactionStateError, UsageError
from store.failpoints import failpoint
from store.log import format as F
from store.log.reads import id_as_stored
from store.log.record import (
    PROP_CHECK_TIMES,
    PROP_KEYS,
    PROP_REAL_QID,
    PROP_REAL_TOPIC,
    PROP_TAGS,
    PROP_TRAN_MSG,
    PROP_TRANSACTION_ID,
    PROP_UNIQ_KEY,
    Draft,
    Message,
    UniqKeyGenerator,
    decode_offset_msg_id,
)
from store.names import CHECK_MAX_TOPIC, HALF_TOPIC, OP_HALF_TOPIC

if TYPE_CHECKING:
    from store.log.messagestore import Store

OP_TAG = "d"
PROP_TX_OP = "TRAN_OP"

PREPARED, COMMITTED, ROLLED_BACK, DISCARDED = "PREPARED", "COMMITTED", "ROLLED_BACK", "DISCARDED"
OP_COMMIT, OP_ROLLBACK, OP_CHECK, OP_DISCARD = "COMMIT", "ROLLBACK", "CHECK", "DISCARD"
OP_OF_STATE = {COMMITTED: OP_COMMIT, ROLLED_BACK: OP_ROLLBACK, DISCARDED: OP_DISCARD}

_FIND_LIMIT = 4096           # records per txId read through the index (copies, ops, retries)
_STRIPPED_ON_COMMIT = frozenset({PROP_REAL_TOPIC, PROP_REAL_QID, PROP_TRAN_MSG})

_uniq: UniqKeyGenerator | None = None


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def new_tx_id() -> str:
    """A fresh transaction id: the UNIQ_KEY its half message will carry."""
    global _uniq
    if _uniq is None:
        _uniq = UniqKeyGenerator()
    return _uniq.next(now_ms())


# -- one transaction's records ------------------------------------------------------------------

@dataclass(frozen=True)
class Op:
    """One op record of a transaction: why which half-queue offsets are finished."""

    kind: str
    offsets: tuple[int, ...]


@dataclass
class TxView:
    """Everything the store holds about one transaction (see the module docstring)."""

    tx_id: str
    halves: list[Message]              # half copies, oldest first
    real: Message | None = None        # the committed message
    discarded: Message | None = None   # the copy parked in TRANS_CHECK_MAX_TIME_TOPIC
    ops: list[Op] = field(default_factory=list)

    @property
    def state(self) -> str:
        kinds = {op.kind for op in self.ops}
        if self.real is not None or OP_COMMIT in kinds:
            return COMMITTED
        if OP_ROLLBACK in kinds:
            return ROLLED_BACK
        if self.discarded is not None or OP_DISCARD in kinds:
            return DISCARDED
        return PREPARED

    @property
    def latest(self) -> Message:
        return self.halves[-1]

    @property
    def topic(self) -> str:
        return self.latest.properties.get(PROP_REAL_TOPIC, "")

    @property
    def check_times(self) -> int:
        # (each check wrote one CHECK op after its copy: a count its damaged copy took with it)
        return max(max(int_or(h.properties.get(PROP_CHECK_TIMES), 0) for h in self.halves),
                   sum(op.kind == OP_CHECK for op in self.ops))

    def finished_offsets(self) -> set[int]:
        return {o for op in self.ops for o in op.offsets}

    def live(self) -> list[Message]:
        done = self.finished_offsets()
        return [h for h in self.halves if h.queue_offset not in done]

    def has_op(self, kind: str) -> bool:
        return any(op.kind == kind for op in self.ops)

    def to_json(self) -> dict[str, Any]:
        return {"txId": self.tx_id, "state": self.state, "topic": self.topic,
                "checkTimes": self.check_times, "halfOffsetMsgIds": [h.msg_id for h in self.halves],
                "commitOffsetMsgId": self.real.msg_id if self.real is not None else None}


def int_or(text: str | None, default: int) -> int:
    """``int(text)``, or ``default`` when ``text`` is None or not a number."""
    try:
        return int(text) if text is not None else default
    except ValueError:
        return default


def _is_half(m: Message) -> bool:
    return m.topic == HALF_TOPIC and m.properties.get(PROP_TRAN_MSG) == "true"


def _is_committed(m: Message) -> bool:
    return (m.sysflag & F.TX_MASK) == F.TX_COMMIT


def parse_op_body(body: bytes) -> tuple[int, ...]:
    """``b"17,21,"`` -> ``(17, 21)``; anything that is not a decimal offset is ignored."""
    return tuple(int(p) for p in body.split(b",") if p.strip().isdigit())


def load(store: Store, tx_id: str) -> TxView:
    """The transaction ``tx_id`` as the store holds it; TransactionNotFoundError (exit 3) when no
    half message carries that id."""
    tx_id = id_as_stored(tx_id)
    found = store.find_all(tx_id, limit=_FIND_LIMIT) if tx_id else []
    halves = [m for m in found if _is_half(m)]
    if not halves:
        raise TransactionNotFoundError(f"no transaction with id {tx_id!r}")
    view = TxView(tx_id, halves)
    copies = {h.commitlog_offset for h in halves}
    for m in found:
        if m.topic == view.topic and _is_committed(m) and m.prepared_tx_offset in copies:
            view.real = m
        elif m.topic == CHECK_MAX_TOPIC:
            view.discarded = m
    for m in store.query_key(OP_HALF_TOPIC, tx_id, limit=_FIND_LIMIT):
        if m.properties.get(PROP_TRANSACTION_ID) == tx_id:
            view.ops.append(Op(m.properties.get(PROP_TX_OP, OP_CHECK), parse_op_body(m.body)))
    return view


def tx_id_of(m: Message) -> str | None:
    """The transaction a stored record belongs to, or None for an ordinary message."""
    if _is_half(m) or m.topic == CHECK_MAX_TOPIC or _is_committed(m):
        return m.uniq_key
    if m.topic == OP_HALF_TOPIC:
        return m.properties.get(PROP_TRANSACTION_ID)
    return None


def resolve_tx_id(store: Store, text: str) -> str:
    """A transaction id as typed: the txId itself, or the offset id of any of its records."""
    if not isinstance(text, str):
        raise UsageError(f"a transaction id must be a str (a send's tx_id), not {type(text).__name__}")
    text = id_as_stored(text.strip())
    offset = decode_offset_msg_id(text)
    if offset is not None:
        try:
            m = store.get(offset)
        except NotFoundError:
            return text
        tx_id = tx_id_of(m) if m.msg_id == text else None
        if tx_id:
            return tx_id
    return text


def transaction_state(store: Store, m: Message) -> dict[str, Any] | None:
    """For ``msg show``: the transaction of a half, committed, discarded or op record
    (``txId``, ``state``, ``topic``, ``checkTimes``, offset ids), else None. Reads only."""
    tx_id = tx_id_of(m)
    if not tx_id:
        return None
    try:
        return load(store, tx_id).to_json()
    except NotFoundError:
        return None


# -- writing ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PreparedTransaction:
    tx_id: str
    topic: str
    queue_id: int            # the real queue the message goes to on commit
    offset_msg_id: str       # of the half message
    half: Message


def send_half(store: Store, topic: str, body: bytes, properties: dict[str, str], *,
              queue_id: int = -1, sharding_key: str | None = None, sync: bool = False) -> PreparedTransaction:
    """Store a half message for ``topic``. Its real queue is chosen now, as for a plain send."""
    tx_id = new_tx_id()
    with store.write_lock():
        cfg = store.ensure_topic_locked(topic, queue_id)   # created as by a plain send (and said so)
        qid = store.select_queue(cfg, Draft(topic, body, queue_id=queue_id, sharding_key=sharding_key))
        props = {**properties, PROP_UNIQ_KEY: tx_id, PROP_TRANSACTION_ID: tx_id,
                 PROP_REAL_TOPIC: topic, PROP_REAL_QID: str(qid), PROP_TRAN_MSG: "true"}
        res = store.put([Draft(HALF_TOPIC, body, props, queue_id=0)], sync=sync)[0]
    failpoint("tx-send-after-half")
    return PreparedTransaction(tx_id, topic, qid, res.msg_id, store.get(res.commitlog_offset))


def put_op(store: Store, view: TxView, kind: str, sync: bool = False, also: int | None = None) -> None:
    """Finish every live copy (or, when none is live, name the newest) with one op record;
    ``also``: the half-queue offset of a copy of it the log cannot read (finished too)."""
    offsets = sorted({h.queue_offset for h in view.live()} | ({also} if also is not None else set())) \
        or [view.latest.queue_offset]
    body = "".join(f"{o}," for o in offsets).encode()
    props = {PROP_TAGS: OP_TAG, PROP_KEYS: view.tx_id, PROP_TRANSACTION_ID: view.tx_id, PROP_TX_OP: kind}
    store.put([Draft(OP_HALF_TOPIC, body, props, queue_id=0)], sync=sync)


def _put_real(store: Store, view: TxView, sync: bool) -> str:
    """Write the committed message made from the newest half copy; returns its offset id."""
    h = view.latest
    cfg = store.ensure_topic_locked(view.topic)   # (deleted since the send: created again)
    qid = int_or(h.properties.get(PROP_REAL_QID), -1)
    if qid >= cfg.queues:  # the topic was re-created with fewer queues since the send
        store.warn(f"transaction {view.tx_id}: queue {qid} of {cfg.name} is gone; using {qid % cfg.queues}")
        qid %= cfg.queues
    props = {k: v for k, v in h.properties.items() if k not in _STRIPPED_ON_COMMIT}
    draft = Draft(view.topic, h.body, props, queue_id=qid, flag=h.flag, sysflag=F.TX_COMMIT,
                  born_timestamp=h.born_timestamp, reconsume_times=h.reconsume_times,
                  prepared_tx_offset=h.commitlog_offset)
    return store.put([draft], sync=sync)[0].msg_id


@dataclass(frozen=True)
class TransactionEnd:
    tx_id: str
    state: str                    # COMMITTED or ROLLED_BACK
    changed: bool                 # False: it already was (a no-op, or only a missing op written)
    topic: str
    commit_offset_msg_id: str | None = None


def end_transaction(store: Store, tx_id: str, commit: bool, *, sync: bool = False) -> TransactionEnd:
    """Commit or roll back ``tx_id``, exactly once.

    The same resolution again is a no-op (it completes a commit whose op record a crash lost);
    the other one raises TransactionStateError (exit 4); an unknown id TransactionNotFoundError
    (exit 3). A DISCARDED transaction may still be resolved by hand."""
    target = COMMITTED if commit else ROLLED_BACK
    with store.write_lock():
        store.ensure_recovered()
        view = load(store, tx_id)
        state = view.state
        if state in (COMMITTED, ROLLED_BACK) and state != target:
            raise TransactionStateError(f"transaction {tx_id} was already {state.lower().replace('_', ' ')}")
        if state == target:
            if not view.has_op(OP_OF_STATE[target]):
                put_op(store, view, OP_OF_STATE[target], sync)
            real_id = view.real.msg_id if view.real is not None else None
            return TransactionEnd(tx_id, target, False, view.topic, real_id)
        real_id = None
        if commit:
            real_id = _put_real(store, view, sync)
            failpoint("tx-commit-after-real")
        put_op(store, view, OP_OF_STATE[target], sync)
        failpoint("tx-commit-after-op" if commit else "tx-rollback-after-op")
    return TransactionEnd(tx_id, target, True, view.topic, real_id)
