"""Before a store is used: does it need recovery? The cheap look every opener and every write
batch takes first — the checkpoint against the commit log's end, the boot id, and the markers
a killed ``store recover`` leaves — and the call into ``recovery.py`` (imported
only then: a clean store's commands never load it) when it does.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from store.errors import StoreIOError
from store.log import checkpoint as ckpt
from store.log import indexfence

if TYPE_CHECKING:
    from store.log.engine import Engine


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
    unfinished = indexfence.rebuilding(engine.index)
    if cp is not None and cp.written_end == end and cp.boot_id == engine.writer.boot_id and not unfinished:
        return
    if cp is None and end == 0 and not engine.index.files() and not any(engine.layout.consumequeue_dir.glob("*/*/*")):
        return   # a new store: nothing written yet, nothing to check
    try:
        with engine.write_lock:
            if unfinished:
                from store.log.recovery import recover
                recover(engine)
            else:
                checkpoint_locked(engine)
    except StoreIOError as exc:
        engine.warn(f"store needs recovery but cannot be written ({exc}); reading what is complete")
