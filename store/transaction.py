"""Transactional messages: half messages, the op log, end-transaction and the check service.

RocketMQ's design (reference §8) on a store without a broker: every step is a write under the
store's write lock by whichever ``mqctl`` process does it.

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

Check progress: ``tx/CID_RMQ_SYS_TRANS.json``, the internal group's offsets in the shape of
``config/consumerOffset.json``, replaced atomically (``fsutil.atomic_write_json``, ``.bak``)::

    {"offsetTable": {"RMQ_SYS_TRANS_HALF_TOPIC@CID_RMQ_SYS_TRANS": {"0": 12},
                     "RMQ_SYS_TRANS_OP_HALF_TOPIC@CID_RMQ_SYS_TRANS": {"0": 7}}}

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
``tx-rollback-after-op``, ``tx-check-after-copy``, ``tx-check-after-op``,
``tx-check-after-answer``, ``tx-discard-after-copy``, ``tx-check-before-progress``.

Check pass (:func:`check_pass`, RocketMQ's ``TransactionalMessageServiceImpl.check``)
-------------------------------------------------------------------------------------
Under the ``services/tx-check.lock`` flock (passes of several processes run one after the
other): read the op records from the op progress offset; walk the half queue from the half
progress offset to its end as of the start. An offset named by an op is finished. A copy younger
than its immunity (``CHECK_IMMUNITY_TIME_IN_SECONDS`` x 1000, else the timeout) stops the walk;
one with its own immunity property is passed over instead and only holds the progress offset
back. Any other copy: discard it when its transaction was checked ``max_checks`` times already,
else append a copy with the count + 1, write the CHECK op, ask the checker about the new copy
and commit or roll back on its answer. Then the half offset moves to where the walk stopped and
the op offset over the leading op records that name only offsets below it.

Differences from RocketMQ: one op record per resolution (4.x), not 5.x's batches; no discard
of half messages born more than 72 h ago (retention is ``store clean``'s business here); an
end-transaction past a custom immunity is not refused; the state is found by txId through the
key index rather than by the half message's offsets, which is what makes a repeated or crashed
resolution safe. With ``--flush async`` a machine crash can lose a committed message whose op
survived (it is never written twice); ``--flush sync`` orders them on disk.
"""
from __future__ import annotations

import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

from . import format as F
from .errors import NotFoundError, TopicNotFoundError, TransactionNotFoundError, TransactionStateError
from .failpoints import failpoint
from .fsutil import atomic_write_json, ensure_dir, io_error, open_private, read_json_with_bak
from .layout import Layout
from .names import CHECK_MAX_TOPIC, HALF_TOPIC, OP_HALF_TOPIC
from .record import (
    PROP_CHECK_IMMUNITY, PROP_CHECK_TIMES, PROP_KEYS, PROP_REAL_QID, PROP_REAL_TOPIC, PROP_TAGS,
    PROP_TRAN_MSG, PROP_TRANSACTION_ID, PROP_UNIQ_KEY, Draft, Message, UniqKeyGenerator,
    decode_offset_msg_id,
)
from .topics import TopicConfig

if TYPE_CHECKING:
    from .broker import Store

TX_GROUP = "CID_RMQ_SYS_TRANS"
CHECK_SERVICE = "tx-check"
OP_TAG = "d"
PROP_TX_OP = "TRAN_OP"

PREPARED, COMMITTED, ROLLED_BACK, DISCARDED = "PREPARED", "COMMITTED", "ROLLED_BACK", "DISCARDED"
OP_COMMIT, OP_ROLLBACK, OP_CHECK, OP_DISCARD = "COMMIT", "ROLLBACK", "CHECK", "DISCARD"
ANSWER_COMMIT, ANSWER_ROLLBACK, ANSWER_UNKNOWN = "COMMIT", "ROLLBACK", "UNKNOWN"
_OP_OF_STATE = {COMMITTED: OP_COMMIT, ROLLED_BACK: OP_ROLLBACK, DISCARDED: OP_DISCARD}

