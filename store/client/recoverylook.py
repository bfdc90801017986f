"""What the next opener of a store would repair, seen by ``mqctl top`` (``Monitor``) without
repairing anything: the same cheap looks the opener takes first, by the modules that own them.

* The commit log against the checkpoint (``preflight.recover_if_dirty``'s test): an end that
  is not the checkpoint's written end (a torn or unfinished batch past it, a log cut short of
  it), an unreadable checkpoint, another boot, a key-index rebuild left half done. A batch in
  flight shows the same for an instant, between its records and its checkpoint: while a
  process holds the write lock (the kernel's lock table, read again then) it counts only when
  a later look finds it unchanged ``STUCK_S`` on; with the lock free it counts at once
  (``top --once`` sees it).
* A consume queue cut short (``queueends.inspect``, the opener's look): asked only of a queue
  whose files show a sign — changed since the checkpoint was last written (a batch writes its
  entries before it), or not a whole number of entries — that the next look finds as it was
  (one being written is its writer's to check), and again only when its files changed since.
  The first look goes through every queue at once; later ones through ``QUEUES_PER_LOOK`` of
  them in turn (a listing and a ``stat`` each, both kept while nothing changes), so a queue
  cut by hand shows within a round of looks on a store of hundreds of queues (the next look
  on a store of a few dozen), and a look stays cheap.
"""
from __future__ import annotations

import os
import time

from store.heldlocks import HeldLocks
from store.log import checkpoint as ckpt
from store.log import format as F
from store.log import indexfence
from store.log.consumequeue import changed_since
from store.log.queueends import inspect

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from store.log.messagestore import Store
    from store.log.topics import TopicConfig

# How long the log and the checkpoint must stay apart, the same, while a process holds the
# write lock, to count: far longer than a batch takes between its records and its checkpoint.
STUCK_S = 1.0
# Queues looked at per look after the first (which looks at all of them).
QUEUES_PER_LOOK = 32


