"""The transaction check service: the pass over the half queue, its progress, pending listing.

The records it reads and writes (half copies, op records, discarded copies) and how a
transaction's state follows from them are described in ``transaction.py``; this module decides
what to do about the half messages nobody resolved, and remembers how far it got.

Check progress: ``tx/CID_RMQ_SYS_TRANS.json``, owned by ``store/log/positions.py`` (which
describes it), so that recovery can move it back without knowing this service.

Failpoints placed here: ``tx-check-after-copy``, ``tx-check-after-op``,
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

A copy the log cannot read (damaged: its CRC fails) is never skipped for its transaction's sake:
when the key index confirms whose copy it was (``reads.damaged_record_key``), that transaction is
listed and checked from its newest sound copy (the older ones a check's re-append finished), with
a warning naming the damaged one, and the op the check writes finishes the damaged copy too.

Differences from RocketMQ: no discard of half messages born more than 72 h ago (retention is
``store clean``'s business here).
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterator, TypeVar

from store.errors import NotFoundError, TransactionStateError, io_error
from store.failpoints import failpoint
from store.fsutil import ensure_dir, open_private
from store.layout import Layout
from store.log.positions import load_tx_progress, save_tx_progress
from store.log.record import PROP_CHECK_IMMUNITY, PROP_CHECK_TIMES, PROP_REAL_QID, Draft, Message
from store.names import CHECK_MAX_TOPIC, HALF_TOPIC, OP_HALF_TOPIC
from store.tx.transaction import (
    DISCARDED,
    OP_CHECK,
    OP_DISCARD,
    OP_OF_STATE,
    OP_TAG,
    PREPARED,
    TxView,
    end_transaction,
    int_or,
    load,
    now_ms,
    parse_op_body,
    put_op,
)

if TYPE_CHECKING:
    from store.log.messagestore import Store

CHECK_SERVICE = "tx-check"
ANSWER_COMMIT, ANSWER_ROLLBACK, ANSWER_UNKNOWN = "COMMIT", "ROLLBACK", "UNKNOWN"

DEFAULT_TIMEOUT_MS = 6_000   # RocketMQ transactionTimeOut
DEFAULT_MAX_CHECKS = 15      # RocketMQ transactionCheckMax


def _read_ops(store: Store, start: int) -> list[tuple[int, tuple[int, ...]]]:
    """(op queue offset, half offsets it finishes) from ``start``; other tags finish nothing."""
    return [(m.queue_offset, parse_op_body(m.body) if m.tags == OP_TAG else ())
            for m in store.iter_queue(OP_HALF_TOPIC, 0, start)]


def _start_offsets(store: Store) -> tuple[int, int]:
    """The progress offsets, moved into each queue's readable range."""
    half, op = load_tx_progress(store.layout, store.warn)
    bounds = []
    for topic, off in ((HALF_TOPIC, half), (OP_HALF_TOPIC, op)):
        lo, hi = store.min_offset(topic, 0), store.max_offset(topic, 0)
        bounds.append(lo if off < lo or off > hi else off)
    return bounds[0], bounds[1]


# -- pending transactions -----------------------------------------------------------------------

@dataclass(frozen=True)
class PendingTransaction:
    """An unresolved transaction and its newest live half copy (of a parked one: its newest
    half copy, and ``parked_at``, the store time of its copy in ``TRANS_CHECK_MAX_TIME_TOPIC``)."""

    tx_id: str
    topic: str
    queue_id: int
    check_times: int
    half: Message
    parked_at: int | None = None


def _half_copies(store: Store, start: int, end: int | None = None) -> Iterator[tuple[int, Message | str]]:
    """``(queue offset, copy)`` of the half queue's copies in ``[start, end)``; a damaged one's
    ``copy`` is why it cannot be read (never skipped here: its transaction has to be told)."""
    end = store.max_offset(HALF_TOPIC, 0) if end is None else end
    off = max(start, store.min_offset(HALF_TOPIC, 0))
    while off < end:
        res = store.pull(HALF_TOPIC, 0, off, min(256, end - off))
        found: list[tuple[int, Message | str]] = [(m.queue_offset, m) for m in res.messages]
        if res.damaged:
            found = sorted(found + list(res.damaged), key=lambda c: c[0])
        yield from found
        if res.next_offset <= off:
            break
        off = res.next_offset


