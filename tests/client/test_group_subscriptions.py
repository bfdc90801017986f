"""Members of one group that subscribe otherwise (another topic, another tag expression,
another mode): RocketMQ forbids it, as the group's queues and its retry topic are shared as if
one program ran them. A member warns once about each such member (when it joins, and when one
joins), and ``mqctl consumers`` shows it; nothing is refused (a rolling change of a group's
subscription passes through a mixed group). They used to mix silently: a refunds member took
the orders member's retries, and members with tags A and B committed each other's messages
unhandled."""
from __future__ import annotations

import logging

import pytest

import store
from store.client.admin import Admin
from store.client.members import Membership
from store.client.subscriptions import Subscription, mismatched
from store.log.messagestore import Store
from tests.procs import MQ, Proc, wait_for

ALIKE = "members of one group must subscribe alike"


def _warnings(p: Proc) -> list[str]:
    return [ln for ln in p.stderr().splitlines() if ALIKE in ln]


def _warned(p: Proc) -> list[str]:
    return wait_for(lambda: _warnings(p), what=f"{p.pid}'s warning about the other member")


def test_members_with_other_tags_warn_once_and_consumers_shows_them(mq: MQ) -> None:
    mq.ok("topic", "create", "T", "--queues", "2")
    a = mq.start("consume", "T", "-g", "G", "--tag", "A", "--client-id", "a-member")
    wait_for(lambda: len(mq.members("G")) == 1, what="a to join")
    b = mq.start("consume", "T", "-g", "G", "--tag", "B", "--client-id", "b-member")
    try:
        [on_a], [on_b] = _warned(a), _warned(b)
        aid = "a-member"
        assert on_a == ("mqctl: warning: group G: member b-member subscribes topic T (tags 'B', clustering, "
                        "concurrently), unlike this consumer (a-member): topic T (tags 'A', clustering, concurrently); "
                        "members of one group must subscribe alike (as in RocketMQ), or messages go to the "
                        "wrong handler or are skipped")
        assert f"member {aid} subscribes topic T (tags 'A', clustering, concurrently)" in on_b
        rows = mq.ok("consumers", "-g", "G", "--json").json_lines()
        assert {r["clientId"]: (r["tags"], r["subscriptionConsistent"]) for r in rows} == \
            {aid: ("A", False), "b-member": ("B", False)}
        assert {"topics", "mode", "orderly", "queues", "state"} <= set(rows[0])   # (kept)
        human = mq.ok("consumers", "-g", "G")
        [line] = human.stderr.splitlines()
        assert line.startswith("mqctl: warning: members of group G subscribe differently (") and ALIKE in line
        assert "b-member: topic T (tags 'B'" in line and "CLIENT-ID" in human.out
        wait_for(lambda: len(mq.member_queues("G", "T")) == 2 and all(mq.member_queues("G", "T").values()),
                 what="both members to hold a queue")   # (rebalances done: still one warning each)
    finally:
        a.stop()
        b.stop()
    assert len(_warnings(a)) == 1 and len(_warnings(b)) == 1, (a.stderr(), b.stderr())


def test_members_of_two_topics_in_one_group_warn(mq: MQ) -> None:
    """The tester's case: ``orders`` and ``refunds`` in group billing (their retries are one
    topic, ``%RETRY%billing``, that both consume)."""
    mq.ok("send", "orders", "o")
    mq.ok("send", "refunds", "r")
    orders = mq.start("consume", "orders", "-g", "billing", "--client-id", "o")
    wait_for(lambda: len(mq.members("billing")) == 1, what="orders' member to join")
    refunds = mq.start("consume", "refunds", "-g", "billing", "--client-id", "r")
    try:
        assert "member r subscribes topic refunds (tags *, clustering, concurrently), unlike this " \
               "consumer (o): topic orders (tags *" in _warned(orders)[0]
        assert "member o subscribes topic orders" in _warned(refunds)[0]
    finally:
        orders.stop()
        refunds.stop()


def test_members_that_subscribe_alike_say_nothing(mq: MQ) -> None:
    """The same tags written in another order are the same subscription."""
    mq.ok("topic", "create", "T", "--queues", "2")
    a = mq.start("consume", "T", "-g", "G", "--tag", "A || B", "--client-id", "a")
    wait_for(lambda: len(mq.members("G")) == 1, what="a to join")
    b = mq.start("consume", "T", "-g", "G", "--tag", "B||A", "--client-id", "b")
    try:
        mq.wait_balanced("G", "T", 2, 2)
        rows = mq.ok("consumers", "-g", "G", "--json").json_lines()
        assert [(r["tags"], r["subscriptionConsistent"]) for r in rows] == [("A || B", True)] * 2
        assert mq.ok("consumers", "-g", "G").stderr == ""
    finally:
        a.stop()
        b.stop()
    assert not _warnings(a) and not _warnings(b), (a.stderr(), b.stderr())


