"""The consumer loop's clocks: when a periodic look is due (:func:`backstop`), when the
delay scheduler runs next (:class:`DelayClock`) and when the group's membership is looked at
(:class:`MemberClock`)."""
from __future__ import annotations

import math
import time

from store.layout import Layout
from store.log.messagestore import Store

# After the group's directory changes, the membership is looked at again this long after the
# change, whatever the first look said: a probe can see a dead member alive just after the
# change that announced its death (the kernel queues the close's event before it drops the
# flock, and a pruner holds the dead member's lock for a moment while it deletes its files).
MEMBER_RELOOKS_S = (0.05, 0.5)


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


class MemberClock:
    """When the loop next looks at the group's membership (``at``, monotonic; never without a
    group), and what it saw (``token``: the live members' client ids, sorted). A look costs a
    directory listing and a lock probe a member, no JSON read."""

    def __init__(self, layout: Layout, group: str | None, own: str | None = None) -> None:
        self.layout = layout
        self.group = group
        self.own = own   # this member's client id (its own expiry is no reason to look)
        self.at = 0.0 if group is not None else math.inf
        self.token: tuple[str, ...] | None = None
        self._relooks: list[float] = []   # the next looks after a change (monotonic times)

    def look(self, now: float, polled: bool) -> bool:
        """Look at the membership: whether it changed since the last look (a rebalance is due)."""
        from store.client.members import members_look
        assert self.group is not None
        token, expiry = members_look(self.layout, self.group, self.own)
        changed, self.token = token != self.token, token
        # a death changes no file where the group's directory is polled: look every few seconds
        self.at = self._relooks.pop(0) if self._relooks else backstop(now + 5.0) if polled else math.inf
        if expiry is not None:   # nor does a member's getting stuck: look when one would expire
            self.at = min(self.at, backstop(now + (expiry - time.time() * 1000) / 1000))
        return changed

    def changed(self) -> None:
        """The group's directory changed: look now, and again shortly after."""
        now = time.monotonic()
        self.at = 0.0
        self._relooks = [now + d for d in MEMBER_RELOOKS_S]

    def allocated_among(self, members: tuple[str, ...] | None, now: float) -> None:
        """A rebalance allocated the queues among ``members`` (its own look): later looks are
        compared with them. When they are not what the last look saw, one of the two saw a
        dying or pruned member; looks again soon tell which."""
        if members is None or members == self.token:
            return
        self.token = members
        self._relooks = [now + d for d in MEMBER_RELOOKS_S]
        self.at = min(self.at, self._relooks.pop(0))
