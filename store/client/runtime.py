"""The consumer runtime: one member of a consumer group, for ``mqctl consume`` and the Python API.

One loop does what RocketMQ's client threads do, in turn: rebalance (when the group's membership, its topics or
a queue lock it waits for changes), pull each held queue into its process queue, hand batches to the sink, apply
results (commit, retry, suspend, dead-letter), persist offsets, renew queue locks, and run the delay scheduler.

An idle member does nothing on a timer where the store's change notification (inotify) tells it what changed: no
periodic rebalance or membership look, no offsets look, no delay scheduler pass; only its queue locks' leases
are renewed, and its proof that it runs (``members.py``), once per ``IDLE_RENEW_S``. Where a path is polled (no
inotify, a network file system: a dead member's lock changes no file there) the looks run every few seconds as
backstops, ``--rebalance-interval`` among them.

:class:`ConsumerRuntime` owns the loop and the member's life (join, signals, stop, leave); each job of a turn is a part
of its own, with its own state:

* :class:`~store.client.rebalance.Rebalancer` — queues held (:class:`~store.client.holding.Holdings`), locks, record;
* :class:`~store.client.pulling.Puller` — the held queues pulled into their process queues;
* :class:`~store.client.dispatch.Dispatcher` — batches to the sink (:mod:`store.client.sinks`), what comes back;
* :class:`~store.client.offset_keeper.OffsetKeeper` — start and consumed offsets, when persisted; resets;
* :class:`~store.client.retry.Retrier` — failed batches: retried in place, sent back, or dead-lettered.

Orderly mode adds RocketMQ's three locks: the queue lock across processes (``qlocks``), taken before a queue is
added and checked before every batch; one batch at a time per queue inside this process (``ProcessQueue.busy``);
and the drop rule that a queue is released only after its in-flight batch finished and its offset was persisted.

The loop runs in the thread that calls :meth:`ConsumerRuntime.run` (``mqctl consume``, push consumers), in a thread of
its own (:meth:`ConsumerRuntime.start`, the iterator), or in an event loop that drives :meth:`ConsumerRuntime.turns`
(``store/client/aio_driver.py``). Every other thread talks to it through :meth:`ConsumerRuntime.call_soon` and
:meth:`ConsumerRuntime.stop` only, but for the iterator's thread, which runs its own pulls under the turns' lock
(``handoff.feed``)."""
from __future__ import annotations

import math
import queue as queue_mod
import threading
import time
from pathlib import Path

from store import names
from store.client import stopsignals
from store.client.clocks import DelayClock, MemberClock, backstop
from store.client.configwatch import ConfigWatch
from store.client.dispatch import Dispatcher
from store.client.holding import Holdings
from store.client.leases import IDLE_RENEW_S, RENEW_INTERVAL_S
from store.client.offset_keeper import OffsetKeeper
from store.client.options import ConsumeOptions, RunState
from store.client.pulling import Puller
from store.client.rebalance import Rebalancer
from store.client.retry import Retrier
from store.client.rules import check_flush
from store.errors import StoreError, UsageError
from store.log.messagestore import Store
from store.log.offsets import Warn

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Any, Callable, Generator

    from store.client.dedup import DedupLog
    from store.client.sinks import InlineSink, PoolSink
    from store.client.stage import Stage