DEFAULT_TIMEOUT_MS = 6_000   # RocketMQ transactionTimeOut
DEFAULT_MAX_CHECKS = 15      # RocketMQ transactionCheckMax
_FIND_LIMIT = 4096           # records per txId read through the index (copies, ops, retries)
_STRIPPED_ON_COMMIT = frozenset({PROP_REAL_TOPIC, PROP_REAL_QID, PROP_TRAN_MSG})

_uniq: UniqKeyGenerator | None = None


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def new_tx_id() -> str:
    """A fresh transaction id: the UNIQ_KEY its half message will carry."""
    global _uniq
    if _uniq is None:
        _uniq = UniqKeyGenerator()
    return _uniq.next(_now_ms())


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
        return max(_int(h.properties.get(PROP_CHECK_TIMES), 0) for h in self.halves)

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


def _int(text: str | None, default: int) -> int:
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


def load(store: "Store", tx_id: str) -> TxView:
    """The transaction ``tx_id`` as the store holds it; TransactionNotFoundError (exit 3) when no
    half message carries that id."""
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


def resolve_tx_id(store: "Store", text: str) -> str:
    """A transaction id as typed: the txId itself, or the offset id of any of its records."""
    text = text.strip()
    offset = decode_offset_msg_id(text)
    if offset is not None:
        try:
            m = store.get(offset)
        except NotFoundError:
            return text
        tx_id = tx_id_of(m) if m.msg_id == text.upper() else None
        if tx_id:
            return tx_id
    return text


def transaction_state(store: "Store", m: Message) -> dict[str, Any] | None:
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
class HalfResult:
    tx_id: str
    topic: str
    queue_id: int            # the real queue the message goes to on commit
    offset_msg_id: str       # of the half message
    half: Message


def _real_topic(store: "Store", topic: str) -> TopicConfig:
    cfg = store.topics().get(topic)
    if cfg is not None:
        return cfg
    if not store.settings.auto_create_topics:
        raise TopicNotFoundError(f"topic {topic!r} does not exist and this store does not create "
                                 f"topics on send (create it with: mqctl topic create {topic})")
    return store.create_topic(topic)[0]


def send_half(store: "Store", topic: str, body: bytes, properties: dict[str, str], *,
              queue_id: int = -1, sharding_key: str | None = None, sync: bool = False) -> HalfResult:
    """Store a half message for ``topic``. Its real queue is chosen now, as for a plain send."""
    tx_id = new_tx_id()
    with store.write_lock():
        cfg = _real_topic(store, topic)
        qid = store.select_queue(cfg, Draft(topic, body, queue_id=queue_id, sharding_key=sharding_key))
        props = {**properties, PROP_UNIQ_KEY: tx_id, PROP_TRANSACTION_ID: tx_id,
                 PROP_REAL_TOPIC: topic, PROP_REAL_QID: str(qid), PROP_TRAN_MSG: "true"}
        res = store.put([Draft(HALF_TOPIC, body, props, queue_id=0)], sync=sync)[0]
    failpoint("tx-send-after-half")
    return HalfResult(tx_id, topic, qid, res.msg_id, store.get(res.commitlog_offset))


def _put_op(store: "Store", view: TxView, kind: str, sync: bool = False) -> None:
    """Finish every live copy (or, when none is live, name the newest) with one op record."""
    offsets = sorted(h.queue_offset for h in view.live()) or [view.latest.queue_offset]
    body = "".join(f"{o}," for o in offsets).encode()
    props = {PROP_TAGS: OP_TAG, PROP_KEYS: view.tx_id, PROP_TRANSACTION_ID: view.tx_id, PROP_TX_OP: kind}
    store.put([Draft(OP_HALF_TOPIC, body, props, queue_id=0)], sync=sync)


