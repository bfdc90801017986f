"""The key index's rebuild fence: the file ``index/REBUILDING`` (``format.INDEX_REBUILD_MARKER``).

``store recover`` rebuilds the index from nothing: its files are removed, then every record's
keys are added again. The marker, made durable before the first removal and removed only once
the new files are durable, says the files cannot be trusted to be complete: readers search the
log instead (``Store.find``), ``store check`` reports it, and the next writable open or recovery
rebuilds again (``recovery.py``). It is empty; only its presence counts.
"""
from __future__ import annotations

import os
from pathlib import Path

from store.fsutil import ensure_dir, fdatasync_path, fsync_dir, open_private
from store.layout import rebuild_marker

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from store.log.index import KeyIndex


def _marker(idx: KeyIndex) -> Path:
    return rebuild_marker(idx.dir)


def rebuilding(idx: KeyIndex) -> bool:
    """A rebuild began and has not finished (it was killed, or is running)."""
    return rebuilding_in(idx.dir)


def rebuilding_in(index_dir: Path) -> bool:
    """:func:`rebuilding`, asked of the index's directory (without making a ``KeyIndex``)."""
    return os.path.exists(rebuild_marker(index_dir))


def begin_rebuild(idx: KeyIndex) -> None:
    """Put the fence up, durably, then remove every index file (write lock held)."""
    ensure_dir(idx.dir)
    fd = open_private(_marker(idx), os.O_WRONLY | os.O_CREAT)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_dir(idx.dir)
    idx.drop_from(0)


def end_rebuild(idx: KeyIndex) -> None:
    """Take the fence down, once every file the rebuild wrote is durable."""
    for base in idx.files():
        fdatasync_path(idx.path(base))
    try:
        os.unlink(_marker(idx))
    except FileNotFoundError:
        return
    fsync_dir(idx.dir)
