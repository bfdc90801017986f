"""A member's watch of the offset table (``config/consumerOffset.json``), put to sleep while
other members commit.

Every offset commit of every group replaces ``config/consumerOffset.json``, and a member
watches that file only to learn of a reset, which it looks for at its next persist look (every
persist interval, 5 s) anyway. Woken by each commit, 16 busy members of one group woke each
other about 200 times a second each: half of what a member spent. So, after a few wake-ups by
commits alone within one persist interval, the member stops watching the table until its next
persist look, which watches it again and looks for a reset. The topic table's epoch file stays
watched all the while: a topic made or resized is taken up at once (a new queue's messages are
not left behind), and its events come only from topic changes, which are rare.
"""
from __future__ import annotations

import os

from store.layout import Layout
from store.watch import Watcher

# Wake-ups by commits alone (no wake from a thread, nothing else changed) within one persist
# interval after which the offset table is no longer watched until the next persist look.
BUSY_COMMITS = 3


class ConfigWatch:
    """Whether the offset table is watched now (see the module docstring)."""

    def __init__(self, wake: Watcher, layout: Layout, watched: bool) -> None:
        self.wake = wake
        self.offsets_json = layout.consumer_offset_json
        self.watched = watched   # (a member of no group does not watch it)
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
            self.wake.unwatch(self.offsets_json)
            self.asleep = True

    def persist_look(self) -> bool:
        """At a persist look: watch the offset table again if it was not. True when it was
        not: the caller then looks for a reset itself, as a change since the watch was dropped
        would have made it."""
        self.commits = 0
        if not self.asleep:
            return False
        self.wake.watch(self.offsets_json, kind="replaced")
        self.asleep = False
        return True