def test_a_python_consumer_warns_through_its_warning_channel(path: str, caplog: pytest.LogCaptureFixture) -> None:
    with store.Producer(path) as p:
        p.send("orders", "o")
        p.send("refunds", "r")
    caplog.set_level(logging.WARNING, logger="store")
    with store.Consumer("orders", "billing", path, client_id="one", start_from="first") as a, \
            store.Consumer("refunds", "billing", path, client_id="two", start_from="first") as b:
        list(a.messages(timeout=0.1))
        list(b.messages(timeout=0.1))   # b joins: warns about a

        def about(cid: str) -> list[str]:
            return [r.getMessage() for r in caplog.records if f"member {cid} subscribes" in r.getMessage()]

        def a_rebalanced() -> list[str]:
            list(a.messages(timeout=0.1))
            return about("two")
        assert "topic orders" in about("one")[0] and ALIKE in about("one")[0]
        assert "topic refunds" in wait_for(a_rebalanced, what="a to see b")[0]
        with store.Admin(path) as admin:
            assert [(m.client_id, m.tags, m.subscription_consistent) for m in admin.consumers("billing")] == \
                [("one", "*", False), ("two", "*", False)]


def test_a_record_without_tags_compares_on_what_it_says() -> None:
    """A member record of an older version has no ``tags``: unknown, not every message."""
    old = Subscription.of({"topics": ["T"], "mode": "clustering", "orderly": False})
    new = Subscription.of({"topics": ["T"], "mode": "clustering", "orderly": False, "tags": "A"})
    assert old.tags is None and not old.differs(new)
    assert mismatched({"old": old, "new": new}) == set()
    other = Subscription.of({"topics": ["T"], "mode": "broadcasting", "orderly": False, "tags": "A"})
    assert mismatched({"old": old, "new": new, "b": other}) == {"old", "new", "b"}
    assert Subscription.of({}).describe() == "unknown"


STRATEGY = ("clustering members of one group must use one allocation strategy (as in RocketMQ): each takes "
            "its own strategy's share, so queues that no member's strategy gives it wait, unconsumed; start "
            "them all with one --strategy (a Python consumer uses averagely)")


def test_members_with_other_strategies_warn_and_rebalance_shows_their_own_shares(mq: MQ, path: str) -> None:
    """The tester's case: a ``--strategy circle`` member beside an averagely one (here a Python
    consumer, which has no strategy parameter) of a topic of 8 queues: circle gives c0 0,2,4,6
    and averagely gives c1 4-7, so queues 1 and 3 were nobody's and waited while both ran;
    nothing warned, ``consumers`` said they were consistent and ``rebalance`` showed
    averagely's split. Now the member warns (naming both strategies), ``consumers`` flags
    both, and ``rebalance`` shows each one's own share and the queues left out."""
    mq.ok("topic", "create", "T", "--queues", "8")
    py = _joined(path, "T", "c1")
    try:
        c0 = mq.start("consume", "T", "-g", "G", "--strategy", "circle", "--client-id", "c0")
        try:
            [line] = wait_for(lambda: [ln for ln in c0.stderr().splitlines() if "strategy" in ln],
                              what="c0's warning about c1")
            assert line == ("mqctl: warning: group G: member c1 subscribes topic T (tags *, clustering, "
                            "concurrently, strategy averagely), unlike this consumer (c0): topic T (tags *, "
                            "clustering, concurrently, strategy circle); " + STRATEGY)
            rows = mq.ok("consumers", "-g", "G", "--json").json_lines()
            assert {r["clientId"]: (r["strategy"], r["subscriptionConsistent"]) for r in rows} == \
                {"c0": ("circle", False), "c1": ("averagely", False)}
            assert mq.ok("consumers", "-g", "G").stderr.splitlines() == [
                "mqctl: warning: members of group G subscribe differently (c0: topic T (tags *, clustering, "
                "concurrently, strategy circle); c1: topic T (tags *, clustering, concurrently, strategy "
                "averagely)); " + STRATEGY]
            shares = mq.ok("rebalance", "T", "-g", "G", "--json").json_lines()
            assert [(r["clientId"], r["strategy"], r["queues"]) for r in shares] == \
                [("c0", "circle", [0, 2, 4, 6]), ("c1", "averagely", [4, 5, 6, 7])]
            human = mq.ok("rebalance", "T", "-g", "G")
            assert human.stderr.splitlines()[0] == (
                "mqctl: warning: the live members of group G disagree on the strategy: circle (c0), "
                "averagely (c1); each takes the share its own strategy gives it (shown): queues 1,3 of T "
                "are no member's share and wait; start them all with one --strategy")
            # (a strategy given previews that one, as before)
            given = mq.ok("rebalance", "T", "-g", "G", "--strategy", "circle", "--json").json_lines()
            assert [(r["clientId"], r["queues"]) for r in given] == [("c0", [0, 2, 4, 6]), ("c1", [1, 3, 5, 7])]
        finally:
            c0.stop()
    finally:
        py.close()


