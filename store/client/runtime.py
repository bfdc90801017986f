"""The consumer runtime: one member of a consumer group, for ``mqctl consume`` and the Python API.

One loop does what RocketMQ's client threads do, in turn: rebalance (on a short interval, and
at once when the group's membership changes), pull each held queue into its process queue,
hand batches to the sink, apply results (commit, retry, suspend, dead-letter), persist offsets
every 5 s, renew queue locks every 20 s (orderly), and run the delay scheduler.

What consuming a batch *means* is the sink's business (:class:`InlineSink`, :class:`PoolSink`):

* an inline sink runs on the loop's thread, and a batch counts as consumed when its
  :meth:`~InlineSink.consume` returned (``mqctl consume`` writing to stdout: consumed once
  flushed; an exception commits nothing of that batch and stops the consumer);
* a pool sink is handed batches to work on elsewhere (``--exec`` children in a thread pool,
  Python handlers in a thread pool, the iterator of :meth:`store.Consumer.messages` in the
  caller's thread) and answers each with a :class:`concurrent.futures.Future` of an
  :data:`Outcome`: consumed, failed (retry topic / DLQ, or retried in place when orderly) or
  released (handed back untouched, to be delivered again).

Pulls: records are checked as arrays where numpy is worth it (``store.log.bulk``), and the
queues of a topic whose records lie side by side in the log are read together, one window of
the log for all (:func:`~store.log.bulk.pull_many`): ``mqctl consume`` writing raw bodies
gets bodies only, a sink that takes :class:`store.Message` objects (``client_messages``) gets
them built straight from the records' columns; every other sink gets decoded records.

Orderly mode adds RocketMQ's three locks: the queue lock across processes (``qlocks``), taken
before a queue is added and checked before every batch; one batch at a time per queue inside
this process (``ProcessQueue.busy``); and the drop rule that a queue is released only after
its in-flight batch finished and its offset was persisted.

The loop runs in the thread that calls :meth:`Runtime.run` (``mqctl consume``, push
consumers), or in a thread of its own (:meth:`Runtime.start`, the iterator). Every other
thread talks to it through :meth:`Runtime.call_soon` and :meth:`Runtime.stop` only.
"""
from __future__ import annotations

import concurrent.futures as cf
import logging
import os
import queue as queue_mod
import signal
import threading
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Optional, Protocol, Sequence, Union, cast, runtime_checkable

from store import names
from store.client import message as client_message
from store.client.allocate import allocate, queues_of
from store.client.process_queue import PULL_THRESHOLD_COUNT, ProcessQueue
from store.client.retry import DEFAULT_MAX_RECONSUME, dead_letter, original_topic, send_back
from store.errors import HandlerError, StoreError
from store.failpoints import failpoint
from store.log.broker import Store
from store.log.bulk import Columns
from store.log.record import Message, java_hash
from store.log.results import BodiesResult

if TYPE_CHECKING:
    from store.client.dedup import DedupLog
    from store.client.members import Membership
    from store.client.qlocks import QueueLock

QueueKey = tuple[str, int]
PULL_BATCH = 256
PULL_MAX_BYTES = 4 * 1024 * 1024   # what one pull reads at most (Store.pull's max_bytes)
RENEW_INTERVAL_S = 20.0

# (True: consumed, False: failed, None: released untouched, or an int k: the first k of the
# batch consumed and the rest released, concurrent mode only; the reason, for failures)
Outcome = tuple[Optional[Union[bool, int, list[tuple[int, str]]]], str]
"""What a pool sink says about a batch: ``(True, "")`` consumed, ``(False, why)`` failed,
``(None, why)`` released (not consumed, not failed: the batch is handed out again), and from
a sink that handles a batch message by message, ``([(i, why), ...], "")``: consumed but for
the listed messages, each of which failed."""

Warn = Callable[[str], None]

_log = logging.getLogger("store.client")


def log_warning(message: str) -> None:
    """The library's default warning channel: the ``store.client`` logger."""
    _log.warning("%s", message)


@dataclass
class ConsumeOptions:
    """How a member consumes: what ``mqctl consume``'s flags and :class:`store.Consumer`'s
    arguments set."""

    topic: str
    group: str
    orderly: bool = False
    broadcast: bool = False
    from_where: str = "last"            # first | last | timestamp
    from_timestamp: int | None = None
    tags: frozenset[str] | None = None  # None = every tag
    batch: int = 1                      # messages per pool-sink batch
    threads: int = 4                    # pool sinks: batches in flight at most 2 x threads
    count: int | None = None
    exit_at_end: bool = False
    idle_timeout_s: float | None = None
    client_id: str = field(default_factory=lambda: f"{os.uname().nodename}@{os.getpid()}")
    strategy: str = "averagely"
    config_queues: list[int] | None = None
    max_reconsume: int | None = None    # None: 16 concurrent, unlimited orderly
    suspend_ms: int = 1000
    dedup: bool = False
    retry_delay_ms: int | None = None
    rebalance_interval_s: float = 5.0   # a backstop: membership changes wake the loop at once
    persist_interval_s: float = 5.0
    install_signals: bool = True        # SIGINT/SIGTERM stop the loop (its thread must be main)
    client_id_given: bool = True        # False: a default id (broadcast: HOST@DEFAULT)
    no_group: bool = False              # read without a group: nothing persisted, no member


def default_broadcast_client_id() -> str:
    """A broadcast consumer's default id: stable on a host, as RocketMQ's ``IP@DEFAULT``, so a
    restarted broadcast consumer resumes its own offsets instead of being a new client."""
    return f"{os.uname().nodename}@DEFAULT"


class MemoryOffsetStore:
    """Offsets of a read without a group (``--no-group``): kept in memory, never written."""

    def __init__(self) -> None:
        self._table: dict[QueueKey, int] = {}

    def load(self) -> dict[QueueKey, int]:
        return dict(self._table)

    def read(self, topic: str, queue_id: int) -> int:
        return self._table.get((topic, queue_id), -1)

    def update(self, topic: str, queue_id: int, offset: int, increase_only: bool = True) -> None:
        old = self._table.get((topic, queue_id), -1)
        self._table[(topic, queue_id)] = max(old, offset) if increase_only else offset

    def persist(self, owned: Any) -> None:
        return None


# -- sinks -----------------------------------------------------------------------------------

@runtime_checkable
class InlineSink(Protocol):
    """A sink that consumes on the loop's own thread.

    :meth:`consume` returning means the batch is consumed (its offsets may be committed);
    raising means nothing of it is, and the exception stops the consumer. ``raw`` sinks also
    take bare bodies (:meth:`write_raw`) when there is nothing to filter or deduplicate: the
    runtime then skips building messages (``mqctl consume`` printing raw bodies)."""

    raw: bool

    def consume(self, batch: list[Message]) -> None: ...

    def write_raw(self, bodies: Sequence[bytes | memoryview]) -> None: ...


