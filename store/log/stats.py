"""Sizes of a store's parts, for ``store stats``."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from store.log.broker import Store


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


def store_stats(store: Store) -> list[dict[str, Any]]:
    lay = store.layout
    rows = []
    log = store.commitlog
    files, size = _du(lay.commitlog_dir)
    rows.append({"part": "commitlog", "files": files, "bytes": size,
                 "detail": f"offsets {log.min_offset()}-{log.end()}, segment size {log.segment_size}"})
    files, size = _du(lay.consumequeue_dir)
    rows.append({"part": "consumequeue", "files": files, "bytes": size, "detail": f"{len(store.topics())} topics"})
    files, size = _du(lay.index_dir)
    rows.append({"part": "index", "files": files, "bytes": size, "detail": ""})
    for part in ("config", "offsets", "consumers", "locks", "dedup"):
        p = lay.root / part
        if p.exists():
            files, size = _du(p)
            rows.append({"part": part, "files": files, "bytes": size, "detail": ""})
    return rows
