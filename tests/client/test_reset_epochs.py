"""A member learns of ``offsets reset --force`` by the reset epochs, per topic: what it learns
of one topic must not hide a reset of another it holds queues of."""
from __future__ import annotations

from store import Store
from store.client.holding import Holdings
from store.client.offset_keeper import OffsetKeeper
from store.client.options import ConsumeOptions
from store.client.process_queue import ProcessQueue
from store.log.offsets import ClusterOffsetStore

RETRY = "%RETRY%G"


def test_a_commit_skipped_for_one_topic_leaves_another_topics_reset_to_be_seen(store: Store) -> None:
    """Two resets before the member looks (the topic's and its retry topic's, two commands):
    its next commit names only the topic (nothing else moved) and is skipped for it. The retry
    topic's reset must still let its queue go, not be taken for known: else the member goes on
    from where it was and its next commit writes that over the reset."""
    store.create_topic("T", 1)
    warned: list[str] = []
    held = Holdings()
    keeper = OffsetKeeper(store, ConsumeOptions(topic="T", group="G", client_id="m1", from_where="first"),
                          held, ["T", RETRY], warned.append)
    keeper.threaded = False
    keeper.open()
    for key in keeper.start([("T", 0), (RETRY, 0)]):
        held.pqs[key] = ProcessQueue(*key)
    keeper.advance(("T", 0), 5)
    keeper.advance((RETRY, 0), 7)
    keeper.persist()
    table = ClusterOffsetStore(store.layout)
    table.reset("G", RETRY, {0: 0})
    table.reset("G", "T", {0: 1})
    keeper.advance(("T", 0), 6)
    keeper.persist()
    assert ("T", 0) not in held.pqs
    keeper.check_reset()   # (a look at the offsets file: an idle member's way to learn of a reset)
    assert (RETRY, 0) not in held.pqs, warned
    keeper.advance((RETRY, 0), 8)   # (a batch of it that was in flight ends)
    keeper.persist()
    assert table.read_group("G") == {("T", 0): 1, (RETRY, 0): 0}


def test_a_reset_lets_go_of_a_queue_being_dropped_too(store: Store) -> None:
    """A queue given away (a rebalance) is dropped once its batch in flight ends, its offset
    then committed: a reset of its topic meanwhile, learned by a commit of another queue,
    must keep that commit (of an offset from before the reset) from being written over it."""
    store.create_topic("T", 2)
    warned: list[str] = []
    held = Holdings()
    keeper = OffsetKeeper(store, ConsumeOptions(topic="T", group="G", client_id="m1", from_where="first"),
                          held, ["T"], warned.append)
    keeper.threaded = False
    keeper.open()
    for key in keeper.start([("T", 0), ("T", 1)]):
        held.pqs[key] = ProcessQueue(*key)
    keeper.advance(("T", 0), 5)
    keeper.advance(("T", 1), 5)
    keeper.persist()
    held.drop(("T", 1))   # (given away: its batch in flight still ends)
    table = ClusterOffsetStore(store.layout)
    table.reset("G", "T", {0: 1, 1: 1})
    keeper.advance(("T", 0), 6)
    keeper.persist(only={("T", 0)})
    assert ("T", 0) not in held.pqs
    keeper.advance(("T", 1), 9)   # its batch ends
    keeper.persist(force=True, only={("T", 1)}, increase_only=True)   # (as settle_drops does)
    assert table.read_group("G") == {("T", 0): 1, ("T", 1): 1}, warned