@runtime_checkable
class PoolSink(Protocol):
    """A sink that consumes elsewhere: :meth:`submit` returns a future of an :data:`Outcome`.

    ``batch`` is the most messages per submitted batch, ``max_in_flight`` the most batches
    outstanding. A sink with ``per_message`` true handles a batch one message at a time (its
    outcomes may name single failures): the runtime then sizes batches to what is waiting,
    one message each when little is, up to ``batch`` when a backlog would otherwise cost a
    hand-over per message. A future that raises :class:`~store.errors.HandlerError` stops the consumer
    (the handler cannot run at all). :meth:`shutdown` is called once, when the member stops;
    ``wait`` is False when it stops on an error.

    Optional attributes: ``client_messages`` true, the sink takes :class:`store.Message`
    objects as they are (the runtime then builds them straight from a pull's columns, for the
    subscribed topic's queues in concurrent mode without dedup or a tag filter; elsewhere it
    hands over records, which the sink converts); ``persist_every_s`` above 0, an in-process
    consumer (the iterator, Python handlers): see :meth:`Runtime.set_sink`; ``spread`` above
    0, a per-message sink's backlog is cut into that many batches (default ``max_in_flight``):
    a sink whose hand-over costs as much as many handler calls (Python handlers in threads)
    says its thread count, one batch per thread, half the hand-overs (a backlog of ``spread``
    full batches and more goes out in full batches); ``cancel_on_stop`` true,
    the futures still pending when the member stops are cancelled (their batches handed back:
    a stop starts no new handler)."""

    batch: int
    max_in_flight: int

    def submit(self, batch: list[Message], topic: str) -> "cf.Future[Outcome]": ...

    def shutdown(self, wait: bool) -> None: ...


class ThreadPoolSink:
    """A :class:`PoolSink` that runs ``work(batch, topic) -> Outcome`` in a thread pool."""

    client_messages = False     # (the optional PoolSink attributes)
    persist_every_s = 0.0
    spread = 0
    cancel_on_stop = True

    def __init__(self, work: Callable[[list[Message], str], Outcome], threads: int, batch: int = 1,
                 per_message: bool = False) -> None:
        self.work = work
        self.batch = max(1, batch)
        self.per_message = per_message
        self.max_in_flight = 2 * max(1, threads)
        self.pool = cf.ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="handler")

    def submit(self, batch: list[Message], topic: str) -> "cf.Future[Outcome]":
        return self.pool.submit(self.work, batch, topic)

    def shutdown(self, wait: bool) -> None:
        self.pool.shutdown(wait=wait, cancel_futures=True)


