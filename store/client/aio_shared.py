"""What the asyncio consumers of one event loop share: one inotify instance, and one thread
for their offset commits.

The kernel gives a user 128 inotify instances (``fs.inotify.max_user_instances``) for all of
its processes together. A :class:`store.watch.Watcher` has an instance of its own, which suits
one consumer per process; but a program that runs 200 :class:`store.AsyncConsumer`\\ s in one
loop would get no instance for the 129th and later ones (they would fall back to polling,
and leave none for the user's other processes). So the consumers of one loop watch through
one instance: the loop's reader reads it (:meth:`store.inotify.Instance.pump`) and hands each
event to the watchers of its watch, each of which wakes its own wait through its wake pipe.

An offset commit ends with an fsync (milliseconds, more on a busy disk): run in a turn, it
would stall every task of the loop. The turns of a consumer that shares its loop's instance
leave their end-of-turn commits (``OffsetKeeper.persist_idle``/``persist_lagging``) to the
driver, which awaits them on the loop's one commit thread (started at the first commit): that
consumer waits for its commit, the loop does not. So does the commit of the start offsets
computed for queues just taken (their queues are pulled only once it is done), and a closing
consumer's last commit. A commit that must be done before a queue is given away stays in the
turn.

The registry is keyed by the loop; the last consumer of a loop to close (its watcher's
``close``) removes the reader, closes the instance and ends the thread. Where inotify is
missing (or the limit is reached even for this one), nothing is shared: each watcher sets up
its own as before (or polls), and its turns commit inline.
"""
from __future__ import annotations

import asyncio
from typing import Callable, TypeVar

from store.client.aio_producer import Worker
from store.inotify import Instance
from store.watch import Watcher

_LOOPS: dict[asyncio.AbstractEventLoop, LoopShare] = {}
_R = TypeVar("_R")


class LoopShare:
    """A loop's inotify instance and its reader, its commit thread, and how many consumers'
    watchers use them."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.instance = Instance()
        self.users = 0
        self._worker: Worker[None] | None = None
        loop.add_reader(self.instance.fd, self.instance.pump)

    async def offload(self, call: Callable[[], _R]) -> _R:
        """Run ``call`` on the loop's commit thread and return what it returns; a
        cancellation waits for it to finish (the owner shuts the consumer down next, and must
        not commit beside it)."""
        if self._worker is None:
            self._worker = Worker(None, name="mq-aio-commit")
        fut = asyncio.ensure_future(self._worker.call(lambda _none: call()))
        try:
            result: _R = await asyncio.shield(fut)
        except asyncio.CancelledError:
            await asyncio.wait({fut})
            raise
        return result

    def release(self) -> None:
        try:
            on_loop = asyncio.get_running_loop() is self.loop
        except RuntimeError:
            on_loop = False
        if not on_loop and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self._release)   # readers are the loop's to remove
            return
        self._release()

    def _release(self) -> None:
        self.users -= 1
        if self.users > 0:
            return
        if _LOOPS.get(self.loop) is self:
            del _LOOPS[self.loop]
        try:
            self.loop.remove_reader(self.instance.fd)
        except (RuntimeError, ValueError):
            pass   # the loop is closed already: its readers went with it
        self.instance.close()
        if self._worker is not None:
            self._worker.jobs.put(None)   # it ends once what it was given is done


def share_loop(watcher: Watcher, loop: asyncio.AbstractEventLoop) -> LoopShare | None:
    """Make ``watcher`` (not started yet) watch through ``loop``'s instance; the share it
    joined (released by the watcher's ``close``), or None when it keeps its own."""
    if watcher.started:
        return None
    hub = _LOOPS.get(loop)
    if hub is None:
        try:
            hub = _LOOPS[loop] = LoopShare(loop)
        except OSError:
            return None
    hub.users += 1
    released = False

    def release() -> None:
        nonlocal released
        if not released:
            released = True
            hub.release()
    watcher.share(hub.instance, release)
    return hub if not released else None


async def off_loop(call: Callable[[], _R]) -> _R:
    """Run ``call`` on the running loop's commit thread (its share held meanwhile, made if
    there is none yet) and return what it returns; where there can be no share (no
    inotify), in the loop's thread."""
    loop = asyncio.get_running_loop()
    hub = _LOOPS.get(loop)
    if hub is None:
        try:
            hub = _LOOPS[loop] = LoopShare(loop)
        except OSError:
            return call()
    hub.users += 1
    try:
        return await hub.offload(call)
    finally:
        hub.release()


def loop_instances() -> int:
    """How many loops have a shared instance open now (for tests and diagnostics)."""
    return len(_LOOPS)
