"""Where a group starts a queue it has no committed offset for (store/client/startpoint.py):
``--from`` / ``start_from`` for a group new to the topic, the queue's first message for one that
already has offsets in it. A group stopped while ``topic update`` added queues skipped every
message sent to them before it ran again (``last`` put it at their end, and it committed past
them); a running member already read them from 0. Real ``mqctl`` processes and Python consumers."""
from __future__ import annotations

import asyncio

import pytest

import store
from store import Store
from store.client.options import ConsumeOptions
from store.client.runtime import ConsumerRuntime
from store.log.offsets import ClusterOffsetStore
from store.log.record import Draft
from tests.procs import MQ

MODES = {"clustering": [], "orderly": ["--orderly"], "broadcast": ["--broadcast", "--client-id", "Z"]}


def grown_while_stopped(mq: MQ, mode: list[str]) -> None:
    """The tester's repro: a group reads a 2-queue topic and stops, the topic grows to 4 queues,
    one message goes to each new queue, and the group is not running."""
    mq.ok("topic", "create", "T", "--queues", "2")
    mq.send_lines("T", ["before-0", "before-1"])
    assert sorted(mq.ok("consume", "T", "-g", "G", "--from", "first", "-e", *mode).out.split()) == \
        ["before-0", "before-1"]
    mq.ok("topic", "update", "T", "--queues", "4")
    mq.ok("send", "T", "after-2", "-q", "2")
    mq.ok("send", "T", "after-3", "-q", "3")


@pytest.mark.parametrize("mode", list(MODES.values()), ids=list(MODES))
def test_a_group_stopped_while_queues_were_added_reads_them_from_their_first_message(mq: MQ, mode: list[str]) -> None:
    grown_while_stopped(mq, mode)
    # the default --from last: the group has offsets in the topic, so it is not new to it
    assert sorted(mq.ok("consume", "T", "-g", "G", "-e", *mode).out.split()) == ["after-2", "after-3"]
    rows = mq.ok("progress", "-g", "G", "--json").json_lines()
    assert {(r["queueId"], r["consumerOffset"], r["lag"]) for r in rows if r["topic"] == "T"} == \
        {(0, 1, 0), (1, 1, 0), (2, 1, 0), (3, 1, 0)}
    assert mq.ok("consume", "T", "-g", "G", "-e", *mode).out == ""   # (and once only)


@pytest.mark.parametrize("orderly", [False, True], ids=["concurrent", "orderly"])
def test_a_python_consumer_of_a_group_stopped_while_queues_were_added_reads_them(mq: MQ, orderly: bool) -> None:
    grown_while_stopped(mq, ["--orderly"] if orderly else [])
    with store.Consumer("T", group="G", path=mq.root, orderly=orderly) as consumer:
        got = sorted(m.text for m in consumer.messages(exit_at_end=True))
    assert got == ["after-2", "after-3"]


def test_an_asyncio_consumer_of_a_group_stopped_while_queues_were_added_reads_them(mq: MQ) -> None:
    grown_while_stopped(mq, [])

    async def read() -> list[str]:
        async with store.AsyncConsumer("T", group="G", path=mq.root) as consumer:
            return sorted([m.text async for m in consumer.messages(exit_at_end=True)])
    assert asyncio.run(read()) == ["after-2", "after-3"]


@pytest.mark.parametrize("mode", list(MODES.values()), ids=list(MODES))
def test_a_group_new_to_the_topic_still_starts_where_from_says(mq: MQ, mode: list[str]) -> None:
    """A new group (also one whose offsets were deleted, and one with offsets in another topic
    only) skips the backlog with the default ``last``, on queues added before it first ran too."""
    mq.ok("topic", "create", "T", "--queues", "2")
    mq.ok("topic", "create", "U", "--queues", "1")
    mq.send_lines("U", ["u"])
    assert mq.ok("consume", "U", "-g", "G", "--from", "first", "-e", *mode).out.split() == ["u"]
    mq.send_lines("T", ["old-0", "old-1"])
    mq.ok("topic", "update", "T", "--queues", "3")
    mq.ok("send", "T", "old-2", "-q", "2")
    assert mq.ok("consume", "T", "-g", "G", "-e", *mode).out == ""
    mq.ok("send", "T", "new-2", "-q", "2")
    assert mq.ok("consume", "T", "-g", "G", "-e", *mode).out.split() == ["new-2"]
    mq.ok("offsets", "delete", "-g", "G", "--yes", *(["--client-id", "Z"] if "--broadcast" in mode else []))
    assert mq.ok("consume", "T", "-g", "G", "-e", *mode).out == ""   # new again: the start position
    mq.ok("send", "T", "newer-0", "-q", "0")
    assert mq.ok("consume", "T", "-g", "G", "-e", *mode).out.split() == ["newer-0"]


def test_a_new_broadcast_client_of_a_group_starts_where_from_says(mq: MQ) -> None:
    """Broadcast offsets are each client's: another client's offsets do not make the topic known."""
    grown_while_stopped(mq, ["--broadcast", "--client-id", "Z"])
    assert mq.ok("consume", "T", "-g", "G", "-e", "--broadcast", "--client-id", "Y").out == ""


def test_members_of_a_new_group_started_together_all_start_where_from_says(store: Store) -> None:
    """"New to the topic" is read when a member opens, before it joins: a member of a new group
    that starts a queue after another member committed its own starts (a group whose members
    started together) does not take the group for an old one and read the queue's backlog."""
    store.create_topic("T", 2)
    store.put([Draft(topic="T", body=b"backlog", queue_id=q) for q in (0, 1)])
    opts = ConsumeOptions(topic="T", group="G", client_id="b", install_signals=False)  # type: ignore[call-arg]
    rt = ConsumerRuntime(store, opts, warn=lambda _m: None)
    rt.keeper.open()
    ClusterOffsetStore(store.layout).commit("G", {("T", 0): 1})   # another member's start, at the end
    try:
        assert rt.keeper.start([("T", 1)]) == {("T", 1): 1}
    finally:
        rt.keeper.close()