def _damaged_copy_view(store: Store, queue_offset: int, why: str) -> TxView | None:
    """The transaction whose half copy at ``queue_offset`` is damaged, when the key index
    confirms whose it was (``reads.damaged_record_key``) and a sound copy of it is left; a
    warning names the damaged copy either way.

    Each check re-appends a copy and finishes the older ones: when the newest is damaged, the
    transaction is read from its older, sound copies instead of vanishing with it."""
    from store.log.reads import damaged_record_key
    entry = store.queue(HALF_TOPIC, 0).entry(queue_offset)
    tx_id = damaged_record_key(store.engine, entry[0], entry[1]) if entry is not None else None
    view = None
    if tx_id:
        try:
            view = load(store, tx_id)
        except NotFoundError:
            pass
    where = f"half message {HALF_TOPIC}/0@{queue_offset} is damaged ({why})"
    if view is not None:
        store.warn(f"{where}: transaction {tx_id} is read from its sound copy at offset {view.latest.queue_offset}")
    elif tx_id:
        store.warn(f"{where}: no sound copy of transaction {tx_id} is left; it cannot be listed or checked")
    else:
        store.warn(f"{where}, and names no transaction the key index confirms; skipped")
    return view


def pending(store: Store) -> list[PendingTransaction]:
    """PREPARED transactions, oldest first (what the check service has still to decide)."""
    half_off, op_off = _start_offsets(store)
    finished = {o for _, offs in _read_ops(store, op_off) for o in offs}
    newest: dict[str, Message | None] = {}
    for qoff, m in _half_copies(store, half_off):
        if qoff in finished:
            continue
        if isinstance(m, str):
            view = _damaged_copy_view(store, qoff, m)
            if view is not None:
                newest.setdefault(view.tx_id, None)
        elif m.uniq_key:
            newest[m.uniq_key] = m
    out = [PendingTransaction(tx_id, view.topic, int_or(view.latest.properties.get(PROP_REAL_QID), -1),
                              view.check_times, view.latest)
           for tx_id, _m, view in _in_state(store, newest, PREPARED)]
    return sorted(out, key=lambda p: (p.half.born_timestamp, p.half.queue_offset))


def parked(store: Store) -> list[PendingTransaction]:
    """Transactions parked after their last check (state DISCARDED) and resolved by nobody
    since — ``tx commit``/``rollback`` still do — oldest parked first."""
    if not store.has_topic(CHECK_MAX_TOPIC):
        return []
    copies: dict[str, Message] = {}
    for m in store.iter_queue(CHECK_MAX_TOPIC, 0, store.min_offset(CHECK_MAX_TOPIC, 0)):
        if m.uniq_key:
            copies.setdefault(m.uniq_key, m)
    out = [PendingTransaction(tx_id, view.topic, int_or(view.latest.properties.get(PROP_REAL_QID), -1),
                              view.check_times, view.latest, copy.store_timestamp)
           for tx_id, copy, view in _in_state(store, copies, DISCARDED)]
    return sorted(out, key=lambda p: (p.parked_at or 0, p.half.queue_offset))


_C = TypeVar("_C")


def _in_state(store: Store, copies: dict[str, _C], state: str) -> Iterator[tuple[str, _C, TxView]]:
    """``(tx_id, copy, view)`` of the transactions of ``copies`` whose state is ``state`` now."""
    for tx_id, copy in copies.items():
        try:
            view = load(store, tx_id)
        except NotFoundError:  # the key index lost it: `mqctl store recover` rebuilds it
            continue
        if view.state == state:
            yield tx_id, copy, view