class ConsumerRuntime:
    """One member of a consumer group (see the module docstring)."""

    def __init__(self, store: Store, opts: ConsumeOptions, sink: InlineSink | PoolSink | None = None,
                 warn: Warn | None = None) -> None:
        self.store = store
        self.o = opts
        self.layout = store.layout
        self.warn = warn = warn or store.warn   # (by default the handle's: the library's channel, store.errors)
        self.topics = [opts.topic]
        if not opts.broadcast:  # RocketMQ subscribes every clustering member to its retry topic
            self.topics.append(names.retry_topic(opts.group))
        self.state = RunState()
        self.force_stop = False        # a second SIGINT/SIGTERM: end handlers at once
        self.on_stopping: Callable[[int], None] | None = None   # the first signal: told how many run
        self.stopping_unsaid = False   # ... and not told yet (none counted then: stopsignals.say_stopping)
        self.delays = DelayClock(store)
        # Woken by the store itself (inotify, or polling where there is none): a new batch, a
        # member joining or leaving, an offset reset, a queue lock released. ``set()`` from a
        # thread or a signal handler wakes it too, as the threading.Event it replaces.
        from store.watch import Watcher, consumer_paths
        self.wake = Watcher(consumer_paths(store.layout, opts.group)
                            if opts.group and not opts.no_group else [(store.layout.checkpoint, "file")],
                            lazy=True)
        self.held = Holdings()
        self.keeper = OffsetKeeper(store, opts, self.held, self.topics, warn)
        self.stage: Stage | None = None
        if opts.to is not None:
            self.set_stage(opts.to, "sync" if opts.to_sync else "async")
        self.keeper.on_commit = self.wake.set   # a commit written by the writer thread is done
        self.rebalancer = Rebalancer(store, opts, self.held, self.keeper, self.topics, warn)
        self.retrier = Retrier(store, opts, self.keeper, warn, self.delays.soon)
        self.retrier.set_retries(opts.max_reconsume, opts.retry_delay_ms, opts.suspend_ms)
        self.dispatcher = Dispatcher(opts, self.state, self.held, self.keeper, self.retrier, warn, self.wake.set)
        self.puller = Puller(store, opts, self.state, self.held, self.keeper, self.dispatcher, warn)
        self.dedup: DedupLog | None = None
        self.drained = threading.Event()   # exit_at_end: the held queues are drained
        self.stopped = threading.Event()   # the member has left (shutdown)
        self.loop_ended = threading.Event()  # the loop of :meth:`start` has ended
        self._calls: queue_mod.SimpleQueue[Callable[[], None]] = queue_mod.SimpleQueue()
        self.turn_lock = threading.RLock()   # held by a turn of _loop, and by handoff.feed
        self.asleep_until = 0.0   # (under it) when _loop's wait after its turn ends; 0: none
        self._thread: threading.Thread | None = None
        self._set_up = False
        self._shut_down = False
        if sink is not None:
            self.set_sink(sink)

    @property
    def stop_requested(self) -> bool:
        """Whether the member was asked to stop (or stops on an error)."""
        return self.state.stop_requested

    @property
    def fatal(self) -> BaseException | None:
        """What stopped the member abnormally, if anything."""
        return self.state.fatal

    def set_sink(self, sink: InlineSink | PoolSink) -> None:
        """Where batches go from now on. Only while no batch is out (before the loop runs, or between two
        :meth:`serve` calls). A sink's ``persist_every_s`` paces the offset commits (``OffsetKeeper.pace``)."""
        self.dispatcher.set_sink(sink)

    def set_stage(self, to: str, flush: str = "async") -> Stage:
        """Make this member an exactly-once stage writing to ``to`` (``stage.py``) before it holds any queue;
        ``flush`` "sync": each batch fsynced before it counts. (Its module is loaded for a stage only.)"""
        from store.client.stage import Stage, check_stage
        check_flush(flush)
        sync = flush == "sync"
        if self.stage is not None and (self.stage.to, self.stage.sync) == (to, sync):
            return self.stage
        if self.held.pqs or self.held.dropping:
            raise UsageError("a consumer becomes an exactly-once stage before it consumes")
        o = self.o
        check_stage(self.store, to, broadcast=o.broadcast, dedup=o.dedup, no_group=o.no_group, consumed=o.topic)
        o.to, o.to_sync = to, sync
        self.stage = self.keeper.stage = Stage(self.store, o.group, to, sync, o.orderly)
        self.keeper.threaded = False   # a stage's commits are its writes: in the loop's thread
        return self.stage

    def emit(self, m: Any, outputs: Any) -> None:
        """An exactly-once stage's outputs for input ``m`` (bytes, str, dicts, or a list of them), written with
        the offset that settles ``m`` (``stage.py``); any thread."""
        if self.stage is None:
            raise UsageError("emit() is for an exactly-once stage (a consumer with to=TOPIC / --to)")
        self.stage.emit(m, outputs)

    def copy_sink(self) -> InlineSink:
        """The sink of a stage that copies every message to its output topic."""
        if self.stage is None:
            raise UsageError("a copy sink is for an exactly-once stage (to=TOPIC / --to)")
        from store.client.stage import CopySink
        return CopySink(self.stage)

    # -- lifecycle -------------------------------------------------------------------------
    def serve(self) -> None:
        """Run the loop in this thread until a stop condition (``exit_at_end`` drained, ``count``,
        ``idle_timeout_s``) and stay a member, offsets persisted; or, when stopped (:meth:`stop`) or on an
        error, shut down and leave (re-raising the error)."""
        self._loop_or_leave()
        if self.state.halted():
            self.shutdown(wait_handlers=True)
            if self.fatal is not None:
                raise self.fatal
            return
        while self.dispatcher.futures:
            self.dispatcher.collect(block=True)
        self.keeper.persist(force=True)

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
        stopped the member abnormally, and :class:`~store.errors.HandlerError` when it ended on
        its own after giving up on a message."""
        if self.o.install_signals:   # first: a signal while joining is a graceful stop too
            stopsignals.install(self)
        self._loop_or_leave()
        self.shutdown(wait_handlers=True)
        if self.fatal is not None:
            raise self.fatal
        self.retrier.report_waiting()
        if self.force_stop:
            raise KeyboardInterrupt   # a second signal: exit 130, what finished is committed
        self.retrier.report_given_up(self.state.stop_requested)
        return 0

    def start(self) -> None:
        """Run the loop in a thread of its own until :meth:`stop` (``loop_ended`` is set when
        it has ended; a failure is kept in ``fatal``). The owner then calls :meth:`shutdown`."""
        if not self._set_up:
            self.setup()

        def main() -> None:
            import _signal  # (this thread takes no signal: see handoff.feed)
            _signal.pthread_sigmask(_signal.SIG_BLOCK, _signal.valid_signals())
            try:
                self._loop()
            except BaseException as exc:  # noqa: BLE001 - handed to the owner via ``fatal``
                if self.state.fatal is None:
                    self.state.fatal = exc
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
        self.state.stop_requested = True
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
            raise UsageError(f"queue {missing[0]} does not exist: topic {o.topic!r} has queues 0-{cfg.queues - 1}")
        self.keeper.open()
        if not o.no_group:
            if o.dedup:
                from store.client.dedup import DedupLog
                self.dedup = self.puller.dedup = self.dispatcher.dedup = DedupLog(self.layout, o.group,
                                                                                 max_entries=200_000)
                # (concurrent mode: looked at again as a handler starts; orderly: at the pull only)
                self.held.dedup = None if o.orderly else self.dedup
            try:
                self.rebalancer.join()
            except BaseException:
                if self.dedup is not None:
                    self.dedup.close()
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
        self.puller.snapshot_ends(self.topics)
        self.drained.clear()

    def shutdown(self, wait_handlers: bool) -> None:
        """Stop handing out, persist offsets, release queue locks, leave the group. Batches
        in a pool sink finish and are committed first when ``wait_handlers``. Interrupted
        meanwhile (Ctrl-C while the handlers finish): it waits no more, and what finished is
        committed and the group left all the same, before the KeyboardInterrupt goes on (the
        messages of the handler calls still running are delivered again, but the locks of their
        queues are released only as those calls end: ``holding.py``)."""
        if self._shut_down:
            return
        self._shut_down = True
        self.state.stop_requested |= not wait_handlers   # (a running call starts no more of its batch)
        try:
            with self.turn_lock:   # (an iterating thread's pulls are over, and pull no more)
                self.run_calls()
            stopsignals.say_stopping(self)
            self.dispatcher.finish(wait_handlers)
        except BaseException:
            self.state.stop_requested = True
            self.dispatcher.finish(False)
            raise
        finally:
            self._leave()

    def _leave(self) -> None:
        failed: StoreError | None = None
        try:
            self.keeper.persist(force=True)
            self.keeper.finish_stage()
        except StoreError as exc:
            failed = exc
            if self.stage is not None and self.state.fatal is None:
                self.state.fatal = exc   # a stage's outputs were not written: not a success
        finally:
            try:
                self.keeper.close()
            except StoreError as exc:   # (after a failed persist: the same full disk, said once)
                failed = failed or exc
        if failed is not None:
            self.warn(f"could not persist offsets at exit: {failed}")
        self.rebalancer.leave(self.dispatcher.futures)   # (locks of queues with calls running: kept)
        if self.dedup is not None:
            self.dedup.close()
        self.wake.close()
        self.stopped.set()

    def run_calls(self) -> None:   # (the loop's turn, or handoff.feed)
        while True:
            try:
                fn = self._calls.get_nowait()
            except queue_mod.Empty:
                return
            fn()

    # -- the loop --------------------------------------------------------------------------
    def _loop(self) -> None:
        """The loop of :meth:`turns`, waiting on the store's change notification in this thread."""
        turns, wake, lock, clock, keeper = self.turns(), self.wake, self.turn_lock, time.monotonic, self.keeper
        woke: bool | None = None   # (a generator's first send is None)
        try:
            while True:
                with lock:
                    due = turns.send(woke)  # type: ignore[arg-type]
                    self.asleep_until = 0.0 if due is None else clock() + due
                if due is not None and keeper.held_back and keeper.committing and not wake.started:
                    # a pull waits for the commit out, which wakes the loop once written (or failed): no watch set
                    # up (a -e run never pays for inotify, whose close takes 10-20 ms); a stuck commit: 0.25 s
                    woke = wake.wait_woken(min(due, 0.25))
                else:
                    woke = False if due is None else wake.wait(None if due == math.inf else due)
        except StopIteration:
            return

    def turns(self) -> Generator[float | None, bool, None]:
        """The loop as a generator, for a driver that waits its own way (an event loop): it
        yields None after a turn that did work (go on at once, send False) and otherwise the
        seconds to wait at most for a change of the store (``wake``; ``math.inf``: no limit,
        nothing is due on a timer); the driver sends back
        whether the wait was woken (a change or :meth:`stop`) rather than timed out, after
        ``wake.wait(0)`` has read what changed. It returns when the loop ends."""
        o, state, layout = self.o, self.state, self.layout
        held, keeper, rebalancer, dispatcher = self.held, self.keeper, self.rebalancer, self.dispatcher
        pull_all, dispatch_all, collect = self.puller.pull_all, dispatcher.dispatch_all, dispatcher.collect
        wake = self.wake
        inf = math.inf
        members_dir = layout.members_dir(o.group) if not o.no_group else None
        offsets_json, topics_epoch, checkpoint = layout.consumer_offset_json, layout.topics_epoch, layout.checkpoint
        config = ConfigWatch(wake, layout, offsets_json in wake.paths)
        next_rebalance = 0.0
        next_persist = backstop(time.monotonic() + o.persist_interval_s)
        reset_look = False    # the offsets file was replaced: look for a reset at next_persist
        last_renew = time.monotonic()
        delays = self.delays
        delays.at = 0.0
        members = MemberClock(layout, None if o.no_group else o.group, o.client_id)
        streak = 0   # rebalances in a row that could not take every queue wanted
        watched_locks: set[Path] = set()
        while not state.stop_requested and state.fatal is None:
            self.run_calls()
            now = time.monotonic()
            # Where a change may go unseen (polled paths), the looks below also run on timers.
            polled = wake.polls
            if now - last_renew >= (RENEW_INTERVAL_S if held.locks else IDLE_RENEW_S):
                # before anything else: a rebalance checks the locks, and a batch may be
                # handed out only within the client lease of the last renewal; the member
                # proves it is not stuck at the same time (and rejoins if it was: members.py)
                lost = bool(held.locks) and rebalancer.renew_locks()
                if rebalancer.beat() or lost:
                    next_rebalance = 0.0
                last_renew = now
            if config.topics_look(now) and rebalancer.topics_changed():
                next_rebalance = 0.0   # (config/ not watched while other members commit: configwatch)
            if now >= members.at and members.look(now, polled):
                next_rebalance, streak = 0.0, 0
            if now >= next_rebalance:
                balanced = rebalancer.rebalance()
                members.allocated_among(rebalancer.members_seen, now)
                # Waiting for a queue its previous owner still hands over: its lock file is watched (a
                # release wakes the loop); look again soon all the same, backing off to 0.5 s when it
                # stays taken (overlapping --strategy config members, a stuck holder whose lease runs down).
                streak = 0 if balanced else streak + 1
                if balanced:
                    next_rebalance = backstop(now + o.rebalance_interval_s) if polled else inf
                else:
                    next_rebalance = now + min(0.5, 0.05 * (1.25 ** min(max(0, streak - 8), 20)))
                watched_locks = rebalancer.watch_locks(self.wake, watched_locks)
            if now >= next_persist:
                if config.persist_look():   # config/ watched again: look at what it would have said
                    reset_look, next_rebalance = True, 0.0 if rebalancer.topics_changed() else next_rebalance
                keeper.persist()
                if reset_look or polled:
                    keeper.check_reset()
                reset_look = False
                next_persist = backstop(now + o.persist_interval_s)
            if now >= delays.at:
                delays.deliver(now)
            dispatcher.let_go()   # (an iterator's batches of the queues dropped handed back first)
            rebalancer.settle_drops()
            if keeper.committing:
                keeper.reap(wait=False)   # a commit done: the pulls it held back may go on
                if keeper.lag == 1 and keeper.urgent and not keeper.committing:
                    keeper.persist_lagging(time.monotonic())   # written while this turn delivers (room)
            feeds = dispatcher.reader_feeds()   # (an iterator walking its batches pulls for itself)
            worked = not feeds and (pull_all() | dispatch_all())
            worked |= collect(block=False)
            if self.retrier.retry_later:
                dispatcher.retry_due()
            if held.retake or (held.locks and not all(lock.held for lock in held.locks.values())):
                # a batch's lock check found a lock deleted or broken: drop the queue and take
                # it again as soon as it is let go (an idle queue's: at the next renewal)
                held.retake = False
                next_rebalance = 0.0
            if keeper.urgent:
                keeper.persist_lagging(now)
            if o.exit_at_end and self.is_drained():
                self.drained.set()
            if self._done():
                break
            if (worked and not feeds) or (keeper.held_back and keeper.writer.written):
                # (a pull waited for room a commit written just now made: its wake-up may have come first)
                yield None
                continue
            if keeper.dirty:
                keeper.persist_idle(bool(dispatcher.futures) and (keeper.every_s > 0 or dispatcher.per_message))
            if dispatcher.idle_check is not None:
                dispatcher.idle_check()   # stdout's reader went away while nothing was written: stop now
            due_at = 0.0 if held.retake else min(next_rebalance, delays.at, members.at, config.look_at, dispatcher.due)
            if keeper.dirty or reset_look or polled or keeper.unsettled():
                due_at = min(due_at, next_persist)
            if held.locks or rebalancer.locked:   # (a clustering member beats without queues too)
                due_at = min(due_at, last_renew + IDLE_RENEW_S)
            if keeper.dirty and keeper.every_s > 0 and not keeper.committing:
                due_at = min(due_at, keeper.last_persist + keeper.every_s)
            if self.retrier.retry_later:
                due_at = min(due_at, min(r[0] for r in self.retrier.retry_later))
            if o.orderly:   # a queue suspended after a failure is retried in place then
                due_at = min([due_at, *(pq.suspended_until for pq in held.pqs.values() if pq.suspended_until > now)])
            if dispatcher.idle_check is not None:
                # a pipe's reader that goes away changes no file: look at it every few seconds
                due_at = min(due_at, backstop(now + 5.0))
            if o.idle_timeout_s is not None and not dispatcher.futures:   # (a batch's end wakes the loop)
                due_at = min(due_at, dispatcher.last_activity + o.idle_timeout_s)
            while (yield max(0.0, due_at - time.monotonic())):
                changed = wake.changed
                if members_dir in changed:
                    members.changed()
                if topics_epoch in changed and rebalancer.topics_changed():
                    next_rebalance = 0.0   # a topic made or changed (the retry topic, say)
                if offsets_json in changed:
                    # replaced by the snapshots of every group's commits, and by a reset: look at it once
                    # per persist interval at most (one stat while nothing was reset), and
                    # not at once: another member's commit alone is no reason for a turn
                    reset_look = True
                    due_at = min(due_at, next_persist)
                    if not wake.woken:
                        config.commit_seen(getattr(keeper.offset_store, "last_written", None))
                hit = watched_locks & changed
                if hit and (any(rebalancer.lock_file(k) in hit for k in rebalancer.waiting_for) or any(
                        not lock.still_named() for lock in held.locks.values() if lock.path in hit)):
                    # a lock we wait for was released, or one we hold was deleted or broken
                    # (not merely renewed: our own renewals wake us too)
                    next_rebalance = 0.0
                if checkpoint in changed:
                    # new records: perhaps delayed ones (a retry sent back, a --delay send)
                    delays.soon()
                if not changed or wake.woken or next_rebalance == 0.0 or not changed <= {offsets_json, *(
                        lk.path for lk in held.locks.values())}:
                    break   # (a wake() from a thread, a signal, a call_soon: with or without changes)
                # only our own renewals' writes, or commits: nothing to do now, wait on

    def _done(self) -> bool:
        o = self.o
        if o.count is not None and self.dispatcher.consumed >= o.count:
            return True
        if o.idle_timeout_s is not None and time.monotonic() - self.dispatcher.last_activity >= o.idle_timeout_s:
            return not self.dispatcher.futures and not self.puller.backlog()
        return bool(o.exit_at_end) and self._thread is None and self.drained.is_set()

    def is_drained(self) -> bool:   # (exit_at_end: up to the ends snapshot, nothing out)
        # (nor while a queue allocated here is still held by its previous owner, handing it over)
        if not self.rebalancer.rebalanced_once or self.rebalancer.waiting_for:
            return False
        ends, offsets = self.puller.end_snapshot, self.keeper.offsets
        if any(offsets.get(key, 0) < ends.get(key, 0) or pq.cached() for key, pq in self.held.pqs.items()):
            return False
        return not self.dispatcher.futures and not self.retrier.retry_later
