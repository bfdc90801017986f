"""Allocation strategies against RocketMQ's test vectors (reference/rocketmq.md §5.4)."""
from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from store.client.allocate import MessageQueue, allocate, allocate_all, md5_hash, queues_of
from store.errors import UsageError
from store.names import BROKER_NAME


def mqs(count: int, topic: str = "topic", broker: str = "brokerName") -> list[MessageQueue]:
    return queues_of(topic, range(count), broker)


def cids(prefix: str, count: int) -> list[str]:
    return [f"{prefix}{i}" for i in range(count)]


def queue_ids(assignment: dict[str, list[MessageQueue]]) -> dict[str, list[int]]:
    return {cid: [mq.queue_id for mq in queues] for cid, queues in assignment.items()}


# (strategy, queues, consumers, virtual nodes, expected queue ids per consumer)
VECTORS = [
    pytest.param("averagely", mqs(10), cids("CID_PREFIX", 4), 10,
                 {"CID_PREFIX0": [0, 1, 2], "CID_PREFIX1": [3, 4, 5], "CID_PREFIX2": [6, 7],
                  "CID_PREFIX3": [8, 9]}, id="averagely-10q-4c"),
    pytest.param("circle", mqs(10), cids("CID_PREFIX", 4), 10,
                 {"CID_PREFIX0": [0, 4, 8], "CID_PREFIX1": [1, 5, 9], "CID_PREFIX2": [2, 6],
                  "CID_PREFIX3": [3, 7]}, id="circle-10q-4c"),
    pytest.param("averagely", mqs(5), ["0", "1", "2"], 10,
                 {"0": [0, 1], "1": [2, 3], "2": [4]}, id="averagely-5q-3c"),
    pytest.param("averagely", mqs(19), cids("CID", 10), 10,
                 {**{f"CID{i}": [2 * i, 2 * i + 1] for i in range(9)}, "CID9": [18]},
                 id="averagely-19q-10c"),
    pytest.param("averagely", mqs(3), cids("c", 5), 10,
                 {"c0": [0], "c1": [1], "c2": [2], "c3": [], "c4": []}, id="averagely-more-members"),
    pytest.param("circle", mqs(13), cids("CID", 3), 10,
                 {"CID0": [0, 3, 6, 9, 12], "CID1": [1, 4, 7, 10], "CID2": [2, 5, 8, 11]},
                 id="circle-13q-3c"),
    pytest.param("hash", mqs(20, "topic_test"), cids("CID-", 10), 3,
                 {"CID-0": [3, 5, 8, 18, 19], "CID-1": [], "CID-2": [4], "CID-3": [6, 7, 9],
                  "CID-4": [], "CID-5": [10, 11, 15, 17], "CID-6": [], "CID-7": [0, 2, 12],
                  "CID-8": [1, 13, 14], "CID-9": [16]}, id="hash-v3-20q-10c"),
    pytest.param("hash", mqs(8, "topic_test"), cids("CID-", 3), 10,
                 {"CID-0": [1, 6, 7], "CID-1": [2], "CID-2": [0, 3, 4, 5]}, id="hash-v10-8q-3c"),
]


@pytest.mark.parametrize("strategy, queues, consumers, virtual_nodes, expected", VECTORS)
def test_vector_allocate_all(strategy: str, queues: list[MessageQueue], consumers: list[str],
                             virtual_nodes: int, expected: dict[str, list[int]]) -> None:
    result = allocate_all(strategy, queues, consumers, virtual_nodes=virtual_nodes)
    assert queue_ids(result) == expected


@pytest.mark.parametrize("strategy, queues, consumers, virtual_nodes, expected", VECTORS)
def test_vector_each_member_computes_its_own_share(
        strategy: str, queues: list[MessageQueue], consumers: list[str], virtual_nodes: int,
        expected: dict[str, list[int]]) -> None:
    # Each live member calls allocate() on inputs in whatever order it received them.
    shuffled_queues, shuffled_ids = list(queues), list(consumers)
    random.Random(7).shuffle(shuffled_queues)
    random.Random(8).shuffle(shuffled_ids)
    for cid in consumers:
        mine = allocate(strategy, cid, shuffled_queues, shuffled_ids, virtual_nodes=virtual_nodes)
        assert [mq.queue_id for mq in mine] == expected[cid]


def test_config_gives_every_member_the_configured_queues() -> None:
    configured = mqs(4)
    result = allocate_all("config", mqs(4), cids("CID_PREFIX", 2), config_queues=configured)
    assert queue_ids(result) == {"CID_PREFIX0": [0, 1, 2, 3], "CID_PREFIX1": [0, 1, 2, 3]}


def test_config_returns_the_list_as_is_without_checks() -> None:
    configured = [MessageQueue("T", BROKER_NAME, 3), MessageQueue("T", BROKER_NAME, 0)]
    assert allocate("config", "", [], [], config_queues=configured) == configured


def test_config_without_a_queue_list_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="--queues"):
        allocate("config", "c0", mqs(4), ["c0"])


