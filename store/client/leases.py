"""How long a consumer group member's claims last without renewal: its queue locks' leases
and its membership. RocketMQ's broker lets an orderly queue lock expire 60 s after its last
renewal (clients renew every 20 s and stop consuming 30 s after the last one that worked) and
drops a client it has not heard a heartbeat from for 120 s, so that the others rebalance
(reference §6.1, §6.2). Here a member proves it is alive by its flocks, which a dead process
loses at once; these times only matter for one alive but stuck (stopped, swapped out, hung).

``MQCTL_TEST_LEASE_SCALE`` (for tests only: a factor, e.g. ``0.05``) scales every one of
them, so that a test can stop a member with SIGSTOP and see the group take its queues
without waiting minutes. It is read once, at import; anything but a number in (0, 1] is
ignored.
"""
from __future__ import annotations

import os

SCALE_ENV = "MQCTL_TEST_LEASE_SCALE"


def _scale(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        return 1.0
    return value if 0.0 < value <= 1.0 else 1.0


SCALE = _scale(os.environ.get(SCALE_ENV, ""))

STORE_LEASE_MS = int(60_000 * SCALE)   # broker's lockMaxLiveTime: a record older than this may be broken
CLIENT_LEASE_MS = int(30_000 * SCALE)  # client's lockMaxLiveTime: a holder stops handing out batches
# A holder renews its queue locks before it hands out a batch when the last renewal is this old
# (RocketMQ's lockInterval; a batch may be handed out for the client lease, 30 s, after one).
RENEW_INTERVAL_S = 20.0 * SCALE
# An idle holder renews only for the store lease (60 s, after which a contender may break the
# lock): 20 s to spare, as much as between an active holder's renewal and its client lease.
# A member also proves it is not stuck this often, with or without queues (``members.py``).
IDLE_RENEW_S = 40.0 * SCALE
# A member not heard from for this long no longer counts when the group's queues are shared
# (RocketMQ's channel expiry): the others take its queues, breaking its locks, whose store
# lease ran out by then. Three idle renewals missed.
MEMBER_EXPIRY_MS = int(120_000 * SCALE)