def test_a_record_without_a_strategy_is_averagely() -> None:
    """A member record that does not say its strategy (an older version) allocates averagely."""
    old = Subscription.of({"topics": ["T"], "mode": "clustering", "orderly": False})
    circle = Subscription.of({"topics": ["T"], "mode": "clustering", "orderly": False, "strategy": "circle"})
    assert old.strategy == "averagely" and old.differs(circle)
    assert not old.differs(Subscription.of({"topics": ["T"], "mode": "clustering", "strategy": "averagely"}))
    # broadcast members share no queues: their strategies are not compared
    assert not Subscription.of({"topics": ["T"], "mode": "broadcasting"}).differs(
        Subscription.of({"topics": ["T"], "mode": "broadcasting", "strategy": "circle"}))


@pytest.fixture
def path(mq: MQ) -> str:
    return str(mq.root)


def _joined(path: str, topic: str, cid: str, **kw: object) -> store.Consumer:
    c = store.Consumer(topic, "G", path, client_id=cid, **kw)  # type: ignore[arg-type]
    c.__enter__()
    return c


def test_a_joiner_warns_once_per_subscription_not_once_per_member(mq: MQ, path: str) -> None:
    """A joiner printed a line for each member subscribing otherwise (16 lines for 16 such
    members): now one line for each subscription of theirs, naming its members."""
    mq.ok("topic", "create", "T", "--queues", "2")
    members = [_joined(path, "T", f"a{i}", tags="A") for i in range(5)] + \
        [_joined(path, "T", f"c{i}", tags="C") for i in range(2)]
    try:
        res = mq.ok("consume", "T", "-g", "G", "--tag", "B", "-e", "--client-id", "joiner")
    finally:
        for c in members:
            c.close()
    assert res.stderr.splitlines() == [
        "mqctl: warning: group G: 5 members (a0, a1, a2, a3, a4) subscribe topic T (tags 'A', clustering, "
        "concurrently), unlike this consumer (joiner): topic T (tags 'B', clustering, concurrently); " + ALIKE +
        " (as in RocketMQ), or messages go to the wrong handler or are skipped",
        "mqctl: warning: group G: 2 members (c0, c1) subscribe topic T (tags 'C', clustering, concurrently), "
        "unlike this consumer (joiner): topic T (tags 'B', clustering, concurrently); " + ALIKE +
        " (as in RocketMQ), or messages go to the wrong handler or are skipped"]


def test_broadcast_members_with_other_tags_are_told_they_take_nothing_from_each_other(mq: MQ, path: str) -> None:
    """The warning said messages go to the wrong handler or are skipped: broadcast members each
    read every queue for themselves (offsets of their own, no retry topic), so each gets all of
    what it subscribed to; the warning says that."""
    mq.ok("topic", "create", "T", "--queues", "2")
    mq.send_lines("T", ["a1", "a2"], "--tag", "A")
    mq.send_lines("T", ["b1", "b2"], "--tag", "B")
    a = _joined(path, "T", "a", tags="A", broadcast=True, start_from="first")
    try:
        res = mq.ok("consume", "T", "-g", "G", "--broadcast", "--tag", "B", "--from", "first", "-e",
                    "--client-id", "b")
        assert sorted(m.text for m in a.messages(exit_at_end=True)) == ["a1", "a2"]
        b = _joined(path, "T", "b", tags="B", broadcast=True)
        listed = mq.ok("consumers", "-g", "G")
        b.close()
    finally:
        a.close()
    apart = ("broadcast members take no messages from one another (each reads every queue for itself), but "
             "RocketMQ has members of one group subscribe alike, and what acts on the whole group (deleting "
             "its offsets, say) acts on them all: give each subscription a group of its own")
    assert sorted(res.stdout.decode().split()) == ["b1", "b2"]
    assert res.stderr.splitlines() == [
        "mqctl: warning: group G: member a subscribes topic T (tags 'A', broadcasting, concurrently), "
        "unlike this consumer (b): topic T (tags 'B', broadcasting, concurrently); " + apart]
    assert listed.stderr.splitlines() == [
        "mqctl: warning: members of group G subscribe differently (a: topic T (tags 'A', broadcasting, "
        "concurrently); b: topic T (tags 'B', broadcasting, concurrently)); " + apart]


