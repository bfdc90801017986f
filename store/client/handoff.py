"""The hand-over between a consumer's loop thread and the thread iterating
:meth:`store.Consumer.messages`: the pool sink whose futures the iterating thread resolves, the
batches as the user sees them, the pulls the iterating thread runs itself (:func:`feed`), and
the drained event that wakes the iterating thread."""
from __future__ import annotations

import _signal
import concurrent.futures as cf
import operator
import queue as queue_mod
import signal
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

from store.client.message import Message, MessageRows
from store.client.sinks import Outcome
from store.errors import UsageError

if TYPE_CHECKING:
    from store.client.runtime import ConsumerRuntime
    from store.client.stage import Stage
    from store.log.offsets import QueueKey

PERSIST_EVERY_S = 0.5    # in-process consumers persist offsets on lag at most this often
_ALL_SIGNALS = signal.valid_signals()
# (the C function: signal.pthread_sigmask's wrapper makes an enum of each of ~60 signals in the
# mask it returns, ~0.5 ms a call; this one returns them as they are, ~10 us)
_sigmask = _signal.pthread_sigmask


def as_client_messages(batch: Sequence[Any], topic: str) -> Sequence[Message]:
    """A batch as the user sees it: records converted (``topic`` shown for a retry-topic
    copy); rows of a pull's columns (:class:`MessageRows`, a message built as each is read)
    and messages as they are."""
    if isinstance(batch, MessageRows):
        return batch
    if batch and batch[0].__class__ is Message and batch[-1].__class__ is Message:
        return batch   # (a queue's cache holds one kind: what its pulls make)
    return [m if m.__class__ is Message else Message.from_record(m, topic) for m in batch]


def walk_batch(msgs: Sequence[Message], positions: Iterator[int]) -> Iterator[Message]:
    """The messages of a batch at the indexes ``positions`` gives (a ``range`` iterator, whose
    length hint then tells the caller where it is), rows built one at a time."""
    return msgs.walk(positions) if isinstance(msgs, MessageRows) else map(msgs.__getitem__, positions)


class Hand:
    """The batch in an iterator's hand (sync or asyncio): its future, its messages, and where
    the loop is in it, which is what the ``range`` iterator it walks has left: nothing is
    counted per message. The messages before the one in hand are consumed (the loop asked for
    the one after each); :meth:`settle` resolves the future when the loop leaves the batch."""

    __slots__ = ("cut", "fut", "msgs", "total", "walk")

    def __init__(self, fut: cf.Future[Any], msgs: Sequence[Message]) -> None:
        self.fut = fut
        self.msgs = msgs
        self.total = len(msgs)
        self.walk: Iterator[int] = iter(range(self.total))
        self.cut = False   # its queue was given away: the loop leaves it after the message in hand

    def messages(self) -> Iterator[Message]:
        return walk_batch(self.msgs, self.walk)

    def at(self) -> int:
        """The index of the message in hand (-1 before the first is given). Only grows, and
        may be read from any thread: the member's loop reads it (:meth:`InHand.progress`)."""
        return self.total - operator.length_hint(self.walk) - 1

    def settle(self, commit: bool) -> None:
        """Resolve the batch: with ``commit`` the message in hand counts as consumed (the loop
        asked for the next one, or left normally), else it is delivered again, with the rest."""
        fut = self.fut
        if fut.done():
            return
        total = self.total
        done = self.at() + (1 if commit else 0)
        try:
            fut.set_result((True, "") if done >= total else (None, "released") if done <= 0
                           else (done, "partly consumed"))
        except cf.InvalidStateError:  # settled by another thread (close() racing the loop)
            pass