def _put_real(store: "Store", view: TxView, sync: bool) -> str:
    """Write the committed message made from the newest half copy; returns its offset id."""
    h = view.latest
    cfg = _real_topic(store, view.topic)
    qid = _int(h.properties.get(PROP_REAL_QID), -1)
    if qid >= cfg.queues:  # the topic was re-created with fewer queues since the send
        store.warn(f"transaction {view.tx_id}: queue {qid} of {cfg.name} is gone; using {qid % cfg.queues}")
        qid %= cfg.queues
    props = {k: v for k, v in h.properties.items() if k not in _STRIPPED_ON_COMMIT}
    draft = Draft(view.topic, h.body, props, queue_id=qid, flag=h.flag, sysflag=F.TX_COMMIT,
                  born_timestamp=h.born_timestamp, reconsume_times=h.reconsume_times,
                  prepared_tx_offset=h.commitlog_offset)
    return store.put([draft], sync=sync)[0].msg_id


@dataclass(frozen=True)
class EndResult:
    tx_id: str
    state: str                    # COMMITTED or ROLLED_BACK
    changed: bool                 # False: it already was (a no-op, or only a missing op written)
    topic: str
    commit_offset_msg_id: str | None = None


def end_transaction(store: "Store", tx_id: str, commit: bool, *, sync: bool = False) -> EndResult:
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
            if not view.has_op(_OP_OF_STATE[target]):
                _put_op(store, view, _OP_OF_STATE[target], sync)
            real_id = view.real.msg_id if view.real is not None else None
            return EndResult(tx_id, target, False, view.topic, real_id)
        real_id = None
        if commit:
            real_id = _put_real(store, view, sync)
            failpoint("tx-commit-after-real")
        _put_op(store, view, _OP_OF_STATE[target], sync)
        failpoint("tx-commit-after-op" if commit else "tx-rollback-after-op")
    return EndResult(tx_id, target, True, view.topic, real_id)


# -- check progress -----------------------------------------------------------------------------

_HALF_KEY = f"{HALF_TOPIC}@{TX_GROUP}"
_OP_KEY = f"{OP_HALF_TOPIC}@{TX_GROUP}"


def progress_path(layout: Layout) -> Path:
    return layout.tx_dir() / f"{TX_GROUP}.json"


def _validate_progress(obj: Any) -> None:
    table = obj["offsetTable"]
    for key in (_HALF_KEY, _OP_KEY):
        if not isinstance(table[key]["0"], int) or table[key]["0"] < 0:
            raise ValueError(f"{key}: offset must be a non-negative integer")


def load_progress(layout: Layout, warn: Callable[[str], None] | None = None) -> tuple[int, int]:
    """(half offset, op offset) of ``CID_RMQ_SYS_TRANS``; (0, 0) before the first pass."""
    obj = read_json_with_bak(progress_path(layout), None, _validate_progress, warn)
    if obj is None:
        return 0, 0
    return obj["offsetTable"][_HALF_KEY]["0"], obj["offsetTable"][_OP_KEY]["0"]


def save_progress(layout: Layout, half_offset: int, op_offset: int) -> None:
    ensure_dir(layout.tx_dir())
    atomic_write_json(progress_path(layout), {"offsetTable": {
        _HALF_KEY: {"0": half_offset}, _OP_KEY: {"0": op_offset}}})


def _read_ops(store: "Store", start: int) -> list[tuple[int, tuple[int, ...]]]:
    """(op queue offset, half offsets it finishes) from ``start``; other tags finish nothing."""
    return [(m.queue_offset, parse_op_body(m.body) if m.tags == OP_TAG else ())
            for m in store.iter_queue(OP_HALF_TOPIC, 0, start)]


def _start_offsets(store: "Store") -> tuple[int, int]:
    """The progress offsets, moved into each queue's readable range."""
    half, op = load_progress(store.layout, store.warn)
    bounds = []
    for topic, off in ((HALF_TOPIC, half), (OP_HALF_TOPIC, op)):
        lo, hi = store.min_offset(topic, 0), store.max_offset(topic, 0)
        bounds.append(lo if off < lo or off > hi else off)
    return bounds[0], bounds[1]


# -- pending transactions -----------------------------------------------------------------------

@dataclass(frozen=True)
class Pending:
    """An unresolved transaction and its newest live half copy."""

    tx_id: str
    topic: str
    queue_id: int
    check_times: int
    half: Message


