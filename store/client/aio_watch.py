"""One inotify instance per event loop, shared by the asyncio consumers waiting in it.

The kernel gives a user 128 inotify instances (``fs.inotify.max_user_instances``) for all of
its processes together. A :class:`store.watch.Watcher` has an instance of its own, which suits
one consumer per process; but a program that runs 200 :class:`store.AsyncConsumer`\\ s in one
loop would get no instance for the 129th and later ones (they would fall back to polling,
and leave none for the user's other processes). So the consumers of one loop watch through
one instance: the loop's reader reads it (:meth:`store.inotify.Instance.pump`) and hands each
event to the watchers of its watch, each of which wakes its own wait through its wake pipe.

The registry is keyed by the loop; the last consumer of a loop to close (its watcher's
``close``) removes the reader and closes the instance. Where inotify is missing (or the
limit is reached even for this one), nothing is shared: each watcher sets up its own as
before, and polls when it gets none.
"""
from __future__ import annotations

import asyncio

from store.inotify import Instance
from store.watch import Watcher

_LOOPS: dict[asyncio.AbstractEventLoop, "_LoopInotify"] = {}


class _LoopInotify:
    """A loop's instance, its reader, and how many watchers use it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.instance = Instance()
        self.users = 0
        loop.add_reader(self.instance.fd, self.instance.pump)

    def release(self) -> None:
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


def share_loop_inotify(watcher: Watcher, loop: asyncio.AbstractEventLoop) -> None:
    """Make ``watcher`` (not started yet) watch through ``loop``'s instance."""
    if watcher.started:
        return
    hub = _LOOPS.get(loop)
    if hub is None:
        try:
            hub = _LOOPS[loop] = _LoopInotify(loop)
        except OSError:
            return
    hub.users += 1
    released = False

    def release() -> None:
        nonlocal released
        if not released:
            released = True
            hub.release()
    watcher.share(hub.instance, release)


def loop_instances() -> int:
    """How many loops have a shared instance open now (for tests and diagnostics)."""
    return len(_LOOPS)
