"""An :class:`store.AsyncConsumer`'s life as a member of its group, as a :class:`store.Consumer`'s
(``consumer_life.py``): joined at its first await, left when it is closed, and left as well,
what was handled persisted and the message in hand delivered again, when the program drops it
unclosed (it is garbage-collected), when the event loop it was used in ends with it still
open (``asyncio.run`` returning: the runner cancels the tasks left), or when the process
exits. A member that stays in after its loop has gone would keep its queues, unread, until its
heartbeat expired.

Leaving takes the member's runtime, which its driver (a task of the loop) runs: it must not run
beside a turn or an offset commit of that driver. So a leave waits for the driver to end
(cancelled, on the loop), or happens where the loop does not run (it ended; the process
exits). The collection of a dropped consumer may happen in any thread, in the middle of a turn
or holding any lock, and after its loop was closed: :meth:`AsyncLife.dropped` only arranges the
leave. :class:`AsyncLife` holds what leaving takes apart from the consumer itself, which the
finalizer must not hold (it would never be collected).
"""
from __future__ import annotations

import asyncio
import atexit
import os
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from store.client.consumer import Consumer
    from store.client.runtime import ConsumerRuntime

# Lives whose leave was arranged on their loop but has not happened yet: left at the process's
# exit if the loop never got to it (closed meanwhile without its tasks cancelled).
_ARRANGED: set[AsyncLife] = set()
_ARRANGED_LOCK = threading.Lock()
_exit_hook = False
_EXIT_WAIT_S = 10.0   # at exit, for a leave arranged on a loop that runs in another thread


class AsyncLife:
    """An asyncio consumer's member (:class:`store.Consumer`, whose runtime the loop drives),
    the loop it belongs to, its driver and sink, and where its leaving is."""

    def __init__(self) -> None:
        self.member: Consumer | None = None
        self.rt: ConsumerRuntime | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.sink: Any = None                         # an AsyncIteratorSink or a TaskSink
        self.driver: asyncio.Task[None] | None = None
        self.guard: asyncio.Task[None] | None = None  # waits for the loop's end (:meth:`_watch`)
        self.serving = False     # run() drives the runtime itself (its cancellation leaves)
        self.leaving = False     # a leave is under way or done (the consumer's close, or this)
        self.loop_ended = False  # left because its loop ended with it open
        self.left = threading.Event()
        self.lock = threading.Lock()
        self.pid = os.getpid()

    def joined(self, member: Consumer, rt: ConsumerRuntime, loop: asyncio.AbstractEventLoop) -> None:
        """(On the loop.) The member joined: watch for the loop's end."""
        self.member, self.rt, self.loop = member, rt, loop
        # (a loop closed without its tasks cancelled: the member leaves when it is next used or
        # dropped, or at exit; asyncio then says "Task was destroyed but it is pending!" of
        # this watch, as of any task left pending, which names the consumer left open)
        self.guard = loop.create_task(self._watch(), name=f"mq-member-{member.client_id}")

    async def _watch(self) -> None:
        """Wait, while the member is in, for its loop to end: ``asyncio.run`` (and the other
        runners) cancel the tasks still pending when the main one returns, and then close the
        loop. The member leaves then, before the runner returns."""
        try:
            await asyncio.get_running_loop().create_future()
        except asyncio.CancelledError:
            if not self.leaving:
                self.leaving = self.loop_ended = True
                self._leave_after_driver(in_thread=False)
            raise

    def closing(self) -> None:
        """(On the loop.) The consumer closes itself: no other leave from here on."""
        self.leaving = True
        if self.guard is not None:
            self.guard.cancel()

    def _leave_after_driver(self, in_thread: bool) -> None:
        """(On the loop.) Leave once no turn or commit of the driver is out: at once if it
        does not run, else when its cancellation is done. ``in_thread``: in a thread of its
        own (the loop goes on meanwhile; the process waits for it at exit)."""
        if self.serving:
            return   # run()'s own cancellation (its task's) leaves
        leave = self._leave_in_thread if in_thread else self.leave
        driver = self.driver
        if driver is not None and not driver.done():
            _arranged(self)
            driver.cancel()
            driver.add_done_callback(lambda _task: leave())
        else:
            leave()

    def _leave_in_thread(self) -> None:
        threading.Thread(target=self.leave, name=f"mq-leave-{self.pid}").start()

    def _leave_soon(self) -> None:
        """(On the loop: the consumer was dropped.)"""
        if self.leaving:
            return
        self.leaving = True
        if self.guard is not None:
            self.guard.cancel()
        self._leave_after_driver(in_thread=True)

    def leave(self) -> None:
        """Leave, the message in hand delivered again and what was handled persisted. Only
        where nothing of the member's runs beside it: its driver is done, or its loop does
        not run. Idempotent; from any thread."""
        with self.lock:
            if self.left.is_set():
                return
            try:
                self._leave()
            finally:
                self.left.set()
                with _ARRANGED_LOCK:
                    _ARRANGED.discard(self)

    def _leave(self) -> None:
        rt, member = self.rt, self.member
        if rt is None or member is None:
            return   # never joined
        rt.stop()
        if self.serving:
            return   # (handler tasks of a loop that no longer runs: only asked to stop)
        sink = self.sink
        if sink is not None:
            hand = getattr(sink, "hand", None)
            if hand is not None:
                sink.hand = None
                hand.settle(False)   # the message in hand is delivered again
            release = getattr(sink, "release_all", None)
            if release is not None:
                release()
            rt.dispatcher.collect(block=False)
        driver = self.driver
        if driver is not None and not driver.done():
            try:
                driver.cancel()   # (a loop that is not running: should it run again)
            except RuntimeError:
                pass   # (its loop is closed)
        member.close()   # offsets persisted, queue locks released, the member record removed

    def dropped(self) -> None:
        """(``weakref.finalize``: the consumer was collected unclosed, or the process exits
        with it open; any thread.) Arrange the leave: on the loop if it runs, else now, in a
        thread of its own (this one may hold any lock), waited for at exit. A forked child
        leaves its parent's member alone."""
        loop = self.loop
        if self.leaving or loop is None or os.getpid() != self.pid:
            return
        exiting = not threading.main_thread().is_alive()
        if self.serving and exiting:
            # run() drives the member itself, in a loop of another thread (its cancellation
            # would leave): only asked to stop, as a sync Consumer's run() is at exit
            if self.rt is not None:
                self.rt.stop()
            return
        if loop.is_running() and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(self._leave_soon)
            except RuntimeError:
                pass   # closed meanwhile: it no longer runs
            else:
                _arranged(self)
                if exiting:
                    self.left.wait(_EXIT_WAIT_S)
                return
        self.leaving = True
        if exiting:
            self.leave()
        else:
            threading.Thread(target=self.leave, name=f"mq-leave-{self.pid}").start()


def _arranged(life: AsyncLife) -> None:
    global _exit_hook
    with _ARRANGED_LOCK:
        _ARRANGED.add(life)
        if not _exit_hook:
            _exit_hook = True
            atexit.register(_leave_arranged)


def _leave_arranged() -> None:
    """(At exit.) The leaves arranged on loops that never got to them: now, where the loop
    no longer runs."""
    with _ARRANGED_LOCK:
        lives = list(_ARRANGED)
    for life in lives:
        if life.pid == os.getpid() and not (life.loop is not None and life.loop.is_running()):
            life.leave()
