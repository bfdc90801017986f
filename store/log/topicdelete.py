"""``topic delete`` as steps of which every prefix is a valid store, and the finishing of one
that was killed between them.

The topic's tombstone, ``deleting/<topic>/`` (``layout.py``), is the intent: made first,
holding ``intent.json`` (the config being deleted: its ``createdOffset`` and ``createdAt`` tell
it from a topic of the same name created later), removed last. In order:

1. ``intent.json`` is written (atomically, synced) into the tombstone;
2. the topic's consume queues are moved into the tombstone (one rename: readers see none of
   its entries from then on, and a topic of the same name created later starts empty);
3. the topic leaves ``topics.json``;
4. every group's offsets of the topic are dropped;
5. the tombstone is removed.

A process killed anywhere leaves the tombstone; the next writable open (``Store.open``) or
``store recover`` finishes the steps from the start (each is idempotent), and ``store check``
names it meanwhile. Crash points (``store/failpoints.py``): ``topic-delete-after-intent``,
``topic-delete-after-queues``, ``topic-delete-after-table``, ``topic-delete-after-offsets``.
"""
from __future__ import annotations

import os
from typing import Callable

from store.errors import DataError
from store.failpoints import failpoint
from store.fsutil import atomic_write_json, ensure_dir, fsync_dir, read_json_with_bak
from store.layout import Layout
from store.log.consumequeue import remove_queues, retire_queues
from store.log.topics import TopicConfig, TopicTable

DropOffsets = Callable[[str], None]


def delete_topic(layout: Layout, table: TopicTable, cfg: TopicConfig, drop_offsets: DropOffsets) -> None:
    """Delete topic ``cfg`` (write lock held; the caller checked that it exists)."""
    ensure_dir(layout.deleting_dir)
    ensure_dir(layout.topic_tombstone(cfg.name))
    atomic_write_json(layout.tombstone_intent(cfg.name), cfg.to_json(), keep_bak=False)
    fsync_dir(layout.deleting_dir)
    failpoint("topic-delete-after-intent")
    _finish(layout, table, cfg.name, cfg, drop_offsets)


def pending(layout: Layout) -> list[str]:
    """Topics whose deletion was begun and not finished (a process was killed)."""
    try:
        return sorted(os.listdir(layout.deleting_dir))
    except FileNotFoundError:
        return []


def finish_pending(layout: Layout, table: TopicTable, drop_offsets: DropOffsets,
                   warn: Callable[[str], None]) -> list[str]:
    """Finish every deletion a killed process left (write lock held). Returns the topics."""
    done = pending(layout)
    for name in done:
        try:
            obj = read_json_with_bak(layout.tombstone_intent(name), default=None)
            cfg = TopicConfig.from_json(obj) if isinstance(obj, dict) else None
        except (ValueError, KeyError, TypeError, DataError):
            cfg = None
        _finish(layout, table, name, cfg, drop_offsets)
        warn(f"finished deleting topic {name} (a topic delete was interrupted)")
    return done


def _finish(layout: Layout, table: TopicTable, name: str, cfg: TopicConfig | None,
            drop_offsets: DropOffsets) -> None:
    topics = dict(table.load())
    cur = topics.get(name)
    # A topic of this name that is not the one being deleted (created after the deletion got
    # past step 3) keeps its queues, its entry and its offsets; without an intent (the
    # tombstone's file never got written), the table entry is the one meant.
    ours = cur is not None and (cfg is None or (cur.created_offset, cur.created_at)
                                == (cfg.created_offset, cfg.created_at))
    if cur is None or ours:
        retire_queues(layout.topic_cq_dir(name), layout.tombstone_queues(name))
        failpoint("topic-delete-after-queues")
    if ours:
        del topics[name]
        table.save(topics)
    failpoint("topic-delete-after-table")
    if cur is None or ours:
        drop_offsets(name)
    failpoint("topic-delete-after-offsets")
    remove_queues(layout.topic_tombstone(name))
    try:
        os.rmdir(layout.deleting_dir)
    except OSError:
        pass   # another deletion's tombstone is still there
    fsync_dir(layout.root)