def pending(store: "Store") -> list[Pending]:
    """PREPARED transactions, oldest first (what the check service has still to decide)."""
    half_off, op_off = _start_offsets(store)
    finished = {o for _, offs in _read_ops(store, op_off) for o in offs}
    newest: dict[str, Message] = {}
    for m in store.iter_queue(HALF_TOPIC, 0, half_off):
        if m.queue_offset not in finished and m.uniq_key:
            newest[m.uniq_key] = m
    out = []
    for tx_id, m in newest.items():
        try:
            view = load(store, tx_id)
        except NotFoundError:  # the key index lost it: `mqctl store recover` rebuilds it
            continue
        if view.state == PREPARED:
            out.append(Pending(tx_id, view.topic, _int(m.properties.get(PROP_REAL_QID), -1),
                               view.check_times, view.latest))
    return sorted(out, key=lambda p: (p.half.born_timestamp, p.half.queue_offset))


# -- the check service ---------------------------------------------------------------------------

Checker = Callable[[Message, int], str]
"""Asked about a half copy and its check count (1 for the first check); returns COMMIT,
ROLLBACK or UNKNOWN. Called without any lock held."""


@dataclass(frozen=True)
class CheckEvent:
    tx_id: str
    topic: str
    check_times: int
    action: str          # "checked", "discarded" or "repaired" (an op a crash had lost)
    answer: str | None   # the checker's answer, for "checked"
    state: str           # the transaction's state afterwards


@dataclass
class CheckReport:
    half_offsets: tuple[int, int]   # progress before and after the pass
    op_offsets: tuple[int, int]
    events: list[CheckEvent] = field(default_factory=list)


@contextmanager
def service_lock(layout: Layout, name: str = CHECK_SERVICE) -> Iterator[None]:
    """Hold the exclusive flock ``services/<name>.lock``, waiting while another process has it."""
    import portalocker
    path = layout.service_lock(name)
    ensure_dir(path.parent)
    try:
        fd = open_private(path, os.O_RDWR | os.O_CREAT)
    except OSError as exc:
        raise io_error(exc, f"open {path}") from exc
    try:
        portalocker.lock(fd, portalocker.LockFlags.EXCLUSIVE)
        yield
    finally:
        os.close(fd)  # releases the lock, as a crash does


def immunity_ms(m: Message, timeout_ms: int) -> int:
    """How long after its birth a half message is left alone (RocketMQ ``getImmunityTime``)."""
    seconds = _int(m.properties.get(PROP_CHECK_IMMUNITY), -1)
    return seconds * 1000 if seconds >= 0 else timeout_ms


def check_pass(store: "Store", checker: Checker, *, timeout_ms: int = DEFAULT_TIMEOUT_MS,
               max_checks: int = DEFAULT_MAX_CHECKS, on_event: Callable[[CheckEvent], None] | None = None,
               should_stop: Callable[[], bool] | None = None) -> CheckReport:
    """One pass of the check service over the half queue (algorithm in the module docstring)."""
    with service_lock(store.layout):
        return _CheckPass(store, checker, timeout_ms, max_checks, on_event, should_stop).run()


