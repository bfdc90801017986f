"""Does the key index cover the commit log? Looked at once per store handle, before its first
lookup by business key or by unique key.

The key index is derived from the log (``index.py``). A file of it deleted or cut by hand in
a store that was shut down cleanly is invisible to the recovery at open, and lookups would
then miss messages the log holds without a word (``msg query`` finding nothing, ``msg show``
saying there is no such id). So the first lookup of a handle (:func:`before_lookup`) looks:

* at each file's own damage (:meth:`KeyIndex.problem`: its size and header);
* at whether the files cover the log. The first record with keys at or after the log's first
  segment is in the first file; the first record with keys after a file's last indexed
  record (its header's ``endPhyOffset``) begins the next file; after the newest file's, no
  record with keys comes below the checkpoint's written end. Each is a few records read:
  a run of more than ``_WALK`` records without keys ends that look (nothing found).

Damage found is repaired at once under the write lock, as recovery repairs the index: the
files from the damaged one on are removed and the keys of their records added again from
the log; one warning says so. A process that cannot write says what is wrong and that ``mqctl
store recover`` repairs it, once. ``store check`` reports the same damage. Handles opened to
change nothing (``Store.open(recover=False)``) do not look.

Damage in the middle of a file (a slot or a chain a lookup's walk cannot trust: ``indexchains
.walk``; an entry that leads where no record starts: ``reads.py``) is found by the lookup that
meets it, and repaired the same way (:func:`heal`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from store.errors import CorruptionError, StoreIOError
from store.log import checkpoint as ckpt
from store.log import format as F
from store.log import indexfence
from store.log.commitlog import CommitLog
from store.log.preflight import checkpoint_locked
from store.log.record import PROP_UNIQ_KEY, Message, RecordError

if TYPE_CHECKING:
    from store.log.engine import Engine

_WALK = 64   # records read past an offset for the next one with keys


@dataclass(frozen=True)
class Finding:
    """The index does not cover the log: ``why``; the repair removes the files from ``drop``
    on (None: none) and adds the keys of the records from ``start`` (a record boundary)."""

    why: str
    drop: int | None
    start: int


def before_lookup(engine: Engine) -> None:
    """This handle's one look at the key index (see the module docstring)."""
    engine.index_checked = True
    if not engine.check_ends:
        return
    try:
        found = inspect(engine)
    except OSError:
        found = None   # (files changed under the look: lookups check every hit anyway)
    if found is None:
        return
    try:
        with engine.write_lock:
            checkpoint_locked(engine)
            _repair_locked(engine)
    except StoreIOError as exc:
        engine.warn(f"key index ({engine.index.dir}) {found.why}; this process cannot repair it ({exc}): "
                    f"lookups by key or id may miss messages until `mqctl store recover` rebuilds it")


def heal(engine: Engine, base: int, why: str, still: Callable[[], bool]) -> None:
    """A lookup found file ``base`` damaged (``why``: a chain its walk cannot trust,
    ``KeyIndex.lookup``): unless ``still()``, looked at again under the write lock (no batch
    half written then), says it is sound by now, the same repair as a cut file's. A process
    that cannot write refuses (``CorruptionError``, exit 5) rather than answer "not found"."""
    path = engine.index.path(base)
    try:
        with engine.write_lock:
            checkpoint_locked(engine)
            if still():
                _repair_locked(engine, Finding(f"file {F.segment_name(base)} {why}", base,
                                               max(base, engine.commitlog.min_offset())))
    except StoreIOError as exc:
        raise CorruptionError(str(path), 0, f"key index file damaged ({why}) and this process cannot repair it "
                              f"({exc}): it cannot answer; run mqctl store recover") from exc


