"""The queues a consumer group member holds: their process queues, those being dropped, and
their queue locks.

A queue is *held* while it is pulled and handed out (``pqs``), then *dropping* from when a
rebalance gives it away (or its lock was lost) until its in-flight batch finished and its
offset was persisted (see :meth:`store.client.rebalance.Rebalancer.settle_drops`): only then is
its lock released. What to hold is the rebalancer's business; this table only keeps the
state and the transitions every part of the member may make.

A member that leaves while handler calls of its own still run (a Ctrl-C, an error: the
shutdown does not wait for them) keeps the locks of their queues until they end
(:meth:`Holdings.keep_while_running`): another member must not take a queue, and hand out its
messages, while this one still handles one of them (an orderly queue is handled by one process
at a time; an in-flight message handled twice at once). Nothing renews a kept lock: a call that
runs on for the store lease (60 s) after the last renewal lets a contender break the lock
(``qlocks``), as for a member stuck that long; if the process dies first, the OS drops it.
"""
from __future__ import annotations

import threading

from store.client.process_queue import ProcessQueue
from store.log.offsets import QueueKey

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Any, Callable

    from store.client.dedup import DedupLog
    from store.client.qlocks import QueueLock
    from store.log.record import Message


class Holdings:
    """The member's queues (see the module docstring). The three tables are changed in
    place, never replaced: the parts may keep references to them."""

    def __init__(self) -> None:
        self.pqs: dict[QueueKey, ProcessQueue] = {}
        self.dropping: dict[QueueKey, ProcessQueue] = {}
        self.locks: dict[QueueKey, QueueLock] = {}
        self.retake = False   # a queue was let go under us (:meth:`lose`, :meth:`forget`):
        #                       the member rebalances at once, to take it again
        # id(batch) -> (its queue, the process queue it was handed out of), while a pool sink has it
        self.handed: dict[int, tuple[QueueKey, ProcessQueue]] = {}
        self.left = False   # the member left its group (shutdown): no handler call starts any more
        # --dedup, concurrent mode: the group's log, looked at again as a handler starts (may_start)
        self.dedup: DedupLog | None = None

    def may_start(self, batch: list[Message]) -> bool:
        """Whether a handler may still start on ``batch``, handed out earlier: a pool sink asks
        in its own thread just before it starts one (``may_start``). Not once the batch's queue
        is let go or being dropped, nor once its lock's client lease ran out: the process was
        stopped (SIGSTOP, a hang) for longer, and another member may consume the queue by now,
        as RocketMQ's ConsumeRequest checks that its process queue was not dropped. Nor once
        the member left. The batch is then handed back untouched (it is the queue's next
        owner's to deliver). Nor (``dedup``) once the log has a message of it: a copy recorded
        while the batch waited for a thread or a ``--threads`` slot, say the first copy's handler
        that ran meanwhile (the hand-out looked before it completed); handed back, the next
        hand-out consumes it without a handler run (``Dispatcher._without_recorded``)."""
        if self.left:   # (its lock released, or kept for the calls still running only)
            return False
        dedup = self.dedup
        if dedup is not None:
            dedup.refresh()
            if any(m.uniq_key and dedup.seen(m.uniq_key) for m in batch):
                return False
        got = self.handed.get(id(batch))
        if got is None:   # (not handed out by the dispatcher: nothing to judge it by)
            return True
        key, pq = got
        if self.pqs.get(key) is not pq:   # let go, or let go and taken again since
            return False
        lock = self.locks.get(key)
        return lock is None or lock.is_valid(100)

    def holds(self, key: QueueKey) -> bool:
        """Whether the queue is held or still being dropped (its offset still ours to move)."""
        return key in self.pqs or key in self.dropping

    def keys(self) -> set[QueueKey]:
        """The queues held or being dropped."""
        return set(self.pqs) | set(self.dropping)

    def drop(self, key: QueueKey) -> None:
        """Stop pulling a queue; it is released once its in-flight batch is done."""
        self.dropping[key] = self.pqs.pop(key)

    def lose(self, key: QueueKey) -> None:
        """The queue lock is no longer ours (its file was deleted or replaced, or a renewal
        failed): stop handing out batches at once, and drop the queue like a rebalance does,
        so a batch still in a handler is committed rather than forgotten. Its offset is then
        persisted increase-only: everything below it was consumed by us, and a new holder
        that already moved further must not be set back (see ``Rebalancer.settle_drops``)."""
        pq = self.pqs.pop(key, None)
        if pq is None:
            return
        pq.lost = True
        self.retake = True
        self.dropping[key] = pq
        lock = self.locks.pop(key, None)
        if lock is not None:
            lock.release()  # a no-op on a lost lock; frees the descriptor otherwise

    def not_ours(self, key: QueueKey, check_lock: bool) -> bool:
        """Whether a commit must not set the queue's offset back: its lock was lost (it is being
        dropped as lost), or (``check_lock``) its lock is no longer valid, though the loss was
        not noticed yet: its lease ran out while the member was blocked (a write to a stdout
        whose reader stopped reading, a stop), and another member may have moved the offset on."""
        pq = self.dropping.get(key)
        if pq is not None and pq.lost:
            return True
        lock = self.locks.get(key)
        return check_lock and lock is not None and not lock.is_valid(0)

    def lapsed(self, key: QueueKey, n: int, warn: Callable[[str], None]) -> bool:
        """After an inline sink's write of ``n`` messages of ``key`` (its lock valid when the write
        began): whether the lock's lease ran out during the write (blocked on a stdout whose reader
        stopped reading, say: no renewal meanwhile). The queue is then let go at once
        (:meth:`lose`): nothing more of it is written, and the write's offset is committed
        increase-only, never setting back the queue's new owner. Said on stderr: those ``n``
        messages may be delivered by the new owner too."""
        lock = self.locks.get(key)
        if lock is None or key not in self.pqs or lock.is_valid(100):
            return False
        warn(f"the lock on queue {key[0]}:{key[1]} ran out during a write of {n} of its messages (blocked "
             f"past its lease): another member may deliver them too; nothing more is delivered from the queue")
        self.lose(key)
        return True

    def forget(self, key: QueueKey) -> None:
        """Let go of a held or dropping queue at once, its lock released (its offsets were
        reset under it: nothing it holds is worth finishing, nor its offset worth committing)."""
        if self.pqs.pop(key, None) is None:
            del self.dropping[key]
        self.retake = True
        self.release_lock(key)

    def release_lock(self, key: QueueKey) -> None:
        lock = self.locks.pop(key, None)
        if lock is not None:
            lock.release()

    def keep_while_running(self, running: dict[Any, tuple[Any, ...]]) -> None:
        """(The member leaves.) Take the lock of each queue with a handler call still running
        (``running``: future -> (queue, ...), as ``Dispatcher.futures``) out of :attr:`locks`,
        so that leaving does not release it: it is released when the last of those calls
        ends, in the thread that ran it (see the module docstring)."""
        by_key: dict[QueueKey, list[Any]] = {}
        for fut, entry in list(running.items()):
            # (running: started in a thread, or in hand of an iteration; one not started by now
            # starts no handler call, :meth:`may_start` says no once :attr:`left` is set)
            if fut.running() and entry[0] in self.locks:
                by_key.setdefault(entry[0], []).append(fut)
        for key, futs in by_key.items():
            _release_after(self.locks.pop(key), futs)


def _release_after(lock: QueueLock, futs: list[Any]) -> None:
    """Release ``lock`` once every one of ``futs`` is done (cancelled, failed or returned)."""
    left, guard = [len(futs)], threading.Lock()

    def done(_fut: Any) -> None:
        with guard:
            left[0] -= 1
            last = left[0] == 0
        if last:
            lock.release()

    for fut in futs:
        fut.add_done_callback(done)   # (called at once if it is done by now)
