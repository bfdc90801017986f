"""Before a store is used: does it need recovery? The cheap look every opener and every write
batch takes first — the checkpoint against the commit log's end, the boot id, and the markers
a killed ``store recover`` leaves — and the call into ``recovery.py`` (imported
only then: a clean store's commands never load it) when it does. A store is made clean: with
the checkpoint a recovery of it would write.
"""
from __future__ import annotations

import os
import time

from store.errors import StoreIOError, UsageError
from store.fsutil import ensure_dir
from store.layout import backup_of
from store.log import checkpoint as ckpt
from store.log import indexfence
from store.log.topics import TopicTable

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from store.layout import Layout
    from store.log.engine import Engine


# How long a process that finds a store being made by another waits for its store.json.
CREATOR_WAIT_S = 10.0


def claim_new_store(layout: "Layout") -> bool:
    """Make the directories and the checkpoint of a new store (its ``store.json`` is the
    caller's, written last: until then no one writes into it). False when another process
    is making the same store (two commands into a new store at once): the checkpoint is made
    only where there is none, and the loser waits for the other's ``store.json``.

    The checkpoint is what a recovery of the empty store would write: this boot, nothing
    written, its derived files (none) durable as of now. Without it the first writer took
    the missing checkpoint for damage and recovered: the recovery modules loaded and every
    directory of the store fsynced before its first batch."""
    root = layout.root
    if not (root.exists() and any(p.name != "store.json" for p in root.iterdir())):
        ensure_dir(root, durable=True)   # (its name in the parent: a store init made survives a cut)
        for d in (layout.commitlog_dir, layout.consumequeue_dir, layout.index_dir, layout.config_dir):
            ensure_dir(d, durable=d == layout.config_dir)   # one fsync of root makes all four durable
        cp = ckpt.Checkpoint(boot_id=ckpt.current_boot_id(), derived_at=int(time.time()))
        # (fsynced; its name is made durable by store.json's directory fsync, which comes last)
        if ckpt.write(layout.checkpoint, cp, new=True):
            # the topics' view, empty, durable: unsynced, a power cut could leave it an empty
            # file, which (no config/topics/ yet) reads as a damaged legacy table to migrate
            TopicTable(layout).view.write("")
            return True
    _wait_for_maker(layout)
    return False


def _wait_for_maker(layout: "Layout") -> None:
    """The store's directory is not empty and has no ``store.json``: when it holds only what
    making a store writes, another process is making it; wait for its ``store.json``
    (``CREATOR_WAIT_S`` at most). Else, or when none comes (its maker died half-way),
    ``UsageError``."""
    made = {p.name for p in (layout.commitlog_dir, layout.consumequeue_dir, layout.index_dir,
                             layout.config_dir, layout.checkpoint, backup_of(layout.store_json))}
    temp = f".{layout.store_json.name}."   # (its temp file, written before it is renamed)
    deadline = time.monotonic() + CREATOR_WAIT_S
    while not layout.store_json.exists():
        try:
            ours = all(name in made or name.startswith(temp) for name in os.listdir(layout.root))
        except OSError:
            ours = False
        if not ours or time.monotonic() >= deadline:
            raise UsageError(f"{layout.root} is not empty and is not an mqctl store")
        time.sleep(0.02)


def checkpoint_locked(engine: "Engine") -> ckpt.Checkpoint:
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


def recover_if_dirty(engine: "Engine") -> None:
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
