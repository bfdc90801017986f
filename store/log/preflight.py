"""Before a store is used: does it need recovery? The cheap look every opener and every write
batch takes first — the checkpoint against the commit log's end, the boot id, and the markers
a killed ``store recover`` leaves — and the call into ``recovery.py`` (imported
only then: a clean store's commands never load it) when it does. A store is made clean: with
the checkpoint a recovery of it would write. And the making of a new store, which a full
disk or a kill may stop half-way: the next maker finishes it.

Failpoints: ``store-create-after-dirs`` (a new store's directories made, its checkpoint not),
``store-create-before-settings`` (all but its ``store.json``).
"""
from __future__ import annotations

import os
import time

from store.errors import LockHeldError, StoreIOError, UsageError, io_error
from store.failpoints import failpoint
from store.flock import try_flock
from store.fsutil import ensure_dir
from store.layout import backup_of
from store.log import checkpoint as ckpt
from store.log import indexfence, logstart
from store.log.topics import TopicTable
from store.log.topicsview import read_head

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from store.layout import Layout
    from store.log.engine import Engine


# How long a process that finds a store being made by another waits for its store.json.
CREATOR_WAIT_S = 10.0


def claim_new_store(layout: Layout, write_settings: Callable[[], None] | None = None) -> bool:
    """Make the directories and the checkpoint of a new store, then (``write_settings``) its
    ``store.json``, last: until it is there no one writes into the store. False when another
    process made the store first (two commands into a new store at once).

    Made under the store directory's ``flock`` (the one the write lock takes first): a second
    maker waits for the first (``CREATOR_WAIT_S`` at most) and then finds its ``store.json``.
    A directory that holds only what making a store writes, with no maker holding it, is a
    creation that did not finish (a full disk, a kill -9): it is made again, over what it left
    (empty directories, a short checkpoint, the topics' empty view; nothing a user wrote).
    Anything else in it: ``UsageError``, and nothing is touched.

    The checkpoint is what a recovery of the empty store would write: this boot, nothing
    written, its derived files (none) durable as of now. Without it the first writer took
    the missing checkpoint for damage and recovered: the recovery modules loaded and every
    directory of the store fsynced before its first batch."""
    root = layout.root
    ensure_dir(root, durable=True)   # (its name in the parent: a store init made survives a cut)
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise io_error(exc, f"open {root}") from exc
    try:
        _lock_for_making(fd, root)
        if layout.store_json.exists():
            return False   # the other maker's
        if not unfinished_creation(layout):
            raise UsageError(f"{root} is not empty and is not an mqctl store")
        for d in (layout.commitlog_dir, layout.consumequeue_dir, layout.index_dir, layout.config_dir):
            ensure_dir(d, durable=d == layout.config_dir)   # one fsync of root makes all four durable
        failpoint("store-create-after-dirs")
        cp = ckpt.Checkpoint(boot_id=ckpt.current_boot_id(), derived_at=int(time.time()))
        # (fsynced; its name is made durable by store.json's directory fsync, which comes last)
        ckpt.write(layout.checkpoint, cp, new=True)
        logstart.record(layout, 0, sync_dir=False)   # (retention has removed nothing)
        # the topics' view, empty, durable: unsynced, a power cut could leave it an empty
        # file, which (no config/topics/ yet) reads as a damaged legacy table to migrate
        TopicTable(layout).view.write("")
        failpoint("store-create-before-settings")
        if write_settings is not None:
            write_settings()
        return True
    finally:
        os.close(fd)   # (drops the flock)


def _lock_for_making(fd: int, root: Path) -> None:
    """The directory's ``flock``, waited for ``CREATOR_WAIT_S`` at most (``LockHeldError``);
    on a file system without ``flock`` on directories, none (as the write lock does)."""
    deadline = time.monotonic() + CREATOR_WAIT_S
    while True:
        try:
            if try_flock(fd, root):
                return
        except StoreIOError:
            return
        if time.monotonic() >= deadline:
            raise LockHeldError(f"{root} is being made into a store by another process, for over "
                                f"{CREATOR_WAIT_S:g} s (a stopped process?)")
        time.sleep(0.02)


def unfinished_creation(layout: Layout) -> bool:
    """The store directory holds nothing but what making a store writes before its
    ``store.json`` (or nothing at all): empty ``commitlog``, ``consumequeue`` and ``index``
    directories, ``config`` with at most the topics' view and the log's start, a checkpoint,
    an unreadable ``store.json.bak`` and the temp files of these. (A few ``listdir``: no file
    is read but the view's head.)"""
    view = TopicTable(layout).view.path
    made = (view.name, layout.commitlog_start_json.name)
    files = {layout.checkpoint.name, backup_of(layout.store_json).name}
    empty_dirs = {layout.commitlog_dir.name, layout.consumequeue_dir.name, layout.index_dir.name}
    temp = f".{layout.store_json.name}."   # (store.json's and its .bak's, before their rename)
    try:
        with os.scandir(layout.root) as entries:   # (closed on an early return: no ResourceWarning)
            for entry in entries:
                if entry.name in files or entry.name.startswith(temp):
                    if not entry.is_file(follow_symlinks=False):
                        return False
                elif entry.name in empty_dirs:
                    if not entry.is_dir(follow_symlinks=False) or os.listdir(entry.path):
                        return False
                elif entry.name == layout.config_dir.name:
                    if not entry.is_dir(follow_symlinks=False):
                        return False
                    for name in os.listdir(entry.path):
                        if not (name in made or any(name.startswith(f".{m}.") for m in made)):
                            return False
                    head = read_head(view)
                    if head is not None and head.parsed and not head.is_view:
                        return False   # a legacy topic table: a user's
                else:
                    return False
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


def checkpoint_locked(engine: Engine) -> ckpt.Checkpoint:
    """The checkpoint, after making sure it matches the log (write lock held): a writer that
    died mid-batch, or a machine restart, is recovered from first."""
    cp = engine.checkpoint_file.read()
    if (cp is None or cp.boot_id != engine.writer.boot_id
            or cp.written_end != engine.commitlog.end_as_written(cp.written_end)):
        from store.log.recovery import recover
        recover(engine)
        cp = engine.checkpoint_file.read()
        assert cp is not None
    return cp


def recover_if_dirty(engine: Engine) -> None:
    """Recover at open when the checkpoint says a writer died or the machine restarted, or a
    killed ``store recover`` left work half done; a store that cannot be
    written is read as it is (consume queues only point at whole records). From then on the
    handle looks once at each queue's end before using it, and at the key index before its
    first lookup (``queueends.py``, ``indexends.py``)."""
    engine.check_ends = True
    cp = ckpt.read(engine.layout.checkpoint)
    try:
        end = engine.commitlog.end()
    except OSError:
        return
    unfinished = indexfence.rebuilding_in(engine.layout.index_dir)
    if cp is not None and cp.written_end == end and cp.boot_id == engine.writer.boot_id and not unfinished:
        return
    if (cp is None and end == 0 and not engine.index.files() and not engine.layout.checkpoint.exists()
            and not any(engine.layout.consumequeue_dir.glob("*/*/*"))):
        return   # a new store: nothing written yet, nothing to check
    # (an unreadable checkpoint, even in a store with no records, is rebuilt below: left, it
    # failed ``store check`` until the first send)
    try:
        with engine.write_lock:
            if unfinished:
                from store.log.recovery import recover
                recover(engine)
            else:
                checkpoint_locked(engine)
    except StoreIOError as exc:
        engine.warn(f"store needs recovery but cannot be written ({exc}); reading what is complete")