def _repair_locked(engine: Engine, finding: Finding | None = None) -> None:
    found = finding or inspect(engine)   # (again: another process may have repaired it)
    cp = ckpt.read(engine.layout.checkpoint)
    if found is None or cp is None:
        return
    from store.log import recordscan  # (numpy with it: only a damaged index gets here)
    idx = engine.index
    if found.drop is not None:
        idx.drop_from(found.drop)
    added = 0
    for w in recordscan.scan(engine.commitlog, found.start):
        if w.key_phys is not None and len(w.key_phys):   # (None: a window over a hole in the log)
            keep = w.key_phys < cp.written_end
            idx.add_hashes(w.key_hash[keep].tolist(), w.key_phys[keep].tolist(), int(w.store_ts.max()))
            added += int(keep.sum())
        if w.end >= cp.written_end:
            break
    engine.warn(f"key index ({idx.dir}) {found.why}: repaired from the commit log ({added} keys indexed again)")


def inspect(engine: Engine) -> Finding | None:
    """What is wrong with the index's cover of the log, or None."""
    idx, log = engine.index, engine.commitlog
    cp = ckpt.read(engine.layout.checkpoint)
    if cp is None or indexfence.rebuilding(idx):
        return None   # (recovery at open rebuilds it; lookups search the log meanwhile)
    end, lo = cp.written_end, log.min_offset()
    files = idx.files()
    for base in files:
        why = idx.problem(base)
        if why is not None:
            return Finding(f"file {F.segment_name(base)} {why}", base, max(base, lo))
    first = _keyed_from(log, lo, end)
    if first is not None and (not files or first < files[0]):
        where = f"begins at commit-log offset {files[0]}" if files else "has no file"
        return Finding(f"{where}, but the record at commit-log offset {first} has keys",
                       files[0] if files else None, lo)
    for i, base in enumerate(files):
        last = idx.header(base)[3]
        nxt = _keyed_from(log, _after(log, base, last), end)
        if i + 1 < len(files) and nxt is not None and nxt < files[i + 1]:
            return Finding(f"file {F.segment_name(base)} ends at the record at commit-log offset {last} and the "
                           f"next one begins at {files[i + 1]}, but the record at {nxt} has keys", files[i + 1], nxt)
        if i + 1 == len(files) and nxt is not None:
            return Finding(f"ends at the record at commit-log offset {last}, but the record at {nxt} has keys",
                           None, nxt)
    return None


def _after(log: CommitLog, base: int, last: int) -> int:
    """Where the record after a file's last indexed one (``last``) starts: a file with no
    entry yet (``last`` below its ``base``) covers from ``base``; a file whose end recovery
    moved back (``KeyIndex.fence``: to just before the log's end then) from ``last + 1``."""
    if last < base:
        return base
    m = _record(log, last)
    return last + m.size if m is not None else last + 1


def _keyed_from(log: CommitLog, pos: int, end: int) -> int | None:
    """The first record from ``pos`` (a record boundary) below ``end`` that the index must
    hold keys of (a unique key or KEYS, not a rolled-back half); None when there is none, or
    none within ``_WALK`` records, or a record that cannot be read comes first."""
    for _ in range(_WALK):
        if pos >= end:
            return None
        head = log.read_bytes(pos, F.BLANK_TRAILER.size)
        if len(head) == F.BLANK_TRAILER.size and F.BLANK_TRAILER.unpack(head)[1] == F.BLANK_MAGIC:
            pos = log.segment_of(pos) + log.segment_size
            continue
        m = _record(log, pos)
        if m is None:
            return None
        if (m.sysflag & F.TX_MASK) != F.TX_ROLLBACK and (m.properties.get(PROP_UNIQ_KEY) or m.keys):
            return pos
        pos += m.size
    return None


def _record(log: CommitLog, pos: int) -> Message | None:
    head = log.read_bytes(pos, 4)
    size = int.from_bytes(head, "big", signed=True) if len(head) == 4 else 0
    if size <= 0:
        return None
    try:
        return log.read(pos, size)
    except (RecordError, OSError):
        return None
