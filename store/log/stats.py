"""Sizes of a store's parts (``store stats``), and what retention would free."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from store.log.messagestore import Store


def _du(path: Path) -> tuple[int, int]:
    files = size = 0
    for dirpath, _dirs, names in os.walk(path):
        for n in names:
            try:
                st = os.stat(os.path.join(dirpath, n))
            except FileNotFoundError:
                continue
            files += 1
            size += st.st_blocks * 512
    return files, size


def commitlog_bytes(store: Store) -> int:
    """The total size of the commit log's segment files: what ``check_store`` and
    ``recover`` report their progress against."""
    log = store.commitlog   # (the bytes its records fill: not zeros a sync writer wrote ahead)
    return sum(log.length(b) for b in log.segments())


def store_stats(store: Store) -> list[dict[str, Any]]:
    """One row per part of the store (``part``, ``files``, ``bytes`` on disk, ``detail``):
    the commit log, consume queues, index, then the config, offsets, consumers, locks and
    dedup directories that exist, then the rows of :func:`clean_stats`."""
    lay = store.layout
    rows = []
    log = store.commitlog
    files, size = _du(lay.commitlog_dir)
    rows.append({"part": "commitlog", "files": files, "bytes": size,
                 "detail": f"offsets {log.min_offset()}-{log.end()}, segment size {log.segment_size}"})
    files, size = _du(lay.consumequeue_dir)
    n = len(store.topics())
    rows.append({"part": "consumequeue", "files": files, "bytes": size, "detail": f"{n} topic{'' if n == 1 else 's'}"})
    files, size = _du(lay.index_dir)
    rows.append({"part": "index", "files": files, "bytes": size, "detail": ""})
    for part, p in (("config", lay.config_dir), ("offsets", lay.broadcast_offsets_root),
                    ("consumers", lay.members_root), ("locks", lay.queue_locks_root), ("dedup", lay.dedup_root)):
        if p.exists():
            files, size = _du(p)
            rows.append({"part": part, "files": files, "bytes": size, "detail": ""})
    return rows + clean_stats(store)


def clean_stats(store: Store) -> list[dict[str, Any]]:
    """Rows for what ``store clean`` (the default retention) would free (``reclaimable``),
    and, when lagging readers need old segments, what they hold back beyond that
    (``held-back``: what ``clean --force`` would free on top)."""
    from store.log.retention import DEFAULT_RETENTION_MS, plan_clean
    plan = plan_clean(store, DEFAULT_RETENTION_MS)
    age = f"{DEFAULT_RETENTION_MS // 3_600_000}h"
    rows: list[dict[str, Any]] = [{"part": "reclaimable", "files": len(plan.files), "bytes": plan.bytes,
                                   "detail": f"store clean frees this (older than {age}, passed by every reader)"}]
    if plan.held_files:
        culprits = ", ".join(n.describe() for n in plan.held[:3]) + (" …" if len(plan.held) > 3 else "")
        rows.append({"part": "held-back", "files": plan.held_files, "bytes": plan.held_bytes,
                     "detail": f"older than {age} but still needed by {culprits} (store clean --force frees it)"})
    return rows
