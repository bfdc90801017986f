"""A consumer runtime driven by an asyncio event loop: :func:`drive` runs the turns of
:meth:`store.client.runtime.ConsumerRuntime.turns` on the loop, and waits between them on the store's
change notification registered with the loop (:func:`wait_for_change`), so a waiting async
consumer holds no thread and burns no CPU.

A turn itself is the runtime's ordinary, synchronous work (pulls from the page cache, offset
and member files, queue locks taken without waiting): short, as a ``mqctl consume`` turn is.
Its end-of-turn offset commits (an fsync each), and the commit of the start offsets computed
for the queues it took (due before anything of them is pulled), are awaited between turns on
the loop's commit thread instead (``store/client/aio_shared.py``).
Between two turns that found work the loop gets a turn of its own (``asyncio.sleep(0)``), so a
backlog does not starve the handlers and iterators the runtime feeds.
"""
from __future__ import annotations

import asyncio
import math
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from store.client.runtime import ConsumerRuntime
    from store.watch import Watcher


# A long wait (a lease renewal 40 s away, an idle timeout) ends on the next tick of this grid
# rather than to the millisecond: the idle members of a loop then wake together, in one pass
# of the loop, instead of each on its own (a wake-up costs more than the renewal it is for).
TICK_S = 0.5
_TICK_FROM_S = 5.0   # (shorter waits, retries and suspensions, end when they are due)


def _tick(when: float, wait: float) -> float:
    return math.ceil(when / TICK_S) * TICK_S if wait >= _TICK_FROM_S else when


class Waiter:
    """What wakes a driver's current wait: the loop's readers, its timer, and the shared
    inotify instance's reader, which calls it directly for events it read for this watcher
    (``Watcher.notify``) instead of writing the watcher's wake pipe."""

    __slots__ = ("woken",)

    def __init__(self) -> None:
        self.woken: asyncio.Future[None] | None = None

    def __call__(self) -> None:
        woken = self.woken
        if woken is not None and not woken.done():
            woken.set_result(None)


async def wait_for_change(watcher: Watcher, timeout: float, waiter: Waiter | None = None) -> bool:
    """Wait up to ``timeout`` s (``math.inf``: no limit) for a change the watcher reports (or
    its :meth:`wake`) without blocking the loop: its descriptors (inotify and the wake pipe)
    are the loop's readers while it waits; paths that are polled are looked at every
    ``poll_max`` s. True unless it timed out; ``watcher.changed`` then says what changed, as
    after ``watcher.wait``. ``waiter``: the watcher's ``notify`` (set by the caller)."""
    if watcher.wait(0):   # (also sets the watches up on a first wait, and reads what is pending)
        return True
    loop = asyncio.get_running_loop()
    deadline = time.monotonic() + timeout
    fds = watcher.descriptors()
    ready = waiter if waiter is not None else Waiter()
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        if watcher.polls:
            remaining = min(remaining, watcher.poll_max)
        ready.woken = loop.create_future()
        for fd in fds:
            loop.add_reader(fd, ready)
        timer = None if remaining == math.inf else loop.call_at(_tick(loop.time() + remaining, remaining), ready)
        try:
            await ready.woken
        finally:
            ready.woken = None
            if timer is not None:
                timer.cancel()
            for fd in fds:
                loop.remove_reader(fd)
        if watcher.wait(0):
            return True


async def drive(rt: ConsumerRuntime) -> None:
    """Run the runtime's loop on the running event loop until it ends (a stop, an error,
    ``exit_at_end`` drained). Cancelling it ends the loop between two turns: the runtime is
    then as after any turn, and its owner shuts it down."""
    from store.client.aio_shared import share_loop
    share = share_loop(rt.wake, asyncio.get_running_loop())   # one inotify instance per loop
    keeper = rt.keeper
    waiter = Waiter()
    if share is not None:
        keeper.defer_turn_persists = True   # their fsyncs run on the loop's commit thread
        rt.wake.notify = waiter
    turns = rt.turns()
    try:
        due = next(turns)
        while True:
            if share is not None and (keeper.persist_wanted or keeper.starts_wanted):
                # the turn's commits, and the computed starts of queues just taken, which
                # must be durable before anything of those queues is pulled (then at once)
                keeper.persist_wanted = False
                if keeper.starts_wanted:
                    due = None
                await share.offload(keeper.persist)
            if due is None:
                await asyncio.sleep(0)
                woke = False
            else:
                woke = await wait_for_change(rt.wake, due, waiter)
            due = turns.send(woke)
    except StopIteration:
        return
    finally:
        rt.wake.notify = None
        turns.close()
