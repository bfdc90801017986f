"""A member's watch of ``config/`` (the topic table's epoch file and the offset table), put to
sleep while other members commit.

``config/consumerOffset.json`` is replaced by resets and by the snapshots of the members'
commits (about once a second while any member commits: ``store/log/offsetview.py``), and a
member watches that file only to learn of a reset, which it looks for at its next persist look
(every persist interval, 5 s) anyway. When every commit replaced it, 16 busy members of one
group woke each other about 200 times a second each: half of what a member spent. So, after a
few wake-ups by commits alone within one persist interval, the member stops watching ``config/`` until its
next persist look, which watches it again and looks for a reset. The topic table's epoch is
looked at (one stat) every ``TOPICS_LOOK_S`` meanwhile: a topic made or resized is taken up
as good as at once (a new queue's messages are not left behind). Both files are in
``config/``, and a watch of one of them is a watch of the directory: every commit's rename
would still wake the member (measured at 16 members: 3.95 -> 7.0 us of CPU a message).
"""
from __future__ import annotations

import math
import os
import time

from store.layout import Layout
from store.watch import Watcher

# Wake-ups by commits alone (no wake from a thread, nothing else changed) within one persist
# interval after which the offset table is no longer watched until the next persist look.
BUSY_COMMITS = 3
# While asleep: how often the topic table's epoch file is looked at.
TOPICS_LOOK_S = 0.25


class ConfigWatch:
    """Whether ``config/`` is watched now (see the module docstring); ``look_at``: when the
    topic table is looked at next while it is not (``inf`` while it is)."""

    def __init__(self, wake: Watcher, layout: Layout, watched: bool) -> None:
        self.wake = wake
        self.offsets_json = layout.consumer_offset_json
        self.paths = (layout.topics_epoch, layout.consumer_offset_json)
        self.watched = watched   # (a member of no group watches neither file)
        self.commits = 0
        self.asleep = False
        self.look_at = math.inf

    def commit_seen(self, own: tuple[int, int, int] | None) -> None:
        """A wait woke for the offset table replaced alone: a commit of another member (of
        any group), or a reset; not this member's own commit when the table is the one it
        wrote last (``own``: its inode, mtime and size then)."""
        if self.asleep or not self.watched:
            return
        try:
            st = os.stat(self.offsets_json)
        except OSError:
            return
        if (st.st_ino, st.st_mtime_ns, st.st_size) == own:
            return
        self.commits += 1
        if self.commits >= BUSY_COMMITS:
            for p in self.paths:
                self.wake.unwatch(p)
            self.asleep = True
            self.look_at = time.monotonic() + TOPICS_LOOK_S

    def topics_look(self, now: float) -> bool:
        """Whether the caller looks at the topic table now (asleep, and its time came)."""
        if now < self.look_at:
            return False
        self.look_at = now + TOPICS_LOOK_S
        return True

    def persist_look(self) -> bool:
        """At a persist look: watch ``config/`` again if it was not. True when it was not: the
        caller then looks for a reset itself, as a change since the watch was dropped would
        have made it (and at the topic table, as every ``TOPICS_LOOK_S`` before)."""
        self.commits = 0
        if not self.asleep:
            return False
        for p in self.paths:
            self.wake.watch(p, kind="replaced")
        self.asleep, self.look_at = False, math.inf
        return True