# -- the check service ---------------------------------------------------------------------------

Checker = Callable[[Message, int], str]
"""Asked about a half copy and its check count (1 for the first check); returns COMMIT,
ROLLBACK or UNKNOWN (exactly: anything else is left unknown, with a warning through
``store.warn``). Called without any lock held."""


@dataclass(frozen=True)
class TransactionCheckEvent:
    tx_id: str
    topic: str
    check_times: int
    action: str          # "checked", "discarded" or "repaired" (an op a crash had lost)
    answer: str | None   # the checker's answer, for "checked"
    state: str           # the transaction's state afterwards


@dataclass
class TransactionCheckReport:
    half_offsets: tuple[int, int]   # progress before and after the pass
    op_offsets: tuple[int, int]
    events: list[TransactionCheckEvent] = field(default_factory=list)
    # A pass that checked nothing: how many transactions are still pending (all younger than
    # the timeout, or waiting out their check immunity), so "nothing to check" is not taken
    # for "nothing pending" (0 after a pass that did check some)
    left_young: int = 0


@contextmanager
def service_lock(layout: Layout, name: str = CHECK_SERVICE) -> Iterator[None]:
    """Hold the exclusive flock ``services/<name>.lock``, waiting while another process has it."""
    from store.flock import close_kept, keep, lock_exclusive
    path = layout.service_lock(name)
    ensure_dir(path.parent)
    try:
        fd = keep(open_private(path, os.O_RDWR | os.O_CREAT))   # (a child forked meanwhile closes its copy)
    except OSError as exc:
        raise io_error(exc, f"open {path}") from exc
    try:
        lock_exclusive(fd)   # fcntl.flock, the lock portalocker takes on POSIX
        yield
    finally:
        close_kept(fd)  # releases the lock, as a crash does


def immunity_ms(m: Message, timeout_ms: int) -> int:
    """How long after its birth a half message is left alone (RocketMQ ``getImmunityTime``)."""
    seconds = int_or(m.properties.get(PROP_CHECK_IMMUNITY), -1)
    return seconds * 1000 if seconds >= 0 else timeout_ms


def check_pass(store: Store, checker: Checker, *, timeout_ms: int = DEFAULT_TIMEOUT_MS,
               max_checks: int = DEFAULT_MAX_CHECKS, on_event: Callable[[TransactionCheckEvent], None] | None = None,
               should_stop: Callable[[], bool] | None = None) -> TransactionCheckReport:
    """One pass of the check service over the half queue (algorithm in the module docstring)."""
    with service_lock(store.layout):
        return _CheckPass(store, checker, timeout_ms, max_checks, on_event, should_stop).run()


