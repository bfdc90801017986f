"""The consumer loop's clocks: when a periodic look is due (:func:`backstop`) and when the
delay scheduler runs next (:class:`DelayClock`)."""
from __future__ import annotations

import math
import time

from store.log.messagestore import Store


def backstop(at: float) -> float:
    """A periodic look (membership, rebalance, persist, delays) due at ``at``, put off to the
    next whole second of the monotonic clock: an idle member's looks then fall due together,
    one wake-up for all of them (and with the other members of the process), not one each.
    They are backstops (a change wakes the loop at once): a second later costs nothing."""
    return float(math.ceil(at))


class DelayClock:
    """When the loop next runs the delay scheduler (``at``, monotonic)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.at = 0.0
        # What the last pass saw: the schedule queues' ends and the next delivery time. A
        # look after new records (:meth:`soon`) that finds the same ends and nothing due yet
        # skips the pass (the progress file read, the lock, the queues scanned twice): the
        # new records were not delayed ones, and a waiting consumer need not pay for it.
        self._seen: tuple[tuple[int, ...], int | None] | None = None

    def _ends(self) -> tuple[int, ...]:
        from store import names
        st = self.store
        if not st.has_topic(names.SCHEDULE_TOPIC):
            return ()
        return tuple(st.max_offset(names.SCHEDULE_TOPIC, q) for q in range(st.topic(names.SCHEDULE_TOPIC).queues))

    def deliver(self, now: float) -> None:
        """Deliver the due delayed messages, and look again when the next one is due (a new
        one wakes the loop: every level is at least a second, so 1 s is the longest it can
        wait past its time)."""
        from store.log.schedule import deliver_due, next_due
        ends = self._ends()
        if self._seen is not None and self._seen[0] == ends and (
                self._seen[1] is None or self._seen[1] > int(time.time() * 1000)):
            due = self._seen[1]
        else:
            deliver_due(self.store)
            due = next_due(self.store)
            self._seen = (ends, due)
        if due is None:
            # nothing scheduled: a new delayed message is a new batch (the checkpoint), which
            # calls :meth:`soon` (polled or not)
            self.at = math.inf
            return
        wait_s = (due - int(time.time() * 1000)) / 1000
        self.at = now + min(1.0, max(0.2, wait_s))

    def soon(self) -> None:
        """Delayed messages may be due soon (a copy was sent back, new records came): look
        for them within 0.2 s, not at the idle backstop."""
        self.at = min(self.at, time.monotonic() + 0.2)
