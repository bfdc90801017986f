"""A :class:`store.Consumer`'s life as a member of its group: joined when it is first used
(``with``, :meth:`~store.Consumer.messages`, :meth:`~store.Consumer.run`), left when it is
closed, and left as well when the program drops it unclosed (garbage-collected, or still
alive when the process exits), so that a forgotten consumer does not keep its share of the
group's queues, unread, for the rest of the process.

:class:`Life` holds what joining and leaving take, apart from the consumer itself: the
``weakref.finalize`` that leaves for a dropped consumer holds it, and must not hold the
consumer (it would never be collected)."""
from __future__ import annotations

import os
import threading
from contextlib import contextmanager

from store.client.consumer_args import ids_in_use, ids_lock
from store.client.runtime import ConsumerRuntime
from store.errors import UsageError
from store.log.messagestore import Store

# Marks a thread of a consumer's run() pool as one that calls its handler (``life``: whose):
# a close() from a handler call does not wait for run() to return, as run() waits for that call.
IN_HANDLER = threading.local()

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Iterator

    from store.client.handoff import IteratorSink


class Life:
    """A consumer's member: its runtime, its store, its client id reserved in this process
    (``consumer_args.ids_in_use``), and how far it got."""

    def __init__(self, rt: ConsumerRuntime, store: Store, id_key: tuple[str, str, str]) -> None:
        self.rt, self.store, self.id_key = rt, store, id_key
        # (joining, starting and leaving, from whichever threads: one at a time; re-entrant
        # for a signal handler that closes the consumer in the thread that joins it)
        self.lock = threading.RLock()
        self.joined = False
        self.closed = False
        self.mode: str | None = None             # "iterate" or "run"
        self.sink: IteratorSink | None = None    # the iterator's (and the batch in hand: its ``hand``)
        self.serving = False                     # run() is running
        self.run_over: threading.Event | None = None   # (while run() runs: set once it has returned)
        self.run_thread: int | None = None              # (and the thread it runs in)
        self.starter: int | None = None   # the thread in a start (:meth:`starting`), if any
        self.pid = os.getpid()

    def join(self) -> None:
        """Join the group, unless done already (under :attr:`lock`). UsageError if closed;
        but in the start of ``run()`` or ``messages()`` (which looked at :attr:`closed` as it
        began), a close from a signal handler since then makes it return without joining: the
        caller looks at :attr:`closed` again and returns as the close would have it."""
        in_start = self.starter == threading.get_ident()
        with self.lock, self.starting():
            if in_start and self.closed:
                return
            if self.closed or self.rt.stopped.is_set():
                raise UsageError("this consumer is closed")
            if not self.joined:
                self.rt.setup()
                self.joined = True

    @contextmanager
    def starting(self, leaves: bool = True) -> Iterator[None]:
        """(Under :attr:`lock`.) A start in this thread: joining, and what ``run()`` and
        ``messages()`` set up before they consume. A close from a signal handler in this thread
        meanwhile (the SIGTERM handler of a program) must not leave in the middle of it (the
        start would go on with a member that has left, on a closed store): it marks the
        consumer closed and stops the runtime, and the member leaves once the start is done,
        here; with ``leaves`` False (``run()``), when the run it starts returns (:meth:`ran`),
        at once as it was stopped (or here, if it returns before it runs). (Nested starts: the
        outer one settles.)"""
        me = threading.get_ident()
        if self.starter == me:
            yield
            return
        self.starter = me
        done = False
        try:
            yield
            done = True
        finally:
            self.starter = None
            if self.closed and (leaves or not done or self.run_over is None):   # (run() not begun: no ran())
                self._leave(commit=False)

    def settle_in_hand(self, commit: bool) -> bool:
        """Resolve the batch in hand: with ``commit`` the message in hand counts as consumed
        (the loop asked for the next one, or left the ``with`` block normally), else it is
        delivered again, with the rest of its batch."""
        sink = self.sink
        hand = None if sink is None else sink.hand
        if sink is None or hand is None:
            return False
        sink.hand = None
        hand.settle(commit)
        return True

    def close(self, commit: bool) -> None:
        """Leave: the message in hand settled (``commit``), offsets persisted, queue locks
        released, the member record removed, the store closed. Idempotent; from any thread.
        With :meth:`~store.Consumer.run` going, it stops it and waits for it to return, which
        leaves; from one of its handler calls (:data:`IN_HANDLER`), or a signal handler in the
        thread of the run, it only stops it: it would wait for itself."""
        if self.starter == threading.get_ident():
            if not self.closed:   # (a signal handler in a start: the start leaves, see starting)
                self.closed = True
                self.rt.stop()
            return
        sink = self.sink
        if not self.closed and sink is not None and sink.feeder == threading.get_ident():
            self.rt.stop()   # (a signal handler in this thread's feed, which holds the loop's lock)
            sink.after_feed = lambda: self.close(commit)
            return
        with self.lock:
            over = self.run_over   # (a run() in flight leaves when it returns: see ran())
            if self.closed:
                pass   # (closed already, maybe from a handler call: its run() may still go on)
            elif over is not None:
                self.closed = True
                self.rt.stop()
            else:
                self.closed = True
                self._leave(commit)
        if over is not None and getattr(IN_HANDLER, "life", None) is not self \
                and threading.get_ident() != self.run_thread:
            over.wait()   # (not in the run's own thread: a signal handler there stops it only)

    def _leave(self, commit: bool) -> None:
        sink = self.sink
        if sink is not None:
            sink.wake_reader()   # an iteration waiting in another thread ends
        rt = self.rt
        try:
            self.settle_in_hand(commit=commit)
            if not self.joined:
                rt.wake.close()
            elif self.mode == "iterate":
                rt.stop()
                rt.join()
                if sink is not None:
                    sink.release_all()
                rt.shutdown(wait_handlers=True)
            else:
                rt.shutdown(wait_handlers=True)
        finally:
            with ids_lock:
                ids_in_use.discard(self.id_key)
            self.store.close()

    def running(self) -> threading.Event:
        """(:meth:`~store.Consumer.run`, under :attr:`lock`, joined) A run starts: the event
        :meth:`ran` sets."""
        self.serving = True
        self.run_thread = threading.get_ident()
        self.run_over = threading.Event()
        return self.run_over

    def ran(self) -> None:
        """(:meth:`~store.Consumer.run`, as it returns, normally or not) Closed meanwhile (from
        a handler call, which the close did not wait for, or from another thread, which waits
        for this): leave now, whoever waits for it."""
        with self.lock:
            self.serving = False
            over, self.run_over, self.run_thread = self.run_over, None, None
            try:
                if self.closed:
                    self._leave(commit=False)   # (the runtime shut down already, but after a
                                                # stop that came as it drained with exit_at_end)
            finally:
                if over is not None:
                    over.set()

    def dropped(self) -> None:
        """(``weakref.finalize``: the consumer was collected unclosed, or the process exits with
        it open.) Leave, the message in hand delivered again: in a thread of its own, as the
        collection may happen in any thread, holding any lock (the member's loop thread's own,
        say); the process waits for it to end. At exit, at once; but a :meth:`run` still
        going then (in a daemon thread: its handlers may never return) is only asked to stop.
        A forked child leaves its parent's member alone."""
        if self.closed or os.getpid() != self.pid:
            return
        exiting = not threading.main_thread().is_alive()
        if exiting and self.serving:
            self.rt.stop()
            return
        leaving = threading.Thread(target=self.close, args=(False,), name=f"mq-leave-{self.rt.o.group}")
        leaving.start()
        if exiting:
            leaving.join()