class _CheckPass:
    def __init__(self, store: Store, checker: Checker, timeout_ms: int, max_checks: int,
                 on_event: Callable[[TransactionCheckEvent], None] | None,
                 should_stop: Callable[[], bool] | None) -> None:
        self.store = store
        self.checker = checker
        self.timeout_ms = timeout_ms
        self.max_checks = max_checks
        self.on_event = on_event
        self.should_stop = should_stop or (lambda: False)
        self.events: list[TransactionCheckEvent] = []

    def run(self) -> TransactionCheckReport:
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
            # the decisions this pass stored (real messages, op records) must not be lost
            # behind progress that survives them
            self.store.sync_written()
            save_tx_progress(self.store.layout, new_half, new_op)
        young = len(pending(self.store)) if not self.events else 0
        return TransactionCheckReport((half_off, new_half), (op_off, new_op), self.events, young)

    def _walk(self, start: int, end: int, finished: set[int]) -> int:
        """Handle the half copies in [start, end); returns where the next pass must start."""
        held: int | None = None  # first copy passed over under its own immunity
        for qoff, found in _half_copies(self.store, start, end):
            if self.should_stop():
                return min(qoff, held if held is not None else end)
            if qoff in finished:
                continue
            m = found if not isinstance(found, str) else self._stand_in(qoff, found)
            if m is None:
                continue
            age = now_ms() - m.born_timestamp
            if 0 <= age < immunity_ms(m, self.timeout_ms):
                if PROP_CHECK_IMMUNITY not in m.properties:
                    return min(qoff, held if held is not None else end)
                held = qoff if held is None else held
                continue
            self._handle(qoff, m)
        return held if held is not None else end

    def _stand_in(self, qoff: int, why: str) -> Message | None:
        """The newest sound copy of the transaction whose copy at ``qoff`` is damaged (same
        birth, body and properties but its count), or None when there is none to tell."""
        view = _damaged_copy_view(self.store, qoff, why)
        return view.latest if view is not None else None

    def _handle(self, qoff: int, m: Message) -> None:
        """Check the transaction of the copy at ``qoff``: ``m`` itself, or when that copy is
        damaged, the sound copy that stands in for it."""
        if not m.uniq_key:
            self.store.warn(f"half message at offset {qoff} has no UNIQ_KEY; skipped")
            return
        try:
            step = self._prepare(qoff, m.uniq_key)
        except NotFoundError as exc:  # the key index lost it: `mqctl store recover` rebuilds it
            self.store.warn(f"half message at offset {qoff}: {exc}; skipped")
            return
        if step is None:
            return
        view, copy, times = step
        answer = self.checker(copy, times)
        failpoint("tx-check-after-answer")
        self._resolve(view, answer, times)

    def _prepare(self, qoff: int, tx_id: str) -> tuple[TxView, Message, int] | None:
        """Under the write lock: repair, discard, or append the next copy and finish the live
        ones and the copy at ``qoff`` (damaged, it is no live one the view knows). Returns what
        to ask the checker about, or None when there is nothing to ask."""
        store = self.store
        with store.write_lock():
            store.ensure_recovered()
            view = load(store, tx_id)
            if qoff in view.finished_offsets():
                return None  # another process finished it after this pass read the op log
            if view.state != PREPARED:
                put_op(store, view, OP_OF_STATE[view.state], also=qoff)
                self._emit(view, "repaired", None, view.state)
                return None
            if view.check_times >= self.max_checks:
                self._discard(view, qoff)
                return None
            times = view.check_times + 1
            h = view.latest
            res = store.put([Draft(HALF_TOPIC, h.body, {**h.properties, PROP_CHECK_TIMES: str(times)},
                                   queue_id=0, flag=h.flag, born_timestamp=h.born_timestamp,
                                   reconsume_times=h.reconsume_times)])[0]
            failpoint("tx-check-after-copy")
            put_op(store, view, OP_CHECK, also=qoff)
            failpoint("tx-check-after-op")
            return view, store.get(res.commitlog_offset), times

    def _discard(self, view: TxView, qoff: int) -> None:
        h = view.latest
        self.store.put([Draft(CHECK_MAX_TOPIC, h.body, dict(h.properties), queue_id=0, flag=h.flag,
                              born_timestamp=h.born_timestamp, reconsume_times=h.reconsume_times)])
        failpoint("tx-discard-after-copy")
        put_op(self.store, view, OP_DISCARD, also=qoff)
        self._emit(view, "discarded", None, DISCARDED)

    def _resolve(self, view: TxView, answer: str, times: int) -> None:
        if answer not in (ANSWER_COMMIT, ANSWER_ROLLBACK):
            if answer != ANSWER_UNKNOWN:   # a checker's mistake must not pass for a decision
                self.store.warn(f"checker answered {answer!r} for {view.tx_id}; expected "
                                f"{ANSWER_COMMIT}, {ANSWER_ROLLBACK} or {ANSWER_UNKNOWN}; left unknown")
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
        event = TransactionCheckEvent(view.tx_id, view.topic, view.check_times if times is None else times,
                           action, answer, state)
        self.events.append(event)
        if self.on_event is not None:
            self.on_event(event)
