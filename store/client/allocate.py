"""RocketMQ's queue allocation strategies, as pure functions.

A consumer group shares a topic's queues among its live members. Every member runs the same
strategy over the same sorted inputs, so all of them arrive at the same split without talking
to each other; ``mqctl rebalance`` runs the very same code to preview it. This module owns no
file.

Strategies, by their CLI name (RocketMQ class in brackets; the algorithms are restated in
``reference/rocketmq.md`` §5.3):

``averagely`` (AllocateMessageQueueAveragely, RocketMQ's default)
    contiguous blocks; the first ``n % m`` members get one queue more.
``circle`` (AllocateMessageQueueAveragelyByCircle)
    round robin: queue k goes to member ``k % m``.
``hash`` (AllocateMessageQueueConsistentHash)
    a ring of ``virtual_nodes`` points per member (key ``"<cid>-<r>"``); a queue belongs to the
    first point at or after the hash of ``str(queue)``. Stable when members come and go, but
    can be very uneven.
``config`` (AllocateMessageQueueByConfig)
    every member gets the configured queues, unchecked.

Inputs are sorted here as ``RebalanceImpl`` sorts them before calling a strategy: queues by
(topic, brokerName, queueId), client ids by plain string order (``"c10"`` before ``"c2"``).
Duplicates are dropped first; RocketMQ would leave queues unassigned if a broker ever listed
a client twice.
"""
from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from store.errors import UsageError
from store.names import BROKER_NAME

# The store is one "broker"; queues still carry a broker name so that their text form (the
# consistent-hash key) and their sort order are RocketMQ's.
DEFAULT_VIRTUAL_NODES = 10
STRATEGIES = ("averagely", "circle", "hash", "config")


@dataclass(frozen=True, order=True, slots=True)
class MessageQueue:
    """One queue of one topic. Field order gives RocketMQ's ``MessageQueue.compareTo``."""

    topic: str
    broker_name: str
    queue_id: int

    def __str__(self) -> str:
        # MessageQueue.toString(): the consistent-hash ring hashes exactly this text.
        return f"MessageQueue [topic={self.topic}, brokerName={self.broker_name}, queueId={self.queue_id}]"


def queues_of(topic: str, queue_ids: Iterable[int], broker_name: str = BROKER_NAME) -> list[MessageQueue]:
    """The queues ``queue_ids`` of ``topic``, e.g. ``range(queue_count)`` or ``--queues 0,3``."""
    return [MessageQueue(topic, broker_name, qid) for qid in queue_ids]


Assignment = dict[str, list[MessageQueue]]


def allocate(
    strategy: str,
    current_id: str,
    mq_all: Iterable[MessageQueue],
    cid_all: Iterable[str],
    config_queues: Sequence[MessageQueue] | None = None,
    virtual_nodes: int = DEFAULT_VIRTUAL_NODES,
) -> list[MessageQueue]:
    """The queues ``current_id`` should hold; [] when it is not among ``cid_all``.

    Raises :class:`UsageError` for an unknown strategy and, with RocketMQ's messages, for an
    empty current id, queue list or id list (except ``config``, which checks nothing).
    """
    _check_strategy(strategy)
    if strategy == "config":
        return _configured(config_queues)
    if not current_id:
        raise UsageError("currentCID is empty")
    return allocate_all(strategy, mq_all, cid_all, config_queues, virtual_nodes).get(current_id, [])


def member_share(strategy: str, current_id: str, topic: str, own_topic: str, queue_count: int,
                 cid_all: Iterable[str], config_ids: Iterable[int] = ()) -> list[MessageQueue]:
    """The queues of ``topic`` a member with ``strategy`` takes (the live rebalance, and its
    preview of members that disagree on the strategy): a ``config`` member its ``config_ids``
    on its ``own_topic``, and on any other topic (its group's retry topic) an average share."""
    mqs = queues_of(topic, range(queue_count))
    if strategy == "config" and topic == own_topic:
        return allocate("config", current_id, mqs, cid_all, config_queues=queues_of(topic, config_ids))
    return allocate("averagely" if strategy == "config" else strategy, current_id, mqs, cid_all)


def allocate_all(
    strategy: str,
    mq_all: Iterable[MessageQueue],
    cid_all: Iterable[str],
    config_queues: Sequence[MessageQueue] | None = None,
    virtual_nodes: int = DEFAULT_VIRTUAL_NODES,
) -> Assignment:
    """Every member's queues, keyed in sorted id order; a member left out gets []."""
    _check_strategy(strategy)
    cids = sorted(set(cid_all))
    if strategy == "config":
        return {cid: _configured(config_queues) for cid in cids}
    mqs = sorted(set(mq_all))
    if not mqs:
        raise UsageError("mqAll is null or mqAll empty")
    if not cids:
        raise UsageError("cidAll is null or cidAll empty")
    if strategy == "averagely":
        return _averagely(mqs, cids)
    if strategy == "circle":
        return _by_circle(mqs, cids)
    return _consistent_hash(mqs, cids, virtual_nodes)


def _check_strategy(name: str) -> None:
    if name not in STRATEGIES:
        raise UsageError(f"unknown allocation strategy {name!r}: use one of {', '.join(STRATEGIES)}")


def _configured(config_queues: Sequence[MessageQueue] | None) -> list[MessageQueue]:
    # ByConfig performs no checks: every member simply takes the configured list.
    if config_queues is None:
        raise UsageError("strategy config needs the list of queues to consume (--queues)")
    return list(config_queues)


def _averagely(mqs: list[MessageQueue], cids: list[str]) -> Assignment:
    n, m = len(mqs), len(cids)
    mod = n % m
    result: Assignment = {}
    for index, cid in enumerate(cids):
        if n <= m:
            size = 1
        else:
            size = n // m + 1 if index < mod else n // m
        start = index * size if index < mod else index * size + mod
        # With more members than queues, start runs past the end: those members get nothing.
        count = min(size, n - start)
        result[cid] = [mqs[(start + i) % n] for i in range(max(count, 0))]
    return result


def _by_circle(mqs: list[MessageQueue], cids: list[str]) -> Assignment:
    m = len(cids)
    return {cid: mqs[index::m] for index, cid in enumerate(cids)}


def md5_hash(key: str) -> int:
    """ConsistentHashRouter's default hash: first 4 bytes of MD5, unsigned big-endian."""
    # imported here: only this strategy needs it (~2 ms of every consumer's start-up)
    import hashlib
    return int.from_bytes(hashlib.md5(key.encode("utf-8")).digest()[:4], "big")


def _consistent_hash(mqs: list[MessageQueue], cids: list[str], virtual_nodes: int) -> Assignment:
    if virtual_nodes < 1:
        # RocketMQ rejects only negative counts; zero would leave every queue unassigned.
        raise UsageError(f"illegal virtualNodeCnt :{virtual_nodes}")
    ring: dict[int, str] = {}
    for cid in cids:
        for replica in range(virtual_nodes):
            # A TreeMap.put: on equal hashes the node inserted later replaces the earlier one.
            ring[md5_hash(f"{cid}-{replica}")] = cid
    points = sorted(ring)
    result: Assignment = {cid: [] for cid in cids}
    for mq in mqs:
        at = bisect_left(points, md5_hash(str(mq)))
        # tailMap(hash).firstKey(), or the smallest point when the key is past the last one.
        owner = ring[points[at % len(points)]]
        result[owner].append(mq)
    return result