class InHand:
    """An iterator's sink: the batch in the iterator's hand (set by the iterating code), and
    how far into it the loop got, for the member's loop."""

    hand: Hand | None = None
    emitted: tuple[Hand, int] | None = None   # the message in hand whose outputs commit_with took
    let_go_of: cf.Future[Any] | None = None   # the last batch let go after it was taken (let_go)

    def hold(self, fut: cf.Future[Any], msgs: Sequence[Message]) -> Hand:
        """(The iterating code.) The batch taken (:func:`taken`) is in hand now."""
        self.hand = hand = Hand(fut, msgs)
        if self.let_go_of is fut:   # (let go between its taking and now)
            hand.cut = True
        return hand

    def let_go(self, futures: dict[cf.Future[Any], tuple[QueueKey, Any, Any]],
               dropping: dict[QueueKey, Any]) -> bool:
        """(The member's loop.) Hand back what this sink has out (``futures``: the dispatcher's,
        each with its queue and the process queue it came out of) of the queues being given away
        (``dropping``): the batches not taken up yet at once (cancelled: released when
        collected), and the one in hand when the loop asks for the message after the one in
        hand, which is then consumed (``Hand.cut``). Their new owner delivers the rest from the
        committed offset, without waiting for the loop to walk what was read ahead of them.
        True if a batch is out of those queues."""
        out = [f for f, (key, pq, _m) in futures.items() if dropping.get(key) is pq]
        for fut in out:   # (all first: one taken up meanwhile is let go in hand, below)
            fut.cancel()
        for fut in out:
            if not fut.done():   # taken up (:func:`taken`): in hand, or about to be (hold)
                self.let_go_of = fut
                hand = self.hand
                if hand is not None and hand.fut is fut:
                    hand.cut = True
        return bool(out)

    def progress(self) -> tuple[cf.Future[Any], int] | None:
        """(The member's loop, any thread.) The batch in hand and how many of its messages are
        consumed so far (a number that only grows, and that the batch's outcome, when it comes,
        counts too): its offsets are committed while the batch is still in hand, so a long one
        (a slow loop body) does not hold back the group's offsets until its end."""
        hand = self.hand
        return None if hand is None else (hand.fut, hand.at())

    def commit_with(self, stage: Stage | None, outputs: Any) -> None:
        """An exactly-once stage's iterator: ``outputs`` of the message in hand, written with
        its offset when it is committed (``Consumer.commit_with``, ``AsyncConsumer``'s)."""
        hand = self.hand
        if stage is None or hand is None or hand.at() < 0:
            raise UsageError("commit_with() is for the message in hand of messages(to=TOPIC)")
        at = hand.at()
        if self.emitted is not None and self.emitted[0] is hand and self.emitted[1] == at:
            # (a second call would silently replace the first's outputs: one commit per message)
            raise UsageError("commit_with() was already called for the message in hand: its outputs "
                             "are given once, all together")
        stage.emit(hand.msgs[at], outputs)
        self.emitted = (hand, at)


def taken(item: tuple[cf.Future[Any], Sequence[Message]] | None) -> bool:
    """Whether the iterating code may take up ``item`` (a nudge, None, is always taken): its
    future is marked running, so the member's loop no longer cancels it (``let_go``); False
    when it was cancelled (its queue was given away: it is handed back, never given)."""
    return item is None or (not item[0].done() and item[0].set_running_or_notify_cancel())


class IteratorSink(InHand):
    """The pool sink behind :meth:`Consumer.messages`: each batch becomes a future that the
    iterating thread resolves once it has walked it: consumed when the loop asked for the
    message after the batch's last, partly consumed (the first k) when the loop stopped inside
    it, released when nothing of it was; while it is in hand, the member's loop commits what
    the loop consumed of it (:meth:`InHand.progress`). Orderly batches are one message (their
    queue is committed or retried as a whole)."""

    client_messages = True               # batches of store.Message, built from columns
    cache_bytes = 0                      # what its pulls keep in memory, all queues (see Puller)
    persist_every_s = PERSIST_EVERY_S    # (see OffsetKeeper.pace)
    feeds_itself = True                  # a batch settled wakes no loop: the iterator pulls (feed)

    def __init__(self, prefetch: int, batch: int) -> None:
        self.max_in_flight = prefetch
        self.batch = batch
        # (None: a nudge, see wake_reader)
        self.handoff: queue_mod.SimpleQueue[tuple[cf.Future[Any], Sequence[Message]] | None] = queue_mod.SimpleQueue()

    def submit(self, batch: list[Any], topic: str) -> cf.Future[Outcome]:
        fut: cf.Future[Outcome] = cf.Future[Any]()
        self.handoff.put((fut, as_client_messages(batch, topic)))
        return fut

    def get(self, timeout: float | None) -> tuple[cf.Future[Any], Sequence[Message]] | None:
        """The next batch, or None after ``timeout`` s (None: no limit, 0: none) or a
        :meth:`wake_reader`."""
        try:
            item = self.handoff.get(timeout=timeout) if timeout != 0 else self.handoff.get_nowait()
            while not taken(item):   # (cancelled: those of a queue given away, one after another)
                item = self.handoff.get_nowait()
        except queue_mod.Empty:
            return None
        return item

    fed = False   # the iterating thread ran the pulls (feed) since its last batch: now it waits
    feeder: int | None = None   # the thread in feed (take)
    after_feed: Callable[[], None] | None = None   # what a close() in the middle left to its end
    waiting = True   # the iterating thread waits for the member's loop (False: it walks or pulls)

    def take(self, rt: ConsumerRuntime, timeout: float | None) -> tuple[cf.Future[Any], Sequence[Message]] | None:
        """(The iterating thread.) The next batch. With none waiting, this thread runs the pulls
        that feed it itself (:func:`feed`), rather than wait for the member's thread to (a
        hand-over between two threads per batch cost more than the pulls); it waits for the
        member's loop (up to ``timeout`` s, None: no limit) only when they found nothing since
        its last batch. None: nothing, or a :meth:`wake_reader` (the caller looks why)."""
        self.waiting = False
        item = self.get(0)
        if item is None and not self.fed:
            self.fed, self.feeder = True, threading.get_ident()
            try:
                feed(rt)
            finally:
                self.feeder = None
                then, self.after_feed = self.after_feed, None
                if then is not None:
                    then()
            item = self.get(0)
        elif item is None:
            self.waiting = True   # (the member's loop feeds it meanwhile: see Dispatcher.reader_feeds)
            # a turn it took since this thread's pulls (for a message stored meanwhile, say)
            # left them to this thread: one more, that sees it wait
            rt.wake.set()
            try:
                item = self.get(timeout)
            finally:
                self.waiting = False
        if item is not None:
            self.fed = False
        return item

    def wake_reader(self) -> None:
        """Make the iterating thread's wait for a batch return now (it then looks at why)."""
        self.handoff.put(None)

    def release_all(self) -> None:
        woken = False
        while True:
            try:
                item = self.handoff.get_nowait()
            except queue_mod.Empty:
                if woken:   # (a wake-up taken out with the batches: a reader about to wait needs it)
                    self.handoff.put(None)
                return
            if item is None:
                woken = True
                continue
            fut, _m = item
            if not fut.done():
                fut.set_result((None, "released"))

    def shutdown(self, wait: bool) -> None:
        self.release_all()