def test_member_not_in_the_list_gets_nothing() -> None:
    assert allocate("circle", "CID_PREFIX", mqs(10), cids("CID_PREFIX", 4)) == []
    assert allocate("averagely", "other", mqs(10), cids("CID_PREFIX", 4)) == []
    assert allocate("hash", "other", mqs(10), cids("CID_PREFIX", 4)) == []


@pytest.mark.parametrize("strategy", ["averagely", "circle", "hash"])
@pytest.mark.parametrize("current, queues, consumers, message", [
    ("", mqs(4), ["c0"], "currentCID is empty"),
    ("c0", [], ["c0"], "mqAll is null or mqAll empty"),
    ("c0", mqs(4), [], "cidAll is null or cidAll empty"),
])
def test_empty_inputs_raise_rocketmq_messages(strategy: str, current: str, queues: list[MessageQueue],
                                              consumers: list[str], message: str) -> None:
    with pytest.raises(UsageError) as caught:
        allocate(strategy, current, queues, consumers)
    assert caught.value.message == message
    assert caught.value.exit_code == 2


def test_unknown_strategy_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="unknown allocation strategy 'AVG'"):
        allocate_all("AVG", mqs(4), ["c0"])


def test_zero_virtual_nodes_is_refused() -> None:
    with pytest.raises(UsageError, match="illegal virtualNodeCnt :0"):
        allocate_all("hash", mqs(4), ["c0"], virtual_nodes=0)


def test_ids_sort_as_plain_strings() -> None:
    result = allocate_all("averagely", mqs(3), ["c2", "c10", "c1"])
    assert list(result) == ["c1", "c10", "c2"]
    assert queue_ids(result) == {"c1": [0], "c10": [1], "c2": [2]}


def test_queues_sort_by_topic_broker_then_queue_id() -> None:
    queues = [MessageQueue("b", "x", 0), MessageQueue("a", "y", 1), MessageQueue("a", "x", 10),
              MessageQueue("a", "x", 2)]
    assert sorted(queues) == [MessageQueue("a", "x", 2), MessageQueue("a", "x", 10),
                              MessageQueue("a", "y", 1), MessageQueue("b", "x", 0)]
    assert allocate("circle", "only", queues, ["only"]) == sorted(queues)


def test_duplicate_ids_and_queues_count_once() -> None:
    result = allocate_all("averagely", mqs(4) + mqs(4), ["c0", "c1", "c0"])
    assert queue_ids(result) == {"c0": [0, 1], "c1": [2, 3]}


def test_uneven_split_gives_the_first_members_one_more() -> None:
    result = queue_ids(allocate_all("averagely", mqs(8), cids("c", 3)))
    assert result == {"c0": [0, 1, 2], "c1": [3, 4, 5], "c2": [6, 7]}
    result = queue_ids(allocate_all("circle", mqs(8), cids("c", 3)))
    assert result == {"c0": [0, 3, 6], "c1": [1, 4, 7], "c2": [2, 5]}


def test_more_members_than_queues_by_circle() -> None:
    result = queue_ids(allocate_all("circle", mqs(2), cids("c", 4)))
    assert result == {"c0": [0], "c1": [1], "c2": [], "c3": []}


def test_queue_text_form_is_rocketmqs_to_string() -> None:
    assert str(MessageQueue("T", "broker-a", 3)) == "MessageQueue [topic=T, brokerName=broker-a, queueId=3]"
    assert queues_of("T", [0])[0].broker_name == "mqctl"


def test_md5_hash_is_the_first_four_digest_bytes_unsigned() -> None:
    # md5("a") = 0cc175b9 c0f1b6a8...; md5("") = d41d8cd9... (top bit set: must stay positive)
    assert md5_hash("a") == 0x0CC175B9
    assert md5_hash("") == 0xD41D8CD9


def test_consistent_hash_moves_only_the_leavers_queues() -> None:
    before = allocate_all("hash", mqs(40), cids("c", 5))
    after = allocate_all("hash", mqs(40), ["c0", "c1", "c2", "c4"])
    owner_before = {mq: cid for cid, share in before.items() for mq in share}
    owner_after = {mq: cid for cid, share in after.items() for mq in share}
    moved = {mq for mq in owner_before if owner_before[mq] != owner_after[mq]}
    assert before["c3"]
    assert moved == set(before["c3"])


@given(queue_count=st.integers(1, 60), member_count=st.integers(1, 25),
       strategy=st.sampled_from(["averagely", "circle", "hash"]))
def test_every_queue_is_assigned_exactly_once(queue_count: int, member_count: int, strategy: str) -> None:
    queues = mqs(queue_count, "T", BROKER_NAME)
    result = allocate_all(strategy, queues, cids("member-", member_count))
    handed_out = [mq for share in result.values() for mq in share]
    assert sorted(handed_out) == queues
    if strategy != "hash":
        sizes = [len(share) for share in result.values()]
        assert max(sizes) - min(sizes) <= 1


@given(queue_count=st.integers(1, 60), member_count=st.integers(1, 25))
def test_averagely_hands_out_contiguous_blocks_in_member_order(queue_count: int, member_count: int) -> None:
    result = allocate_all("averagely", mqs(queue_count), cids("m", member_count))
    concatenated = [mq.queue_id for cid in sorted(result) for mq in result[cid]]
    assert concatenated == list(range(queue_count))
