"""A member's watch of ``config/`` (the topic table's epoch file and the offset table), put to
sleep while other members commit.

Every offset commit of every group replaces ``config/consumerOffset.json``, and a member
watches that file only to learn of a reset, which it looks for at its next persist look (every
persist interval, 5 s) anyway. Woken by each commit, 16 busy members of one group woke each
other about 200 times a second each: half of what a member spent. So, after a few wake-ups by
commits alone within one persist interval, the member stops watching ``config/`` until its
next persist look, which watches it again and then looks at what a change would have said
(the topic table's epoch: a topic made or resized; the offset table: a reset). While the
table is that busy, a topic made or resized is seen at that look (within the persist
interval) rather than at once; a reset is seen there either way.
"""
from __future__ import annotations

import os

from store.layout import Layout
from store.watch import Watcher

# Wake-ups by commits alone (no wake from a thread, nothing else changed) within one persist
# interval after which config/ is no longer watched until the next persist look.
BUSY_COMMITS = 3


class ConfigWatch:
    """Whether ``config/`` is watched now (see the module docstring)."""

    def __init__(self, wake: Watcher, layout: Layout, watched: bool) -> None:
        self.wake = wake
        self.offsets_json = layout.consumer_offset_json
        self.paths = (layout.topics_epoch, layout.consumer_offset_json)
        self.watched = watched   # (a member of no group watches neither file)
        self.commits = 0
        self.asleep = False

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

    def persist_look(self) -> bool:
        """At a persist look: watch ``config/`` again if it was not. True when it was not:
        the caller then looks at the topic table's epoch and for a reset itself, as a change
        since the watch was dropped would have made it."""
        self.commits = 0
        if not self.asleep:
            return False
        for p in self.paths:
            self.wake.watch(p, kind="replaced")
        self.asleep = False
        return True