class DrainedEvent(threading.Event):
    """An event set by the member's loop that also wakes the iterating thread if it waits for a
    batch, so the iteration ends at once: an ``exit_at_end`` iteration's drained event, and the
    end of the member's loop."""

    def __init__(self, wake: Callable[[], None]) -> None:
        super().__init__()
        self._wake = wake

    def set(self) -> None:
        if not self.is_set():   # (the loop thread sets it on every turn while drained)
            super().set()
            self._wake()


def feed(rt: ConsumerRuntime) -> bool:
    """(The iterating thread, every batch handed to it walked.) The part of a turn of the
    member's loop that feeds the iterator, run in the iterating thread under the turns' lock:
    the batches it settled collected, the held queues pulled, batches handed out to it. True
    if a batch may be waiting.

    A turn of the member's own thread for every batch settled cost a hand-over between two
    threads that take turns at the GIL: on a busy machine each thread waits for a core of its
    own at each hand-over. The member's thread keeps what must go on while the loop body runs
    (rebalances, queue lock renewals, offset commits, the progress of a batch held long): it
    is woken here when what was just done calls for a look before its wait ends (nothing
    came: what moved is committed now, the end is seen; a queue is dropped; or batches are out
    or offsets moved while it sleeps longer than a persist interval).

    In the main thread, signals wait until it is done: a handler that closes the consumer
    (it joins the member's thread, which waits for this lock) or raises KeyboardInterrupt
    comes between two of its steps, never inside a pull (the member's thread takes no signal:
    ``ConsumerRuntime.start``). Where another thread of the program takes one, its handler runs in the
    middle all the same: a close() it calls is then finished when the feed ends (``take``)."""
    main = threading.current_thread() is threading.main_thread()
    with rt.turn_lock:   # (waited for with signals let in: a turn of the member's may take long)
        masked = _sigmask(signal.SIG_BLOCK, _ALL_SIGNALS) if main else None
        try:
            return _feed(rt)
        finally:
            if masked is not None:
                _sigmask(signal.SIG_SETMASK, masked)


def _feed(rt: ConsumerRuntime) -> bool:
    """(:func:`feed`, under the turns' lock.)"""
    state, keeper, dispatcher = rt.state, rt.keeper, rt.dispatcher
    if state.stop_requested or state.fatal is not None or rt.loop_ended.is_set():
        return False
    try:
        rt.run_calls()   # (a new messages() loop's settings first: exit_at_end, its ends)
        dispatcher.collect(block=False)
        worked = rt.puller.pull_all()
        worked |= dispatcher.dispatch_all()
    except Exception as exc:  # noqa: BLE001 - as in the member's thread: the member stops
        if state.fatal is None:
            state.fatal = exc
        rt.stop()
        return False
    if rt.o.exit_at_end and rt.is_drained():
        rt.drained.set()
    held = rt.held
    if (not worked or held.dropping or held.retake or (
            rt.asleep_until > time.monotonic() + keeper.every_s and (dispatcher.futures or keeper.dirty))):
        rt.wake.set()
    return worked