class RecoveryLook:
    """Repeated looks at one store for what an opener would repair (see the module
    docstring); :meth:`look` returns one phrase per finding."""

    def __init__(self) -> None:
        # (checkpoint's end, log's end) last seen apart, and since when
        self._log_state: tuple[tuple[int, int], float] | None = None
        self._shape: list[tuple[str, int]] = []   # (topic, queues) as the last look found them
        self._every: list[tuple[str, int]] = []   # every queue, in the order they are looked at
        # its files' stamp, and whether the queue was settled at it (no sign, or read)
        self._seen: dict[tuple[str, int], tuple[tuple[int, ...], bool]] = {}
        self._pending: set[tuple[str, int]] = set()   # queues the next look looks at
        self._found: dict[tuple[str, int], str] = {}   # what is wrong with it
        self._turn = 0
        self._first = True

    def look(self, store: Store, held: HeldLocks, table: dict[str, TopicConfig]) -> tuple[str, ...]:
        """One look; ``table``: the store's topics (as this look read them)."""
        out = self._log(store, held)
        out += self._queue_findings(store, table)
        return tuple(out)

    # -- the commit log against the checkpoint ---------------------------------------------
    def _log(self, store: Store, held: HeldLocks) -> list[str]:
        lay = store.layout
        out = []
        if indexfence.rebuilding_in(lay.index_dir):
            out.append("a rebuild of the key index was left unfinished (a killed store recover)")
        end = store.commitlog.end()
        cp = ckpt.read(lay.checkpoint)
        if cp is None and end == 0 and not lay.checkpoint.exists():
            return out   # (a store nothing was written to)
        if cp is not None and cp.boot_id != store.boot_id and end > 0:
            out.append("the machine restarted since the last write: the commit log's tail is checked")
        if cp is not None and cp.written_end == end:
            self._log_state = None
            return out
        # (in this order: a batch appends its records and writes its checkpoint under the
        # write lock; found free after the log's end was read, no batch that wrote records
        # before it is still to write its checkpoint, and one begun since moves the end)
        free = held.available and HeldLocks().held(lay.write_lock) is not True
        cp = ckpt.read(lay.checkpoint)
        again = store.commitlog.end()
        if cp is not None and cp.written_end == again:
            self._log_state = None
            return out
        state = (-1 if cp is None else cp.written_end, again)
        now = time.monotonic()
        since = self._log_state[1] if self._log_state is not None and self._log_state[0] == state else None
        if since is None:
            self._log_state = (state, now)
        if (free and again == end) or (since is not None and now - since >= STUCK_S):
            if cp is None:
                out.append("the checkpoint is missing or unreadable")
            else:
                how = ("past it: a torn or unfinished batch" if again > cp.written_end
                       else "short of it: the log was cut; a recovery drops the entries of the records lost")
                out.append(f"the commit log ends at offset {again}, the checkpoint says {cp.written_end} ({how})")
        return out

    # -- consume queues cut short ----------------------------------------------------------
    def _queue_findings(self, store: Store, table: dict[str, TopicConfig]) -> list[str]:
        shape = [(name, cfg.queues) for name, cfg in table.items()]
        if shape != self._shape:
            self._shape = shape
            self._every = [(name, q) for name, n in sorted(shape) for q in range(n)]
            known = set(self._every)
            for gone in [k for k in self._seen if k not in known]:
                del self._seen[gone]
                self._found.pop(gone, None)
        every = self._every
        if every:
            if self._first:
                turn = every
            else:
                start = self._turn % len(every)
                turn = every[start:start + QUEUES_PER_LOOK]
                self._turn = start + len(turn)
                again = [k for k in self._pending if k in self._seen][:QUEUES_PER_LOOK]
                turn = again + [k for k in turn if k not in self._pending]
            self._pending = set()
            try:
                ck_ns = os.stat(store.layout.checkpoint).st_ctime_ns
            except FileNotFoundError:
                ck_ns = None
            if ck_ns is not None:
                store.engine.forget_log_tail()   # (read again: the log may have changed since)
                if any([self._queue(store, topic, qid, ck_ns) for topic, qid in turn]):
                    store.close_queues()   # (the descriptors a look into the queue opened: none kept)
        self._first = False
        return [f"consume queue {t}/{q} {why}" for (t, q), why in sorted(self._found.items())]

    def _queue(self, store: Store, topic: str, qid: int, ck_ns: int) -> bool:
        """Look at one queue again if its files changed; True when its entries were read
        (``inspect``). A queue that shows a sign is read only once a look finds its files as
        the look before it left them (the first look reads it at once): one being written is
        its writer's to check, and a look stays cheap while a producer writes."""
        k = (topic, qid)
        cq = store.queue(topic, qid)
        segs = cq.segments()
        try:
            st = os.stat(cq.segment_path(segs[-1])) if segs else None
        except FileNotFoundError:
            st = None
        key = (len(segs), *((st.st_ino, st.st_size, st.st_ctime_ns) if st else ()))
        had = self._seen.get(k)
        if had is not None and had[0] == key:
            if had[1]:
                return False   # (settled, and not changed since)
        else:
            self._found.pop(k, None)
            if st is None:
                sign = changed_since(cq, ck_ns)
            else:   # (changed_since's test, on the stat at hand; a segment made or removed)
                sign = (st.st_size % F.CQ_ENTRY.size != 0 or st.st_ctime_ns >= ck_ns
                        or (had is not None and had[0][:2] != key[:2]))
            if not sign:
                self._seen[k] = (key, True)
                return False
            if not self._first:
                self._seen[k] = (key, False)
                self._pending.add(k)   # (looked at again by the next look)
                return False
        self._seen[k] = (key, True)
        try:
            found = inspect(store.engine, topic, qid, cq)
        except OSError:
            found = None   # (changed under the look: a later one decides)
        if found is not None:
            self._found[k] = found.why
        return True