class Runtime:
    """One member of a consumer group (see the module docstring)."""

    def __init__(self, store: Store, opts: ConsumeOptions, sink: InlineSink | PoolSink | None = None,
                 warn: Warn = log_warning) -> None:
        self.store = store
        self.o = opts
        self.layout = store.layout
        self.warn = warn
        self.sink: InlineSink | PoolSink | None = None
        self.inline: InlineSink | None = None
        self.pool: PoolSink | None = None
        self.raw_fast = False
        self.tag_codes = frozenset(java_hash(t) for t in opts.tags) if opts.tags else None
        self.max_reconsume: int | None = None
        self.set_retries(opts.max_reconsume, opts.retry_delay_ms, opts.suspend_ms)
        self.topics = [opts.topic]
        if not opts.broadcast:  # RocketMQ subscribes every clustering member to its retry topic
            self.topics.append(names.retry_topic(opts.group))
        self.pqs: dict[QueueKey, ProcessQueue] = {}
        self.locks: dict[QueueKey, QueueLock] = {}
        self.offsets: dict[QueueKey, int] = {}
        self.dirty: set[QueueKey] = set()
        self.persisted: dict[QueueKey, int] = {}   # what the offset store has, per queue
        self.urgent = False   # a queue ran ahead of its persisted offset (see set_sink)
        self._persist_lag = PULL_BATCH // 2
        self._persist_every_s = 0.0     # in-process sinks: the least time between lag persists
        self._last_persist = time.monotonic()
        self.client_fast = False        # build store.Message objects straight from columns
        # the sink's optional attributes (PoolSink), read once in set_sink
        self._per_message = False
        self._spread = 1
        self._idle_check: Callable[[], None] | None = None
        # Clustering members own every queue they consume under a queue lock (orderly and
        # concurrent alike): a new owner starts only after the previous one persisted and
        # released it, died (the OS drops the lock), or let its lease expire.
        self.locked = not opts.broadcast and not opts.no_group
        self.force_stop = False        # a second SIGINT/SIGTERM: end handlers at once
        self._in_write = False         # an inline sink is writing: a second signal interrupts it
        self.resent = False   # a copy went to the retry topic or DLQ since the last commit
        self.schedule_at = 0.0   # when the loop next delivers due delayed messages (monotonic)
        self._topics_stamp: tuple[int, int] | None = None   # topics.json as last seen
        self.published_queues: list[dict[str, Any]] | None = None   # as the member record says
        self.epochs: dict[str, int] = {}
        self.end_snapshot: dict[QueueKey, int] = {}
        self.dropping: dict[QueueKey, ProcessQueue] = {}
        self.futures: dict[cf.Future[Any], tuple[QueueKey, list[Message]]] = {}
        # Woken by the store itself (inotify, or polling where there is none): a new batch, a
        # member joining or leaving, an offset reset, a queue lock released. ``set()`` from a
        # thread or a signal handler wakes it too, as the threading.Event it replaces.
        from store.watch import Watcher, consumer_paths
        self.wake = Watcher(consumer_paths(store.layout, opts.group, orderly=not opts.broadcast)
                            if opts.group and not opts.no_group else [(store.layout.checkpoint, "file")],
                            lazy=True)
        self.stop_requested = False
        self.consumed = 0
        self.handed_out = 0
        self.last_activity = time.monotonic()
        self.fatal: BaseException | None = None
        self.retry_later: list[tuple[float, QueueKey, Message]] = []
        self.dedup: DedupLog | Any = None
        self.membership: Membership | Any = None
        self.offset_store: Any = None   # ClusterOffsetStore, or BroadcastOffsetStore
        self.drained = threading.Event()   # exit_at_end: the held queues are drained
        self.stopped = threading.Event()   # the member has left (shutdown)
        self.loop_ended = threading.Event()  # the loop of :meth:`start` has ended
        self._calls: queue_mod.SimpleQueue[Callable[[], None]] = queue_mod.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._set_up = False
        self._shut_down = False
        if sink is not None:
            self.set_sink(sink)

    def set_sink(self, sink: InlineSink | PoolSink) -> None:
        """Where batches go from now on. Only while no batch is out (before the loop runs,
        or between two :meth:`serve` calls)."""
        if self.futures:
            raise RuntimeError("cannot change the sink while batches are out")
        self.sink = sink
        self.inline = sink if not isinstance(sink, PoolSink) else None
        self.pool = sink if isinstance(sink, PoolSink) else None
        self.raw_fast = self.inline is not None and bool(getattr(sink, "raw", False)) and not self.o.dedup
        self.client_fast = (self.pool is not None and bool(getattr(sink, "client_messages", False))
                            and not self.o.orderly and not self.o.dedup)
        # How far a queue's consumed offset may run ahead of the persisted one before the loop
        # persists it (at the end of its turn): a crash hands at most that much, plus one turn's
        # delivery, to the next owner again. Inline sinks persist every turn that moved an
        # offset (at most one pull batch per queue is lost to a crash); pool sinks every half
        # pull batch, plus what was in flight. An idle loop persists whatever moved.
        #
        # In-process pool sinks (``persist_every_s`` > 0: the iterator of store.Consumer and
        # Python handlers) consume far faster than an offset commit (an fsync) completes, so
        # they persist on lag at most once per ``persist_every_s``, and not on every idle
        # moment while their batches are out: a kill -9 hands the next owner again at most
        # what was consumed in the last ``persist_every_s`` (or half a pull batch per queue,
        # whichever is more), plus the batches in flight.
        self._persist_lag = 1 if self.inline is not None else PULL_BATCH // 2
        self._persist_every_s = max(0.0, float(getattr(sink, "persist_every_s", 0.0) or 0.0))
        self._per_message = self.pool is not None and bool(getattr(sink, "per_message", False))
        self._spread = max(1, int(getattr(sink, "spread", 0) or 0)
                           or (self.pool.max_in_flight if self.pool is not None else 1))
        self._idle_check = getattr(self.inline, "idle_check", None)

    def set_retries(self, max_reconsume: int | None, retry_delay_ms: int | None, suspend_ms: int) -> None:
        """Failed batches: deliveries before the DLQ (None: 16 concurrent, unlimited
        orderly), the fixed retry delay instead of the levels (concurrent), and the pause
        before a retry in place (orderly)."""
        o = self.o
        o.max_reconsume, o.retry_delay_ms, o.suspend_ms = max_reconsume, retry_delay_ms, suspend_ms
        self.max_reconsume = max_reconsume if max_reconsume is not None else (
            None if o.orderly else DEFAULT_MAX_RECONSUME)

    # -- lifecycle -------------------------------------------------------------------------
    def serve(self) -> None:
        """Run the loop in this thread until a stop condition (``exit_at_end`` drained,
        ``count``, ``idle_timeout_s``) and stay a member, offsets persisted; or, when stopped
        (:meth:`stop`) or on an error, shut down and leave (re-raising the error)."""
        self._loop_or_leave()
        if self.stop_requested or self.fatal is not None:
            self.shutdown(wait_handlers=True)
            if self.fatal is not None:
                raise self.fatal
            return
        while self.futures:
            self._collect(block=True)
        self._persist(force=True)

    def _topics_changed(self) -> bool:
        """Whether ``topics.json`` was replaced since the last look (one stat)."""
        try:
            st = os.stat(self.layout.topics_epoch)
            stamp: tuple[int, int] | None = (st.st_ino, st.st_mtime_ns)
        except OSError:
            stamp = None
        changed = stamp != self._topics_stamp
        self._topics_stamp = stamp
        return changed

    def _loop_or_leave(self) -> None:
        """Join (unless :meth:`setup` did) and run the loop; on any error leave at once."""
        if not self._set_up:
            self.setup()
        try:
            self._loop()
        except BaseException:
            self.shutdown(wait_handlers=False)
            raise

    def run(self) -> int:
        """Join the group (unless :meth:`setup` did), consume until a stop condition or
        :meth:`stop`, then persist offsets, release locks and leave. Returns 0; raises what
        stopped the member abnormally."""
        if self.o.install_signals:
            self._install_signals()   # first: a signal while joining is a graceful stop too
        self._loop_or_leave()
        self.shutdown(wait_handlers=True)
        if self.fatal is not None:
            raise self.fatal
        if self.force_stop:
            raise KeyboardInterrupt   # a second signal: exit 130, what finished is committed
        return 0

    def start(self) -> None:
        """Run the loop in a thread of its own until :meth:`stop` (``loop_ended`` is set when
        it has ended; a failure is kept in ``fatal``). The owner then calls :meth:`shutdown`."""
        if not self._set_up:
            self.setup()

        def main() -> None:
            try:
                self._loop()
            except BaseException as exc:  # noqa: BLE001 - handed to the owner via ``fatal``
                if self.fatal is None:
                    self.fatal = exc
            finally:
                self.loop_ended.set()
                self.wake.set()
        self._thread = threading.Thread(target=main, name=f"mq-{self.o.group}", daemon=True)
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        """Wait for the loop thread started by :meth:`start` to end."""
        if self._thread is not None:
            self._thread.join(timeout)

    def stop(self) -> None:
        """Ask the loop to end (from any thread, or a signal handler)."""
        self.stop_requested = True
        self.wake.set()

    def call_soon(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the loop's thread at its next turn (thread-safe)."""
        self._calls.put(fn)
        self.wake.set()

    def setup(self) -> None:
        """Check the topic and group, open the offsets, join the group."""
        o = self.o
        names.validate_group(o.group)
        cfg = self.store.topic(o.topic)  # TopicNotFoundError: exit 3
        missing = sorted(q for q in (o.config_queues or []) if not 0 <= q < cfg.queues)
        if missing:
            from store.errors import UsageError
            raise UsageError(f"queue {missing[0]} does not exist: topic {o.topic!r} has queues 0-{cfg.queues - 1}")
        from store.client.members import Membership
        from store.log.offsets import BroadcastOffsetStore, ClusterOffsetStore
        if o.no_group:
            self.offset_store = MemoryOffsetStore()
        elif o.broadcast:
            self.offset_store = BroadcastOffsetStore(self.layout, o.client_id, o.group)
            self.offset_store.load()
        else:
            self.offset_store = ClusterOffsetStore(self.layout)
            snap = self.offset_store.snapshot(o.group)
            self.epochs = dict(snap.epochs)
        if o.no_group:
            self._set_up = True
            if o.exit_at_end:
                self.snapshot_ends()
            return
        if o.dedup:
            from store.client.dedup import DedupLog
            self.dedup = DedupLog(self.layout, o.group, max_entries=200_000)
        self.membership = Membership(self.layout, o.group, o.client_id, {
            "topics": [o.topic], "mode": "broadcasting" if o.broadcast else "clustering",
            "orderly": o.orderly, "strategy": o.strategy, "queues": []})
        try:
            self.membership.join()
        except BaseException as exc:
            if self.dedup is not None:
                self.dedup.close()
            from store.errors import ClientIdInUseError
            if isinstance(exc, ClientIdInUseError) and o.broadcast and not o.client_id_given:
                raise ClientIdInUseError(
                    f"{exc}: a broadcast consumer's default client id ({o.client_id}) is one per "
                    f"host and group; give each broadcast consumer of group {o.group} on this host "
                    f"its own --client-id (it keeps its offsets under that id)") from exc
            raise
        self._set_up = True
        if o.exit_at_end:
            self.snapshot_ends()

    def snapshot_ends(self) -> None:
        """Remember where every queue of the subscribed topics ends now: with
        ``exit_at_end`` the member drains up to there and no further. Delayed messages
        already due are delivered first: they belong to "now" (a ``-e`` run must not leave
        them for the next one)."""
        from store.log.schedule import deliver_due
        deliver_due(self.store)
        self.end_snapshot = {}
        for t in self.topics:
            if self.store.has_topic(t):
                for q in range(self.store.topic(t).queues):
                    self.end_snapshot[(t, q)] = self.store.max_offset(t, q)
        self.drained.clear()

    def _install_signals(self) -> None:
        def on_signal(signum: int, _frame: object) -> None:
            if not self.stop_requested:
                self.stop()   # the first: no new handler, the running ones finish
                return
            self.force_stop = True   # the second: end the running handlers at once
            abort = getattr(self.pool, "abort", None)
            if abort is not None:
                abort()
            self.wake.set()
            if self._in_write:
                raise KeyboardInterrupt   # a write blocked on a reader that does not read
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, on_signal)
            signal.signal(signal.SIGTERM, on_signal)

    def shutdown(self, wait_handlers: bool) -> None:
        """Stop handing out, persist offsets, release queue locks, leave the group. Batches
        in a pool sink finish and are committed first when ``wait_handlers``."""
        if self._shut_down:
            return
        self._shut_down = True
        self._run_calls()
        if self.pool is not None:
            if getattr(self.pool, "cancel_on_stop", False):
                # Batches queued for a handler thread but not started are handed back: a stop
                # starts no new handler.
                for fut in list(self.futures):
                    fut.cancel()
            abort = getattr(self.pool, "abort", None)
            if not wait_handlers and abort is not None:
                abort()   # end the running handlers (they are not counted as consumed)
            if wait_handlers or abort is not None:
                # The batches in handlers finish (or were ended), and what finished is committed.
                while self.futures:
                    self._collect(block=True)
            self.pool.shutdown(wait_handlers)
        try:
            self._persist(force=True)
        except StoreError as exc:
            self.warn(f"could not persist offsets at exit: {exc}")
        for key in list(self.locks):
            self._release_lock(key)
        if self.membership is not None:
            self.membership.leave()
        if self.dedup is not None:
            self.dedup.close()
        self.wake.close()
        self.stopped.set()

    def _run_calls(self) -> None:
        while True:
            try:
                fn = self._calls.get_nowait()
            except queue_mod.Empty:
                return
            fn()

    # -- the loop --------------------------------------------------------------------------
    def _loop(self) -> None:
        o = self.o
        from store.client.members import members_token
        next_rebalance = 0.0
        next_persist = time.monotonic() + o.persist_interval_s
        next_renew = time.monotonic() + RENEW_INTERVAL_S
        self.schedule_at = 0.0
        next_token = 0.0
        token = None
        streak = 0   # rebalances in a row that could not take every queue wanted
        while not self.stop_requested and self.fatal is None:
            self._run_calls()
            now = time.monotonic()
            if now >= next_token and not o.no_group:
                t = members_token(self.layout, o.group)
                if t != token:
                    token, next_rebalance = t, 0.0
                next_token = now + 5.0   # a backstop: a membership change wakes the loop
            if now >= next_rebalance:
                balanced = self._rebalance()
                # Waiting for a queue the previous owner is still handing over: look again
                # soon (50 ms), backing off to 0.5 s when it stays taken (overlapping
                # --strategy config members, a stuck holder whose lease runs down).
                streak = 0 if balanced else streak + 1
                next_rebalance = now + (o.rebalance_interval_s if balanced
                                        else min(0.5, 0.05 * (1.25 ** max(0, streak - 8))))
            if now >= next_persist:
                self._persist()
                self._check_reset()
                next_persist = now + o.persist_interval_s
            if self.locks and now >= next_renew:
                self._renew_locks()
                next_renew = now + RENEW_INTERVAL_S
            if now >= self.schedule_at:
                from store.log.schedule import deliver_due, next_due
                deliver_due(self.store)
                # until the next delayed message is due (a new one wakes the loop: every
                # level is at least a second, so 1 s is the longest it can wait past its time)
                due = next_due(self.store)
                wait_s = 5.0 if due is None else (due - int(time.time() * 1000)) / 1000
                self.schedule_at = now + min(1.0 if due is not None else 5.0, max(0.2, wait_s))
            self._settle_drops()
            worked = self._pull_all()
            worked |= self._dispatch_all()
            worked |= self._collect(block=False)
            self._retry_local()
            if self.urgent and now - self._last_persist >= self._persist_every_s:
                # Offsets reach the store at least once per pull batch of every queue: a crash
                # hands at most one pull batch per queue to a member a second time (in-process
                # sinks: see set_sink).
                self._persist()
            if o.exit_at_end and self._is_drained():
                self.drained.set()
            if self._done():
                break
            if worked:
                continue
            in_process = self._persist_every_s > 0
            if self.dirty and not o.no_group and (
                    not (self.futures and (in_process or self._per_message))
                    or (in_process and time.monotonic() - self._last_persist >= self._persist_every_s)):
                # Nothing to do: make what moved durable now. An in-process handler (a
                # per-message sink) is cheaper than the fsync, so while its batches run the
                # ``urgent`` rule and the persist interval see to it instead (in-process
                # sinks: at least once per ``persist_every_s`` while anything moved); a
                # handler that is a process spawn costs more than the fsync, and the
                # redelivery window after a crash stays what finished since the last completion.
                self._persist()
            if self._idle_check is not None:
                self._idle_check()   # stdout's reader went away while nothing was written: stop now
            due_at = min(next_rebalance, next_persist, self.schedule_at, next_token)
            if self.locks:
                due_at = min(due_at, next_renew)
            if self.dirty and in_process:
                due_at = min(due_at, self._last_persist + self._persist_every_s)
            if self.retry_later:
                due_at = min(due_at, min(r[0] for r in self.retry_later))
            if o.idle_timeout_s is not None:
                due_at = min(due_at, self.last_activity + o.idle_timeout_s)
            if self.wake.wait(max(0.0, due_at - time.monotonic())):
                changed = self.wake.changed
                if not o.no_group and self.layout.members_dir(o.group) in changed:
                    next_token = 0.0
                if self.layout.config_dir in changed and self._topics_changed():
                    # a topic made or changed (the retry topic, say); not every offset commit
                    # of every member, which also replaces a file in config/
                    next_rebalance = 0.0
                if self.layout.checkpoint in changed:
                    # new records: perhaps delayed ones (a retry sent back, a --delay send)
                    self.schedule_at = min(self.schedule_at, time.monotonic() + 0.2)

    def _done(self) -> bool:
        o = self.o
        if o.count is not None and self.consumed >= o.count:
            return True
        if o.idle_timeout_s is not None and time.monotonic() - self.last_activity >= o.idle_timeout_s:
            return not self.futures
        if o.exit_at_end and self._thread is None:
            return self.drained.is_set()
        return False

    def _is_drained(self) -> bool:
        if not self._rebalanced_once:
            return False
        for key, pq in self.pqs.items():
            end = self.end_snapshot.get(key, 0)
            if self.offsets.get(key, 0) < end or pq.cached():
                return False
        return not self.futures and not self.retry_later

    _rebalanced_once = False
    held_elsewhere: set[QueueKey] = set()

    # -- rebalance -------------------------------------------------------------------------
    def _rebalance(self) -> bool:
        """Bring the held queues in line with the allocation. False: try again soon."""
        from store.client.members import live_members
        o = self.o
        balanced = True
        members = None
        if self.locks:
            # An idle queue hands out no batch, so the per-batch check would notice a deleted
            # or broken lock only at the next renewal (20 s): check them all here too (one
            # stat each), so the queue is locked again within a rebalance interval.
            for key, lock in list(self.locks.items()):
                if key in self.pqs and not lock.is_valid():
                    if lock.held:
                        self.warn(f"the lock of {key[0]}/{key[1]} was not renewed in time; dropping the queue")
                    self._lose(key)
        self.held_elsewhere = set()
        if not o.broadcast:
            live = [m for m in live_members(self.layout, o.group, prune=True)
                    if o.topic in (m.record.get("topics") or [o.topic])]
            members = sorted({m.clientId for m in live} | {o.client_id})
            for m in live:
                if m.clientId != o.client_id:
                    self.held_elsewhere.update((str(q.get("topic")), int(q.get("queueId", -1))) for q in m.queues
                                               if isinstance(q, dict))
        wanted: set[QueueKey] = set()
        for t in self.topics:
            if not self.store.has_topic(t):
                continue
            mqs = queues_of(t, range(self.store.topic(t).queues))
            if o.broadcast or o.no_group:
                mine = mqs
            elif o.strategy == "config" and t == o.topic:
                cfg = queues_of(t, o.config_queues or [])
                mine = allocate("config", o.client_id, mqs, members or [], config_queues=cfg)
            else:
                strategy = "averagely" if o.strategy == "config" else o.strategy
                mine = allocate(strategy, o.client_id, mqs, members or [])
            wanted.update((mq.topic, mq.queue_id) for mq in mine)
        for key in [k for k in self.pqs if k not in wanted]:
            self._drop(key)
        locked: list[QueueKey] = []
        for key in sorted(wanted - set(self.pqs)):
            if key in self.dropping:
                balanced = False
                continue
            if not self._lock(key):
                balanced = False
                continue
            failpoint("rebalance-after-lock")
            locked.append(key)
        if locked:
            self._add(locked)
        self._rebalanced_once = True
        self._publish_queues()
        return balanced

    def _lock(self, key: QueueKey) -> bool:
        """Take a queue's lock (clustering members); False when another member holds it."""
        if self.locked:
            # The previous owner releases the queue's lock only after persisting the offset of
            # everything it delivered from it (``_settle_drops``), so the offset read after
            # this (``_add``) is where it stopped; a dead owner's lock is dropped by the OS at once.
            from store.client.qlocks import QueueLock
            t, q = key
            lock = QueueLock(self.layout, self.o.group, t, q, self.o.client_id, warn=self.warn)
            if not lock.try_acquire():
                return False
            self.locks[key] = lock
        return True

    def _add(self, keys: list[QueueKey]) -> None:
        """Start consuming queues whose locks were taken: their offsets read (one read of
        the table for them all), and the computed ones persisted in one commit."""
        stored = self._read_stored(keys)
        starts: dict[QueueKey, int] = {}
        computed: dict[QueueKey, int] = {}
        for key in keys:
            starts[key], is_computed = self._start_offset(key, stored.get(key, -1))
            if is_computed:
                computed[key] = starts[key]
        if computed:
            # A computed start is persisted at once so that a queue handed over before
            # anything was consumed continues where it started, not at a newer end.
            self._commit_offsets(computed, increase_only=True)
        for key, start in starts.items():
            pq = ProcessQueue(*key)
            pq.next_pull = start
            pq.max_seen = start - 1
            self.pqs[key] = pq
            self.offsets[key] = start
            self.persisted[key] = start

    def _start_offset(self, key: QueueKey, stored: int) -> tuple[int, bool]:
        """RocketMQ's computePullFromWhere: the stored offset, else first/last/timestamp
        (then True: the caller persists it)."""
        t, q = key
        o = self.o
        lo, hi = self.store.min_offset(t, q), self.store.max_offset(t, q)
        if stored >= 0:
            if stored < lo:
                self.warn(f"{t}/{q}: committed offset {stored} is no longer stored; starting at {lo}")
            return min(max(stored, lo), hi), False
        if names.is_retry_topic(t) or o.from_where == "first":
            start = lo
        elif o.from_where == "timestamp" and o.from_timestamp is not None:
            start = self.store.search_offset(t, q, o.from_timestamp)
        else:
            start = hi
        return start, True

    def _read_stored(self, keys: list[QueueKey]) -> dict[QueueKey, int]:
        if self.o.broadcast or self.o.no_group:
            return {(t, q): int(self.offset_store.read(t, q)) for t, q in keys}
        offsets: dict[QueueKey, int] = self.offset_store.read_group(self.o.group)
        return offsets

    def _drop(self, key: QueueKey) -> None:
        """Stop pulling a queue; release it once its in-flight batch is done."""
        pq = self.pqs.pop(key)
        pq.dropped = True
        self.dropping[key] = pq

    def _lose(self, key: QueueKey) -> None:
        """The queue lock is no longer ours (its file was deleted or replaced, or a renewal
        failed): stop handing out batches at once, and drop the queue like a rebalance does,
        so a batch still in a handler is committed rather than forgotten. Its offset is then
        persisted increase-only: everything below it was consumed by us, and a new holder
        that already moved further must not be set back (see ``_settle_drops``)."""
        pq = self.pqs.pop(key, None)
        if pq is None:
            return
        pq.dropped = True
        pq.lost = True
        self.dropping[key] = pq
        lock = self.locks.pop(key, None)
        if lock is not None:
            lock.release()  # a no-op on a lost lock; frees the descriptor otherwise

    def _settle_drops(self) -> None:
        settled = False
        for key, pq in list(self.dropping.items()):
            if pq.busy or pq.in_flight:
                continue  # the consume lock: never give a queue away mid-batch
            del self.dropping[key]
            # A lost queue's offset used to be thrown away with the queue, so the next holder
            # (often this very process, a rebalance later) started from the last periodic
            # persist and handed everything since then to the handler again.
            self._persist(force=True, only={key}, increase_only=True if pq.lost else None)
            failpoint("rebalance-before-unlock")
            self.offsets.pop(key, None)
            self._release_lock(key)
            settled = True
        if settled and self.membership is not None and self.membership.joined:
            self._publish_queues()

    def _publish_queues(self) -> None:
        """Tell the group which queues this member holds. A queue being dropped still counts
        until its offset is persisted: a concurrent-mode newcomer waits for that (``_add``)."""
        if self.membership is None:
            return
        held = set(self.pqs) | set(self.dropping)
        queues = [{"topic": t, "queueId": q} for t, q in sorted(held)]
        if queues == self.published_queues and self.membership.json_path.exists():
            # Liveness is the member's flock, not a heartbeat: rewriting an unchanged record
            # would only wake every member of the group (they watch its directory).
            return
        self.membership.update(queues=queues, heartbeatAt=int(time.time() * 1000))
        self.published_queues = queues

    def _release_lock(self, key: QueueKey) -> None:
        lock = self.locks.pop(key, None)
        if lock is not None:
            lock.release()

    def _renew_locks(self) -> None:
        for key, lock in list(self.locks.items()):
            if not lock.renew() and key in self.pqs:
                self.warn(f"lost the lock of {key[0]}/{key[1]}; dropping the queue")
                self._lose(key)

    # -- pulling ---------------------------------------------------------------------------
    def _pull_all(self) -> bool:
        worked = False
        # Raw and client-message pulls of several queues of a topic are read together
        # (pull_many): one read of the log serves them all. Not with --count, whose budget is
        # taken queue by queue.
        shared: dict[QueueKey, tuple[bool, int]] = {}
        for key, pq in self.pqs.items():
            if pq.full() or (self.o.orderly and pq.suspended_until > time.monotonic()):
                continue
            t, q = key
            # The retry topic is subscribed with '*' (RocketMQ): its messages passed the
            # filter when they were first delivered.
            tag_codes, tags = (None, None) if t != self.o.topic else (self.tag_codes, self.o.tags)
            raw = self.raw_fast and tag_codes is None and not pq.cached() and not pq.in_flight
            client = self.client_fast and tag_codes is None and not names.is_retry_topic(t)
            # The raw path caches nothing, so it may take what flow control allows a queue's
            # cache (1000 messages): fewer, larger pulls and writes. So may the path that builds
            # client messages from columns, up to what the cache has room for.
            want = PULL_THRESHOLD_COUNT if raw else PULL_THRESHOLD_COUNT - pq.cached() if client else PULL_BATCH
            if client and want < PULL_THRESHOLD_COUNT // 2 and pq.cached():
                # A pull costs about as much to set up as a few hundred messages cost to
                # check and build: a queue with more than half its cache still to consume
                # waits for a bigger pull (handlers finishing 200 messages at a time would
                # otherwise cause a pull of 200 each).
                continue
            if self.o.exit_at_end:
                # -e drains each queue up to its end at start and no further: what arrives
                # later is neither waited for nor taken (it stays for the next run).
                want = min(want, self.end_snapshot.get(key, 0) - pq.next_pull)
                if want <= 0:
                    continue
            elif pq.next_pull >= self.store.max_offset(t, q):
                continue   # nothing new: no need to look at retention either
            # retention may have removed what we were about to read (checked only when pulling)
            lo = self.store.min_offset(t, q)
            if pq.next_pull < lo:
                self.warn(f"{t}/{q}: offset {pq.next_pull} is no longer stored; moving to {lo}")
                pq.next_pull = lo
            if (raw or client) and self.o.count is None:
                lock = self.locks.get(key)
                if lock is None or lock.is_valid():
                    shared[key] = (raw, want)
                continue
            if raw:
                worked |= self._pull_raw(key, pq, want)
                continue
            if client:
                worked |= self._pull_client(key, pq, want)
                continue
            res = self.store.pull(t, q, pq.next_pull, want, tag_codes, tags)
            for qoff, why in res.damaged:
                self.warn(f"skipping damaged message {t}/{q}@{qoff}: {why} (run: mqctl store check)")
            if res.next_offset == pq.next_pull:
                continue
            worked = True
            fresh = [m for m in res.messages if m.queue_offset >= pq.next_pull]
            if self.dedup is not None and fresh:
                fresh = self._skip_duplicates(key, fresh)
            pq.put(fresh)
            pq.max_seen = max(pq.max_seen, res.next_offset - 1)
            pq.next_pull = res.next_offset
            if not pq.cached() and not pq.in_flight:
                self._set_offset(key, res.next_offset)
        if shared:
            worked |= self._pull_shared(shared)
        return worked

    def _pull_shared(self, plan: dict[QueueKey, tuple[bool, int]]) -> bool:
        """Raw and client-message pulls (``plan``: queue -> (raw, how many)), each topic's
        queues read together, window by window (:func:`~store.log.bulk.pull_many`), until
        every queue got what one pull of its own would have (its count, and 4 MiB) or no
        window serves it any more; what is left is pulled queue by queue."""
        worked = False
        left = {key: [want, PULL_MAX_BYTES] for key, (_raw, want) in plan.items()}
        for topic in sorted({k[0] for k in plan}):
            for raw in (True, False):
                keys = [k for k in plan if k[0] == topic and plan[k][0] == raw]
                while len(keys) > 1 and not self.stop_requested:
                    got = self.store.pull_many(topic, [(k[1], self.pqs[k].next_pull, left[k][0], left[k][1])
                                                        for k in keys], full=not raw)
                    if not got:
                        break
                    for key in keys:
                        c = got.get(key[1])
                        if c is None:
                            continue
                        pq = self.pqs[key]
                        nbytes = sum(map(len, c.bodies))
                        worked |= self._pull_raw(key, pq, 0, c) if raw else self._pull_client(key, pq, 0, c, nbytes)
                        left[key][0] -= len(c)
                        left[key][1] -= nbytes
                    keys = [k for k in keys if k[1] in got and left[k][0] > 0 and left[k][1] > 0
                            and k in self.pqs and self.pqs[k].next_pull < got[k[1]].max_offset]
                    # A raw read's bodies are views into its buffer: free it before the next
                    # read, which then reuses its memory instead of faulting in fresh pages.
                    del got, c
        for key, (raw, want) in plan.items():
            held = self.pqs.get(key)
            if held is None or left[key][0] < want or self.stop_requested:
                continue   # served (in part) by a shared read: the rest comes next turn
            worked |= self._pull_raw(key, held, want) if raw else self._pull_client(key, held, want)
        return worked

    def _pull_client(self, key: QueueKey, pq: ProcessQueue, want: int, pre: Columns | None = None,
                     nbytes: int | None = None) -> bool:
        """A pull for a sink that takes :class:`store.Message` objects: the records' columns
        (every record checked as by :meth:`Store.pull`), kept as they are; each message is
        built from them as it is handed out, its properties parsed only when read; no record is
        decoded on the way. ``pre``: the columns read already (:meth:`_pull_shared`), and
        ``nbytes`` their bodies' length."""
        t, q = key
        c = self.store.pull_records(t, q, pq.next_pull, want) if pre is None else pre
        for qoff, why in c.damaged:
            self.warn(f"skipping damaged message {t}/{q}@{qoff}: {why} (run: mqctl store check)")
        if c.next_offset == pq.next_pull:
            return False
        bodies = cast("list[bytes]", c.bodies)   # full reads copy the bodies out (no views)
        pq.put_rows(client_message.MessageRows(t, q, c.offsets, bodies, c.born, c.stored, c.phys, c.reconsume,
                                               c.props), sum(map(len, bodies)) if nbytes is None else nbytes)
        pq.max_seen = max(pq.max_seen, c.next_offset - 1)
        pq.next_pull = c.next_offset
        if not pq.cached() and not pq.in_flight:
            self._set_offset(key, c.next_offset)
        return True

    def _pull_raw(self, key: QueueKey, pq: ProcessQueue, want: int, pre: Columns | None = None) -> bool:
        """Raw bodies to stdout with nothing to filter or dedup: pull only the bodies (every
        record still checked) and write them at once; no Message, no process queue. The
        offset moves only after the write returned, as on the general path. ``pre``: the
        bodies read already (:meth:`_pull_shared`, which checked the lock)."""
        t, q = key
        res: BodiesResult | Columns
        if pre is None:
            want = min(want, self._budget())
            if want <= 0:
                return False
            lock = self.locks.get(key)
            if lock is not None and not lock.is_valid():
                return False  # the next rebalance drops the queue through the normal path
            res = self.store.pull_bodies(t, q, pq.next_pull, want, views=True)
        else:
            res = pre
        for qoff, why in res.damaged:
            self.warn(f"skipping damaged message {t}/{q}@{qoff}: {why} (run: mqctl store check)")
        if res.next_offset == pq.next_pull:
            return False
        if res.bodies:
            assert self.inline is not None
            self._in_write = True
            try:
                self.inline.write_raw(res.bodies)
            except BaseException:
                # A closed pipe or a second signal: the bodies whose whole line was written
                # (and, for a pipe, read) are consumed; the rest are not.
                done = self._completed(len(res.bodies))
                if done:
                    self.consumed += done
                    offs = list(res.offsets)
                    self._set_offset(key, offs[done] if done < len(offs) else res.next_offset)
                raise
            finally:
                self._in_write = False
            self.consumed += len(res.bodies)
            self.last_activity = time.monotonic()
        pq.max_seen = max(pq.max_seen, res.next_offset - 1)
        pq.next_pull = res.next_offset
        self._set_offset(key, res.next_offset)
        return True

    def _skip_duplicates(self, key: QueueKey, msgs: list[Message]) -> list[Message]:
        self.dedup.refresh()
        out = []
        for m in msgs:
            uk = m.uniq_key
            if uk and self.dedup.seen(uk):
                continue
            out.append(m)
        return out

    # -- dispatching -----------------------------------------------------------------------
    def _budget(self) -> int:
        if self.o.count is None:
            return 1 << 30
        return max(0, self.o.count - self.consumed - self._in_flight_count())

    def _in_flight_count(self) -> int:
        return sum(len(m) for _k, m in self.futures.values())

    def _dispatch_all(self) -> bool:
        worked = False
        sized = self._per_message and not self.o.orderly
        # per-message sinks: batches sized to the backlog of every queue held (spread over the
        # batches the sink may have out, or its ``spread``), one message each when little waits;
        # full batches while the queues hold more than ``spread`` of them (handed out or not):
        # every thread has a batch then, and a pull's worth cut in ``spread`` parts would only
        # cost more hand-overs (and commits)
        waiting = sum(len(p.msgs) - len(p.in_flight) for p in self.pqs.values()) if sized else 0
        spread = self._spread
        if sized and self.pool is not None and sum(len(p.msgs) for p in self.pqs.values()) >= spread * self.pool.batch:
            sized = False
        for key, pq in list(self.pqs.items()):
            if self.stop_requested or self.fatal is not None:
                break
            while True:
                budget = self._budget()
                if budget <= 0:
                    return worked
                if self.pool is not None and len(self.futures) >= self.pool.max_in_flight:
                    return worked
                n = min(budget, self.pool.batch if self.pool is not None else 1024)
                if sized:
                    assert self.pool is not None
                    n = max(1, min(n, waiting // spread))
                if self.o.orderly and (pq.busy or pq.suspended_until > time.monotonic() or not pq.msgs):
                    break
                if not self.o.orderly and len(pq.in_flight) >= len(pq.msgs):
                    break
                lock = self.locks.get(key)
                # orderly: the lock file's identity checked before every batch; concurrent
                # (one message a batch): at most every 100 ms
                if lock is not None and not lock.is_valid(0 if self.o.orderly else 100):
                    if lock.held:  # (a deleted or replaced lock file was reported by qlocks)
                        self.warn(f"the lock of {key[0]}/{key[1]} was not renewed in time; dropping the queue")
                    self._lose(key)
                    break
                if self.o.orderly:
                    batch = pq.take(n)
                    pq.busy = True
                else:
                    batch = pq.next_batch(n)
                if not batch:
                    break
                worked = True
                waiting -= len(batch)
                self.handed_out += len(batch)
                if self.inline is not None:
                    self._consume_inline(key, pq, batch)
                else:
                    assert self.pool is not None
                    submit_locked = getattr(self.pool, "submit_locked", None)
                    if submit_locked is not None and lock is not None and lock.held:
                        # The handler inherits a descriptor of the queue's lock file: the OS
                        # lock stays held while any handler of this queue runs, so even if
                        # this process dies, no new owner starts the queue before its
                        # handlers are gone.
                        fut = submit_locked(batch, original_topic(batch[0]), lock.share_fd())
                    else:
                        fut = self.pool.submit(batch, original_topic(batch[0]))
                    fut.add_done_callback(lambda _f: self.wake.set())
                    self.futures[fut] = (key, batch)
                    if self.o.orderly:
                        break
        return worked

    def _present(self, m: Message) -> Message:
        topic = original_topic(m)
        return m if topic == m.topic else replace(m, topic=topic)

    def _consume_inline(self, key: QueueKey, pq: ProcessQueue, batch: list[Message]) -> None:
        # An exception (BrokenPipe) propagates: nothing of this batch is committed.
        assert self.inline is not None
        self._in_write = True
        try:
            self.inline.consume([self._present(m) for m in batch] if names.is_retry_topic(key[0]) else batch)
        except BaseException:
            # The leading messages whose whole line was written are consumed; the rest are not.
            done = self._completed(len(batch))
            if done:
                if self.o.orderly:
                    for m in batch[done:]:   # back in front, for whoever holds the queue next
                        pq.consuming.pop(m.queue_offset, None)
                        pq.msgs[m.queue_offset] = m
                self._succeeded(key, pq, batch[:done])
            raise
        finally:
            self._in_write = False
        self._succeeded(key, pq, batch)

    def _completed(self, n: int) -> int:
        """How many leading messages of the inline sink's last, failed call were delivered
        in full (its ``completed`` attribute; 0 for a sink that does not say)."""
        done = getattr(self.inline, "completed", 0)
        return max(0, min(n, done if isinstance(done, int) else 0))

    def _collect(self, block: bool) -> bool:
        if not self.futures:
            return False
        done = [f for f in self.futures if f.done()]
        if not done and block:
            done = list(cf.wait(list(self.futures), return_when=cf.FIRST_COMPLETED).done)
        for fut in done:
            key, batch = self.futures.pop(fut)
            pq = self.pqs.get(key) or self.dropping.get(key)
            try:
                ok, why = fut.result()
            except (HandlerError, cf.CancelledError) as exc:
                if isinstance(exc, HandlerError):
                    self.fatal = exc
                    self.stop_requested = True
                ok, why = None, str(exc)
            if pq is None:
                continue
            if isinstance(ok, list) and self.o.orderly and ok:
                # in order: a failure holds back the whole batch (retried in place)
                self._failed(key, pq, batch, ok[0][1])
            elif isinstance(ok, list):
                failed = dict(ok)
                good = [m for i, m in enumerate(batch) if i not in failed]
                if good:
                    self._succeeded(key, pq, good)
                for i, reason in failed.items():
                    self._failed(key, pq, [batch[i]], reason)
            elif ok is None:
                self._released(pq, batch)
            elif ok is not True and isinstance(ok, int) and 0 < ok < len(batch) and not self.o.orderly:
                # the iterator consumed the first ``ok`` messages and gave the rest back
                self._succeeded(key, pq, batch[:ok])
                self._released(pq, batch[ok:])
            elif ok:
                self._succeeded(key, pq, batch)
            else:
                self._failed(key, pq, batch, why)
        return bool(done)

    def _released(self, pq: ProcessQueue, batch: list[Message]) -> None:
        """Hand a batch back untouched: the next dispatch takes it again, in order."""
        if self.o.orderly:
            pq.make_again()
            pq.busy = False
        else:
            pq.release(batch)

    # -- results ---------------------------------------------------------------------------
    def _succeeded(self, key: QueueKey, pq: ProcessQueue, batch: list[Message]) -> None:
        if self.dedup is not None:
            self.dedup.record([m.uniq_key for m in batch if m.uniq_key])
        if self.o.orderly:
            off = pq.commit()
            pq.busy = False
        else:
            off = pq.remove(batch)
        if off >= 0:
            self._set_offset(key, off)
        self.consumed += len(batch)
        self.last_activity = time.monotonic()

    def _failed(self, key: QueueKey, pq: ProcessQueue, batch: list[Message], why: str) -> None:
        o = self.o
        self.last_activity = time.monotonic()
        if o.orderly:
            exhausted = []
            for m in batch:
                n = pq.retries.get(m.queue_offset, m.reconsume_times) + 1
                pq.retries[m.queue_offset] = n
                # RocketMQ counts local retries on the message itself (reconsumeTimes++), so
                # the next delivery shows MQ_RECONSUME_TIMES=n and a dead letter carries it.
                pq.consuming[m.queue_offset] = replace(m, reconsume_times=n)
                if self.max_reconsume is not None and n > self.max_reconsume:
                    exhausted.append(m)
            if exhausted and len(exhausted) == len(batch) and not o.broadcast:
                for m in batch:
                    dead_letter(self.store, o.group, m, m.reconsume_times)
                self.resent = True
                self.warn(f"{key[0]}/{key[1]}@{batch[0].queue_offset}: {why}; moved to {names.dlq_topic(o.group)}")
                self._succeeded(key, pq, batch)
                self.consumed -= len(batch)
                return
            self.warn(f"{key[0]}/{key[1]}@{batch[0].queue_offset}: {why}; retrying in place in {o.suspend_ms} ms")
            pq.make_again()
            pq.busy = False
            pq.suspended_until = time.monotonic() + o.suspend_ms / 1000
            return
        if o.broadcast:
            self.warn(f"{key[0]}/{key[1]}@{batch[0].queue_offset}: {why}; broadcast messages are not retried")
            self._succeeded(key, pq, batch)
            self.consumed -= len(batch)
            return
        for m in batch:
            try:
                # (a message built for a client sink is sent back as the record it came from)
                rec = self.store.get(m.commitlog_offset) if isinstance(m, client_message.Message) else m
                where = send_back(self.store, o.group, rec, self.max_reconsume or 0, o.retry_delay_ms)
            except StoreError as exc:
                self.warn(f"could not send {m.msg_id if isinstance(m, client_message.Message) else m.uniq_key} "
                          f"back ({exc}); retrying here in 5 s")
                pq.release([m])
                self.retry_later.append((time.monotonic() + 5, key, m))
                continue
            if where == "dlq":
                self.warn(f"{key[0]}/{key[1]}@{m.queue_offset}: {why}; reconsumed {m.reconsume_times} times, "
                     f"moved to {names.dlq_topic(o.group)}")
            else:
                self.warn(f"{key[0]}/{key[1]}@{m.queue_offset}: {why}; will be redelivered through "
                     f"{names.retry_topic(o.group)} (reconsume {m.reconsume_times + 1} of {self.max_reconsume})")
            self.resent = True
            # its copy is a delayed message: look for due ones soon (not at the idle backstop)
            self.schedule_at = min(self.schedule_at, time.monotonic() + 0.2)
            off = pq.remove([m])
            if off >= 0:
                self._set_offset(key, off)

    def _retry_local(self) -> None:
        if not self.retry_later:
            return
        now = time.monotonic()
        due = [r for r in self.retry_later if r[0] <= now]
        self.retry_later = [r for r in self.retry_later if r[0] > now]
        for _t, key, m in due:
            pq = self.pqs.get(key)
            if pq is not None:
                self._failed(key, pq, [m], "retry after a failed send-back")

    # -- offsets ---------------------------------------------------------------------------
    def _set_offset(self, key: QueueKey, off: int) -> None:
        if key in self.pqs or key in self.dropping:
            if self.o.orderly or off > self.offsets.get(key, -1):
                self.offsets[key] = off
                self.dirty.add(key)
                if off - self.persisted.get(key, off) >= self._persist_lag:
                    self.urgent = True

    def _commit_offsets(self, offsets: dict[QueueKey, int], increase_only: bool) -> set[str]:
        if self.resent:
            # Offsets past messages sent to the retry topic or the DLQ are durable only after
            # those copies are: else a power cut could keep the offset and lose the message.
            self.store.sync_written()
            self.resent = False
        if self.o.broadcast:
            for (t, q), off in offsets.items():
                self.offset_store.update(t, q, off, increase_only=increase_only)
            self.offset_store.persist(set(self.pqs) | set(self.dropping) | set(offsets))
            return set()
        skipped: set[str] = self.offset_store.commit(self.o.group, offsets, increase_only=increase_only,
                                                     expected_epochs=self.epochs)
        return skipped

    def _persist(self, force: bool = False, only: set[QueueKey] | None = None,
                 increase_only: bool | None = None) -> None:
        keys = {k for k in self.dirty if only is None or k in only}
        if not keys and not force:
            return
        offsets = {k: self.offsets[k] for k in keys if k in self.offsets}
        failpoint("offsets-before-persist")
        if increase_only is None:
            increase_only = not self.o.orderly
        lost = {k: v for k, v in offsets.items() if k in self.dropping and self.dropping[k].lost}
        skipped = set()
        if lost and not increase_only:
            # Never set back a queue whose lock we lost: someone else may hold it now.
            skipped |= self._commit_offsets(lost, increase_only=True)
            offsets = {k: v for k, v in offsets.items() if k not in lost}
        skipped |= self._commit_offsets(offsets, increase_only=increase_only)
        failpoint("offsets-after-persist")
        self.dirty -= keys
        self.persisted.update(offsets)
        self.urgent = False
        self._last_persist = time.monotonic()
        if skipped:
            self._reload_after_reset(skipped)

    def _check_reset(self) -> None:
        """An idle member learns of ``offsets reset --force`` here, not only when it next
        commits: compare the reset epochs of the topics it holds."""
        if self.o.broadcast:
            return
        snap = self.offset_store.snapshot(self.o.group)
        moved = {t for t in self.topics if snap.epochs.get(t, 0) != self.epochs.get(t, 0)}
        if moved:
            self._reload_after_reset(moved)

    def _reload_after_reset(self, topics: set[str]) -> None:
        """Offsets were reset while we ran (``offsets reset --force``): take the new ones."""
        snap = self.offset_store.snapshot(self.o.group)
        self.epochs = dict(snap.epochs)
        for key in [k for k in self.pqs if k[0] in topics]:
            self.warn(f"offsets of {key[0]}/{key[1]} were reset; continuing from {snap.offsets.get(key, 0)}")
            self.pqs.pop(key).dropped = True
            self.offsets.pop(key, None)
            self.dirty.discard(key)
            self._release_lock(key)