class _CheckPass:
    def __init__(self, store: "Store", checker: Checker, timeout_ms: int, max_checks: int,
                 on_event: Callable[[CheckEvent], None] | None,
                 should_stop: Callable[[], bool] | None) -> None:
        self.store = store
        self.checker = checker
        self.timeout_ms = timeout_ms
        self.max_checks = max_checks
        self.on_event = on_event
        self.should_stop = should_stop or (lambda: False)
        self.events: list[CheckEvent] = []

    def run(self) -> CheckReport:
        self.store.ensure_recovered()  # so that the queues read below show every record
        half_off, op_off = _start_offsets(self.store)
        ops = _read_ops(self.store, op_off)
        finished = {o for _, offs in ops for o in offs}
        new_half = self._walk(half_off, self.store.max_offset(HALF_TOPIC, 0), finished)
        new_op = op_off
        for qoff, offs in ops:  # the leading op records nothing at or after new_half still needs
            if any(o >= new_half for o in offs):
                break
            new_op = qoff + 1
        failpoint("tx-check-before-progress")
        if (new_half, new_op) != (half_off, op_off):
            save_progress(self.store.layout, new_half, new_op)
        return CheckReport((half_off, new_half), (op_off, new_op), self.events)

    def _walk(self, start: int, end: int, finished: set[int]) -> int:
        """Handle the half copies in [start, end); returns where the next pass must start."""
        held: int | None = None  # first copy passed over under its own immunity
        for m in self.store.iter_queue(HALF_TOPIC, 0, start, end):
            if self.should_stop():
                return min(m.queue_offset, held if held is not None else end)
            if m.queue_offset in finished:
                continue
            age = _now_ms() - m.born_timestamp
            if 0 <= age < immunity_ms(m, self.timeout_ms):
                if PROP_CHECK_IMMUNITY not in m.properties:
                    return min(m.queue_offset, held if held is not None else end)
                held = m.queue_offset if held is None else held
                continue
            self._handle(m)
        return held if held is not None else end

    def _handle(self, m: Message) -> None:
        if not m.uniq_key:
            self.store.warn(f"half message at offset {m.queue_offset} has no UNIQ_KEY; skipped")
            return
        try:
            step = self._prepare(m)
        except NotFoundError as exc:  # the key index lost it: `mqctl store recover` rebuilds it
            self.store.warn(f"half message at offset {m.queue_offset}: {exc}; skipped")
            return
        if step is None:
            return
        view, copy, times = step
        answer = self.checker(copy, times)
        failpoint("tx-check-after-answer")
        self._resolve(view, answer, times)

    def _prepare(self, m: Message) -> tuple[TxView, Message, int] | None:
        """Under the write lock: repair, discard, or append the next copy and finish the live
        ones. Returns what to ask the checker about, or None when there is nothing to ask."""
        store = self.store
        with store.write_lock():
            store.ensure_recovered()
            view = load(store, m.uniq_key or "")
            if m.queue_offset in view.finished_offsets():
                return None  # another process finished it after this pass read the op log
            if view.state != PREPARED:
                _put_op(store, view, _OP_OF_STATE[view.state])
                self._emit(view, "repaired", None, view.state)
                return None
            if view.check_times >= self.max_checks:
                self._discard(view)
                return None
            times = view.check_times + 1
            h = view.latest
            res = store.put([Draft(HALF_TOPIC, h.body, {**h.properties, PROP_CHECK_TIMES: str(times)},
                                   queue_id=0, flag=h.flag, born_timestamp=h.born_timestamp,
                                   reconsume_times=h.reconsume_times)])[0]
            failpoint("tx-check-after-copy")
            _put_op(store, view, OP_CHECK)
            failpoint("tx-check-after-op")
            return view, store.get(res.commitlog_offset), times

    def _discard(self, view: TxView) -> None:
        h = view.latest
        self.store.put([Draft(CHECK_MAX_TOPIC, h.body, dict(h.properties), queue_id=0, flag=h.flag,
                              born_timestamp=h.born_timestamp, reconsume_times=h.reconsume_times)])
        failpoint("tx-discard-after-copy")
        _put_op(self.store, view, OP_DISCARD)
        self._emit(view, "discarded", None, DISCARDED)

    def _resolve(self, view: TxView, answer: str, times: int) -> None:
        if answer not in (ANSWER_COMMIT, ANSWER_ROLLBACK):
            self._emit(view, "checked", ANSWER_UNKNOWN, PREPARED, times)
            return
        try:
            state = end_transaction(self.store, view.tx_id, answer == ANSWER_COMMIT).state
        except TransactionStateError as exc:
            self.store.warn(f"check answered {answer} for {view.tx_id}, but {exc}")
            state = load(self.store, view.tx_id).state
        except NotFoundError as exc:  # the real topic was deleted: the new copy stays live
            self.store.warn(f"transaction {view.tx_id}: {exc}")
            state = PREPARED
        self._emit(view, "checked", answer, state, times)

    def _emit(self, view: TxView, action: str, answer: str | None, state: str,
              times: int | None = None) -> None:
        event = CheckEvent(view.tx_id, view.topic, view.check_times if times is None else times,
                           action, answer, state)
        self.events.append(event)
        if self.on_event is not None:
            self.on_event(event)