def test_a_broadcast_member_among_clustering_ones_is_warned_about_for_what_it_does(mq: MQ, path: str) -> None:
    """A broadcast member of the topic in a clustering group: the clustering members share the
    queues without it (a clustering member alone beside it got one queue of two), so each side
    gets every message; the warning says so, and what still acts on them all."""
    mq.ok("topic", "create", "T", "--queues", "2")
    mq.send_lines("T", ["m0", "m1"])   # (round robin: one a queue)
    b = _joined(path, "T", "b", broadcast=True, start_from="first")
    try:
        res = mq.ok("consume", "T", "-g", "G", "--from", "first", "-e", "--client-id", "c")
        assert sorted(m.text for m in b.messages(exit_at_end=True)) == ["m0", "m1"]
        c = _joined(path, "T", "c")
        listed = mq.ok("consumers", "-g", "G")
        c.close()
    finally:
        b.close()
    beside = ("a broadcast member and clustering members take no messages from one another (it reads every "
              "queue for itself; they share the queues without it), but RocketMQ has members of one group "
              "subscribe alike, and what acts on the whole group (deleting its offsets, say) acts on them all: "
              "give each subscription a group of its own")
    assert sorted(res.stdout.decode().split()) == ["m0", "m1"]
    assert res.stderr.splitlines() == [
        "mqctl: warning: group G: member b subscribes topic T (tags *, broadcasting, concurrently), unlike "
        "this consumer (c): topic T (tags *, clustering, concurrently); " + beside]
    assert listed.stderr.splitlines() == [
        "mqctl: warning: members of group G subscribe differently (b: topic T (tags *, broadcasting, "
        "concurrently); c: topic T (tags *, clustering, concurrently)); " + beside]


def test_the_rebalance_preview_and_the_holders_leave_broadcast_members_out(store: Store) -> None:
    """``rebalance_preview`` counted a broadcast member of the topic among those sharing its
    queues (and took the strategy the live members agree on from it too), and the holders of
    the group's queues (``progress``' owner) were taken from its claim of every queue. It has
    no share: a row with no queues after the allocation's; a member record without ``mode``
    (an older version) is a clustering one, as before."""
    from store.client.allocate import allocate_all, queues_of
    from store.client.groups import holders

    store.create_topic("T", 4)
    every = [{"topic": "T", "queueId": q} for q in range(4)]

    def join(cid: str, **record: object) -> Membership:
        m = Membership(store.layout, "G", cid, {"topics": ["T"], "orderly": False, **record})
        m.join()
        return m
    b = join("b", mode="broadcasting", strategy="averagely", queues=every)
    try:
        alone = Admin.of(store).rebalance_preview("T", "G")
        assert [(r.client_id, r.queues, r.holds) for r in alone] == [("b", [], [])]
        assert (alone.consumers, alone.broadcast) == ([], ["b"])
        ms = [join("c1", mode="clustering", strategy="circle", queues=[]), join("old", strategy="circle")]
        try:
            preview = Admin.of(store).rebalance_preview("T", "G")
            expect = allocate_all("circle", queues_of("T", range(4)), ["c1", "old"])
            assert (preview.strategy, preview.consumers) == ("circle", ["c1", "old"])
            assert preview.broadcast == ["b"]
            assert [(r.client_id, r.queues) for r in preview] == \
                [(c, [q.queue_id for q in mqs]) for c, mqs in expect.items()] + [("b", [])]
            assert holders(store, "G") == {}   # (no clustering member holds a queue lock yet)
        finally:
            for m in ms:
                m.leave()
    finally:
        b.leave()
