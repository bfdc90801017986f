"""``store.Admin``'s administration calls, in process on a real store: dead letters and their
resend, deleting offsets, the rebalance preview, unlocking, offset resets under a progress
callback, the JSON rows the CLI prints, a topic's queues, creating a store, and the
consume-option rules the CLI and ``store.Consumer`` share.

The CLI's face of the same calls (text, JSON, exit codes) is in ``tests/cli/test_admin_cli.py``
and ``tests/cli/test_admin_face.py``.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Iterator

import pytest

import store as mq
from store.client.admin import Admin
from store.client.members import Membership
from store.client.qlocks import QueueLock
from store.client.retry import dead_letter
from store.client.rules import check_consume_options
from store.log.broadcastoffsets import BroadcastOffsetStore
from store.log.messagestore import Store
from store.log.offsets import ClusterOffsetStore
from store.log.record import PROP_RETRY_TOPIC, Draft
from store.names import dlq_topic, retry_topic

CLI_NAMES = {"queues": "--queues", "strategy": "--strategy", "queues_example": "--queues 0,3",
             "client_id": "--client-id", "broadcast": "--broadcast", "dedup": "--dedup"}


@pytest.fixture
def loaded(store: Store) -> Store:
    """Topic T (4 queues): queue 0 holds 10 messages; group G committed queue 0 at 4."""
    store.create_topic("T", 4)
    store.put([Draft("T", f"a{i}".encode(), queue_id=0) for i in range(10)])
    ClusterOffsetStore(store.layout).commit("G", {("T", 0): 4})
    return store


@pytest.fixture
def admin(loaded: Store) -> Admin:
    return Admin.of(loaded)


@pytest.fixture
def dead(loaded: Store) -> Store:
    """Three dead letters of G: a0, a1, a2."""
    for m in loaded.pull("T", 0, 0, 3).messages:
        dead_letter(loaded, "G", m, 16)
    return loaded


def member(store: Store, group: str, cid: str, queues: list[int], **record: Any) -> Membership:
    m = Membership(store.layout, group, cid, {"topics": ["T"], "mode": "clustering", "orderly": False,
                                               "strategy": "averagely", "queues": [], **record})
    m.join()
    m.update(queues=[{"topic": "T", "queueId": q} for q in queues], heartbeatAt=int(time.time() * 1000))
    return m


@pytest.fixture
def members(loaded: Store) -> Iterator[list[Membership]]:
    ms = [member(loaded, "G", "m1", [0, 1], strategy="circle"), member(loaded, "G", "m2", [2, 3], strategy="circle")]
    # a clustering member holds the locks of the queues it consumes (what the views show)
    locks = [QueueLock(loaded.layout, "G", "T", q, cid) for cid, qs in (("m1", [0, 1]), ("m2", [2, 3])) for q in qs]
    assert all(lk.try_acquire() for lk in locks)
    yield ms
    for lk in locks:
        lk.release()
    for m in ms:
        m.leave()


# -- dead letters --------------------------------------------------------------------------------

def test_dead_letters_are_listed_oldest_first(admin: Admin, dead: Store) -> None:
    letters = list(admin.dead_letters("G"))
    assert [d.message.body for d in letters] == [b"a0", b"a1", b"a2"]
    first = letters[0]
    assert (first.group, first.dlq_offset, first.origin_topic, first.resent) == ("G", 0, "T", False)
    assert first.message.topic == dlq_topic("G") and first.message.reconsume_times == 16
    assert first.msg_id == first.message.msg_id and first.origin_msg_id
    row = first.to_json()
    assert (row["dlqOriginTopic"], row["resent"], row["body"], row["queueOffset"]) == ("T", False, "a0", 0)
    assert first["origin_topic"] == "T" and first.to_dict()["resent"] is False


def test_dead_letters_of_unknown_and_clean_groups(admin: Admin) -> None:
    with pytest.raises(mq.GroupNotFoundError):
        admin.dead_letters("Ghost")
    assert list(admin.dead_letters("G")) == []       # known, nothing dead-lettered
    res = admin.resend_dead_letters("G")
    assert (res.topic, res.resent, res.skipped, res.rows) == (None, 0, 0, [])
    with pytest.raises(mq.MessageNotFoundError, match="has no dead letters"):
        admin.resend_dead_letters("G", "0" * 32)


def test_resend_copies_to_the_retry_topic_once(admin: Admin, dead: Store) -> None:
    dry = admin.resend_dead_letters("G", dry_run=True)
    assert dry.resent == 3 and [r.queue_offset for r in dry.rows] == [None] * 3 and not any(r.resent for r in dry.rows)
    assert not dead.has_topic(retry_topic("G")), "a dry run writes nothing"
    calls: list[tuple[int, int]] = []
    res = admin.resend_dead_letters("G", progress=lambda done, total: calls.append((done, total)))
    assert calls == [(0, 3), (3, 3)]
    assert [(r.dlq_offset, r.origin_topic, r.topic, r.queue_offset) for r in res.rows] == \
        [(0, "T", retry_topic("G"), 0), (1, "T", retry_topic("G"), 1), (2, "T", retry_topic("G"), 2)]
    assert res.rows[0].to_json()["dlqOffset"] == 0 and res.retry_topic == retry_topic("G")
    copies = list(dead.iter_queue(retry_topic("G"), 0, 0))
    assert [(m.body, m.reconsume_times, m.properties[PROP_RETRY_TOPIC]) for m in copies] == \
        [(b"a0", 0, "T"), (b"a1", 0, "T"), (b"a2", 0, "T")]
    assert all(d.resent for d in admin.dead_letters("G"))
    again = admin.resend_dead_letters("G")
    assert (again.resent, again.skipped, again.empty) == (0, 0, False)    # scanned from the record's end
    forced = admin.resend_dead_letters("G", force=True, dry_run=True)
    assert forced.resent == 3


def test_resend_by_id_and_streaming_rows(admin: Admin, dead: Store) -> None:
    second = list(admin.dead_letters("G"))[1]
    got: list[Any] = []
    res = admin.resend_dead_letters("G", second.msg_id, on_row=got.append)
    assert [r.dlq_offset for r in got] == [1] and res.rows == [] and res.resent == 1
    by_offset_id = admin.resend_dead_letters("G", second.message.offset_msg_id.lower())
    assert (by_offset_id.resent, by_offset_id.skipped) == (0, 1)
    assert [r.dlq_offset for r in admin.resend_dead_letters("G").rows] == [0, 2]
    with pytest.raises(mq.MessageNotFoundError, match="in the dead letters of group G"):
        admin.resend_dead_letters("G", "0" * 32)


def test_resend_says_when_only_orderly_members_would_miss_it(admin: Admin, dead: Store) -> None:
    m = member(dead, "G", "o1", [0], orderly=True)
    try:
        assert admin.resend_dead_letters("G", dry_run=True).only_orderly_members is False   # nothing resent
        assert admin.resend_dead_letters("G").only_orderly_members is True
    finally:
        m.leave()


# -- offsets: client state, delete, reset progress ----------------------------------------------

def broadcast_offsets(store: Store, cid: str, group: str, offsets: dict[int, int]) -> None:
    b = BroadcastOffsetStore(store.layout, cid, group)
    for q, o in offsets.items():
        b.update("T", q, o)
    b.persist({("T", q) for q in offsets})


def test_broadcast_rows_say_whether_their_client_is_live(admin: Admin, loaded: Store) -> None:
    broadcast_offsets(loaded, "c1", "B", {0: 2})
    broadcast_offsets(loaded, "c2", "B", {0: 3})
    live = member(loaded, "B", "c2", [], mode="broadcast")
    try:
        assert {(r.client_id, r.client_alive) for r in admin.offsets("B")} == {("c1", False), ("c2", True)}
        lag = admin.lag("B", "T")
        assert {(r.client_id, r.client_alive) for r in lag if r.queue_id == 0} == {("c1", False), ("c2", True)}
        assert {r.client_alive for r in admin.offsets("G")} == {None}   # clustering rows
    finally:
        live.leave()


def test_offset_and_lag_rows_as_json_name_a_broadcast_clients_state(admin: Admin, loaded: Store) -> None:
    broadcast_offsets(loaded, "c1", "B", {0: 2})
    assert [r.to_json() for r in admin.offsets("G")] == [
        {"group": "G", "topic": "T", "queueId": 0, "offset": 4, "clientId": None}]
    (row,) = [r.to_json() for r in admin.offsets("B")]
    assert (row["clientId"], row["clientAlive"], row["clientState"]) == ("c1", False, "dead")
    lag = {r.queue_id: r.to_json() for r in admin.lag("G", "T")}
    assert (lag[0]["brokerOffset"], lag[0]["consumerOffset"], lag[0]["lag"]) == (10, 4, 6)
    assert lag[0]["lastTime"].endswith("Z") and "clientState" not in lag[0]
    assert lag[1]["lastTimestamp"] is None and lag[1]["lastTime"] is None


def test_topic_status_per_queue(admin: Admin, loaded: Store) -> None:
    rows = admin.topic_status("T")
    assert [(r.queue_id, r.min_offset, r.max_offset, r.messages) for r in rows] == [
        (0, 0, 10, 10), (1, 0, 0, 0), (2, 0, 0, 0), (3, 0, 0, 0)]
    assert rows[0].last_store_timestamp == loaded.last_store_timestamp("T", 0) and rows[1].last_store_timestamp is None
    assert list(rows[0].to_json()) == ["topic", "queueId", "minOffset", "maxOffset", "lastStoreTimestamp",
                                       "lastStoreTime", "messages"]
    with pytest.raises(mq.TopicNotFoundError):
        admin.topic_status("nope")
    with pytest.raises(mq.InvalidNameError):
        admin.topic_status("bad name")


def test_create_store_creates_once_then_reports_ignored_settings(tmp_path: Path) -> None:
    from store.client.creation import create_store
    from store.log.settings import StoreSettings
    asked = StoreSettings(max_message_size=1024, commitlog_segment_size=1 << 20, auto_create_topics=False)
    first = create_store(tmp_path / "s", asked)
    assert first.created and first.ignored == [] and first.settings.max_message_size == 1024
    again = create_store(tmp_path / "s", StoreSettings(max_message_size=2048, commitlog_segment_size=1 << 20))
    assert not again.created and again.settings == first.settings
    assert again.ignored == ["max_message_size", "auto_create_topics"]
    with pytest.raises(mq.UsageError):   # a new store's settings are checked strictly
        create_store(tmp_path / "t", StoreSettings(max_message_size=1 << 20, commitlog_segment_size=1 << 20))


def test_delete_offsets_of_a_group_and_of_one_client(admin: Admin, loaded: Store) -> None:
    broadcast_offsets(loaded, "c1", "G", {1: 2})
    dry = admin.delete_offsets("G", dry_run=True)
    assert (dry.topics, dry.clients, dry.deleted) == (["T"], ["c1"], False)
    assert ClusterOffsetStore(loaded.layout).read_group("G"), "a dry run deletes nothing"
    one = admin.delete_offsets("G", "c1")
    assert one.to_json() == {"group": "G", "clientId": "c1", "clients": ["c1"], "topics": [], "deleted": True}
    assert [r.client_id for r in admin.offsets("G")] == [None]
    with pytest.raises(mq.NotFoundError, match="no broadcast offsets of client c1"):
        admin.delete_offsets("G", "c1")
    res = admin.delete_offsets("G")
    assert (res.topics, res.clients, res.deleted) == (["T"], [], True)
    assert ClusterOffsetStore(loaded.layout).read_group("G") == {}
    with pytest.raises(mq.NotFoundError, match="has no committed offsets"):
        admin.delete_offsets("G")


def test_delete_offsets_refuses_live_members(loaded: Store, members: list[Membership]) -> None:
    broadcast_offsets(loaded, "m1", "G", {0: 1})
    with pytest.raises(mq.ConflictError, match=r"has 2 live members \(m1, m2\); stop them first, or give "
                                               r"client_id of a dead broadcast client"):
        Admin.of(loaded).delete_offsets("G")
    with pytest.raises(mq.ConflictError, match="or give --client-id of"):
        Admin.of(loaded, arg_names=CLI_NAMES).delete_offsets("G")
    with pytest.raises(mq.ConflictError, match="client m1 is a live member of group G"):
        Admin.of(loaded).delete_offsets("G", "m1")


def test_apply_reset_reports_progress_per_offset_set(admin: Admin, loaded: Store) -> None:
    broadcast_offsets(loaded, "c1", "G", {0: 0, 1: 0, 2: 0, 3: 0})
    plan = admin.plan_reset("G", "T", "latest")
    assert len(plan) == 8 and len(plan.targets) == 2
    done: list[int] = []
    admin.apply_reset(plan, progress=done.append)
    assert done == [4, 4] and plan.applied
    assert {(r.client_id, r.queue_id, r.offset) for r in admin.offsets("G") if r.queue_id == 0} == \
        {(None, 0, 10), ("c1", 0, 10)}


def test_apply_reset_under_live_members_names_force_in_each_spelling(loaded: Store,
                                                                    members: list[Membership]) -> None:
    plan = Admin.of(loaded).plan_reset("G", "T", "earliest")
    with pytest.raises(mq.LockHeldError, match="or pass force=True to reset"):
        Admin.of(loaded).apply_reset(plan)
    with pytest.raises(mq.LockHeldError, match="or pass --force to reset"):
        Admin.of(loaded, arg_names={"force": "--force"}).apply_reset(plan)


# -- rebalance preview ---------------------------------------------------------------------------

def test_rebalance_preview_of_the_live_members(admin: Admin, members: list[Membership]) -> None:
    from store.client.allocate import allocate_all, queues_of
    preview = admin.rebalance_preview("T", "G")
    expect = allocate_all("circle", queues_of("T", range(4)), ["m1", "m2"])   # the members' strategy
    assert preview.strategy == "circle" and preview.queues == 4 and preview.consumers == ["m1", "m2"]
    assert {r.client_id: r.queues for r in preview} == {c: [q.queue_id for q in mqs] for c, mqs in expect.items()}
    assert [r.holds for r in preview] == [[0, 1], [2, 3]]
    assert preview.rows[0].to_json()["clientId"] == "m1"


def test_rebalance_preview_of_given_consumers(admin: Admin) -> None:
    rows = admin.rebalance_preview("T", "G", ["c", "a", " b "], "averagely").rows
    assert [(r.client_id, r.queues, r.holds) for r in rows] == [("a", [0, 1], None), ("b", [2], None), ("c", [3], None)]
    rows = admin.rebalance_preview("T", "G", ["a", "b"], "config", [3, 0]).rows
    assert [r.queues for r in rows] == [[0, 3], [0, 3]]


@pytest.mark.parametrize("kwargs, error, python, cli", [
    ({"consumers": ["a"], "queues": [1]}, mq.UsageError, "queues needs strategy config",
     "--queues needs --strategy config"),
    ({"consumers": ["a"], "strategy": "config"}, mq.UsageError, "strategy config needs queues, e.g. queues=[0, 3]",
     "--strategy config needs --queues, e.g. --queues 0,3"),
    ({"consumers": ["a"], "strategy": "config", "queues": [4]}, mq.UsageError,
     "queues: queue 4 does not exist: topic T has queues 0-3", "--queues: queue 4 does not exist"),
    ({"consumers": [" ", ""]}, mq.UsageError, "consumers: give at least one client id", "consumers: give"),
    ({"consumers": "a,b"}, mq.UsageError, "consumers must be a list", "consumers must be a list"),
])
def test_rebalance_preview_refuses_bad_arguments(loaded: Store, kwargs: dict[str, Any], error: type,
                                                 python: str, cli: str) -> None:
    with pytest.raises(error) as caught:
        Admin.of(loaded).rebalance_preview("T", "G", **kwargs)
    assert python in str(caught.value)
    with pytest.raises(error) as caught:
        Admin.of(loaded, arg_names=CLI_NAMES).rebalance_preview("T", "G", **kwargs)
    assert cli in str(caught.value)


def test_rebalance_preview_of_a_known_group_without_live_members_is_empty(loaded: Store) -> None:
    """An empty allocation, as ``consumers`` lists none (it raised GroupNotFoundError: "not
    found" for a group the store knows); a group it does not know is still not found."""
    preview = Admin.of(loaded).rebalance_preview("T", "G")
    assert (preview.consumers, preview.rows, preview.queues) == ([], [], 4)
    assert Admin.of(loaded).consumers("G") == []
    with pytest.raises(mq.GroupNotFoundError):
        Admin.of(loaded).rebalance_preview("T", "Ghost")
    with pytest.raises(mq.GroupNotFoundError):
        Admin.of(loaded).consumers("Ghost")


def test_consumers_shows_the_queues_held_not_the_claim(loaded: Store) -> None:
    """A member's queues are those whose locks it holds now: a claim it published but whose
    lock another member took (it was stopped meanwhile) is not shown as its."""
    a, b = member(loaded, "G", "a", [0, 1]), member(loaded, "G", "b", [2, 3])
    locks = [QueueLock(loaded.layout, "G", "T", q, "b") for q in range(4)]
    try:
        assert all(lk.try_acquire() for lk in locks)
        rows = {r.client_id: r for r in Admin.of(loaded).consumers("G")}
        assert rows["a"].queues == [] and [q["queueId"] for q in rows["b"].queues] == [0, 1, 2, 3]
        assert rows["a"].state == rows["b"].state == "live"
        assert Admin.of(loaded).lag("G", "T")[0].owner == "b"
    finally:
        for lk in locks:
            lk.release()
        a.leave()
        b.leave()


def test_a_member_not_heard_from_is_shown_expired_and_left_out_of_the_preview(loaded: Store) -> None:
    """One notion of live for every view: the rebalance's (its beat within the member
    expiry). A stuck member is listed, ``state`` ``expired``; the preview leaves it out."""
    import os
    a, b = member(loaded, "G", "a", []), member(loaded, "G", "b", [])
    try:
        os.utime(loaded.layout.member_beat("G", "a"), (0, 0))   # (as if it stopped long ago)
        rows = Admin.of(loaded).consumers("G")
        assert [(r.client_id, r.state, r.to_dict()["state"]) for r in rows] == \
            [("a", "expired", "expired"), ("b", "live", "live")]
        assert Admin.of(loaded).rebalance_preview("T", "G").consumers == ["b"]
    finally:
        a.leave()
        b.leave()


def test_a_members_heartbeat_is_its_last_beat_not_its_last_rebalance(loaded: Store) -> None:
    """A member rewrites its JSON (``heartbeatAt``) at a rebalance only, and beats by touching
    its beat file every 20 s: ``consumers`` and ``top`` show the later of the two, so a
    healthy member settled for minutes is not shown as silent since it joined."""
    from store import Monitor
    a = member(loaded, "G", "a", [])
    try:
        a.update(heartbeatAt=1_000)   # (its last rebalance, long ago)
        a.beat()
        before = int(time.time() * 1000) - 60_000
        [row] = Admin.of(loaded).consumers("G")
        assert row.heartbeat_at is not None and row.heartbeat_at > before
        with Monitor(loaded.layout.root, group="G") as mon:
            [g] = mon.snapshot().groups
            [m] = g.members
            assert m.heartbeat_at is not None and m.heartbeat_at > before
    finally:
        a.leave()


def test_rebalance_preview_of_a_missing_topic(admin: Admin) -> None:
    with pytest.raises(mq.TopicNotFoundError):
        admin.rebalance_preview("Missing", "G", ["a"])


# -- unlock ---------------------------------------------------------------------------------------

def test_unlock_releases_stale_locks_and_with_force_live_ones(admin: Admin, loaded: Store) -> None:
    held = QueueLock(loaded.layout, "O", "T", 0, "alive@1")
    assert held.try_acquire()
    stale = QueueLock(loaded.layout, "O", "T", 1, "dead@2")
    assert stale.try_acquire()
    stale._close()  # as a crash would: the OS lock goes, the file and record stay
    try:
        dry = admin.unlock("O", dry_run=True)
        assert [(r.queue_id, r.state) for r in dry] == [(1, "stale")] and dry.kept == 1 and dry.dry_run
        assert len(admin.locks("O")) == 2
        res = admin.unlock("O")
        assert [(r.queue_id, r.client_id) for r in res.released] == [(1, "dead@2")] and res.kept == 1
        res = admin.unlock("O", "T", 0, force=True)
        assert [r.queue_id for r in res] == [0] and res.kept == 0
        assert not held.is_valid(), "the holder notices that its lock was broken"
        assert admin.locks() == []
    finally:
        held.release()


def test_unlock_checks_its_arguments_first(admin: Admin, loaded: Store) -> None:
    with pytest.raises(mq.UsageError, match="^queue needs topic: queue ids are per topic$"):
        admin.unlock("G", queue=1)
    with pytest.raises(mq.UsageError, match="queue 7 does not exist: topic T has queues 0-3"):
        admin.unlock("G", "T", 7)
    with pytest.raises(mq.GroupNotFoundError):
        admin.unlock("Ghost")


def test_a_queue_count_out_of_range_is_named_as_the_python_argument(admin: Admin) -> None:
    """Admin.create_topic("e", 0) said "--queues must be between 1 and 1024": a command-line flag
    in a Python error (the CLI checks its --queues range itself, before the store)."""
    for call in (lambda: admin.create_topic("E", 0), lambda: admin.update_topic("T", 1025)):
        with pytest.raises(mq.UsageError, match="^queues must be between 1 and 1024, got (0|1025)$"):
            call()


def test_admin_over_an_opener_reports_bad_arguments_before_a_missing_store(tmp_path: Path) -> None:
    def opener() -> Store:
        return Store.open(tmp_path / "none")
    admin = Admin.of(opener, arg_names={"queue": "--queue", "topic": "--topic"})
    with pytest.raises(mq.UsageError, match="--queue needs --topic"):
        admin.unlock("G", queue=1)
    with pytest.raises(mq.StoreNotFoundError):
        admin.unlock("G")


def test_admin_over_an_opener_opens_once_and_leaves_the_handle_open(loaded: Store) -> None:
    opened: list[Store] = []

    def opener() -> Store:
        opened.append(loaded)
        return loaded
    with Admin.of(opener) as admin:
        assert admin.groups() == ["G"] and admin.path == loaded.root
        assert [r.offset for r in admin.offsets("G")] == [4]
    assert len(opened) == 1 and loaded.has_topic("T"), "the handle stays open"


# -- the consume rules, shared by mqctl consume and store.Consumer -------------------------------

@pytest.mark.parametrize("kwargs, python, cli", [
    ({"queues": [1]}, "queues applies to strategy config only", "--queues applies to --strategy config only"),
    ({"strategy": "config"}, "strategy config needs queues", "--strategy config needs --queues, e.g. --queues 0,3"),
    ({"broadcast": True, "dedup": True}, "dedup does not apply to broadcast: its log is the group's",
     "--dedup does not apply to --broadcast: its log is the group's"),
    ({"broadcast": True, "max_reconsume": 3}, "max_reconsume does not apply to broadcast: broadcast messages are "
     "never dead-lettered (concurrent: a failed one is skipped; orderly: retried in place)", None),
    ({"broadcast": True, "retry_delay": 1}, "retry_delay does not apply to broadcast", None),
    ({"broadcast": True, "strategy": "hash"}, "strategy does not apply to broadcast", None),
    ({"orderly": True, "retry_delay": 1}, "retry_delay applies to concurrent consumption", None),
    ({"suspend": 100}, "suspend_ms applies to orderly", None),
])
def test_consume_rules_in_either_spelling(kwargs: dict[str, Any], python: str, cli: str | None) -> None:
    with pytest.raises(mq.UsageError, match="^" + python.replace("(", r"\(").replace(")", r"\)")):
        check_consume_options(**kwargs)
    if cli is not None:
        with pytest.raises(mq.UsageError, match="^" + cli):
            check_consume_options(**kwargs, arg_names=CLI_NAMES)


def test_consume_rules_accept_what_fits() -> None:
    check_consume_options(broadcast=True, orderly=True, suspend=100)       # broadcast orderly retries in place
    check_consume_options(strategy="config", queues=[0, 3], dedup=True, max_reconsume=0, retry_delay=5)
    check_consume_options(orderly=True, max_reconsume=2, suspend=10)


def test_the_consumer_uses_the_shared_rules(root: Path, loaded: Store) -> None:
    with pytest.raises(mq.UsageError, match="^dedup does not apply to broadcast"):
        mq.Consumer("T", "B", root, broadcast=True, dedup=True)
    with mq.Consumer("T", "B", root, broadcast=True, orderly=True, client_id="c1") as c:
        with pytest.raises(mq.UsageError, match="^max_reconsume does not apply to broadcast"):
            c.run(lambda m: None, exit_at_end=True, max_reconsume=1)


@pytest.mark.parametrize(("call", "name"), [
    (lambda a: a.reset_offsets("G", "T", "earliest", execute="no"), "execute"),
    (lambda a: a.reset_offsets("G", "T", "earliest", execute=True, force=1), "force"),
    (lambda a: a.create_topic("U", 2, order="yes"), "order"),
    (lambda a: a.delete_offsets("G", dry_run="false"), "dry_run"),
    (lambda a: a.unlock("G", force="no"), "force"),
    (lambda a: a.resend_dead_letters("G", dry_run=0), "dry_run"),
    (lambda a: a.end_transaction("0" * 32, "commit"), "commit"),
])
def test_a_switch_given_anything_but_a_bool_is_refused_before_it_acts(admin: Admin, call: Any, name: str) -> None:
    """``execute="no"`` is truthy: read by its truth it would execute the reset."""
    before = admin.offsets("G")
    with pytest.raises(mq.UsageError, match=f"^{name} must be True or False, not "):
        call(admin)
    assert admin.offsets("G") == before and "U" not in [t.topic for t in admin.topics()]


def test_an_admin_made_before_its_store_sees_the_store_once_it_exists(tmp_path: Path) -> None:
    admin = mq.Admin(tmp_path / "s")
    with pytest.raises(mq.StoreNotFoundError):
        admin.topics()
    with mq.Producer(tmp_path / "s") as p:
        p.send("t", b"x")
    assert [t.topic for t in admin.topics()] == ["t"]
    admin.close()
    with pytest.raises(mq.UsageError, match="this Admin is closed"):
        admin.topics()
    never = mq.Admin(tmp_path / "none")
    never.close()
    with pytest.raises(mq.UsageError, match="this Admin is closed"):
        never.topics()


@pytest.mark.parametrize(("words", "new"), [(("earliest", "first"), 0), (("latest", "last", "end"), 10)])
def test_reset_offsets_takes_every_word_its_error_lists(admin: Admin, words: tuple[str, ...], new: int) -> None:
    """The error for a bad target lists each word it takes (it once named 'earliest' and
    'latest' only, while it takes 'first', 'last' and 'end' as well)."""
    with pytest.raises(mq.UsageError) as info:
        admin.reset_offsets("G", "T", "beginning")
    for word in words:
        assert f"'{word}'" in str(info.value)
        assert [r.new for r in admin.reset_offsets("G", "T", word, queue=0).rows] == [new]


def test_an_admin_dropped_without_close_leaves_no_file_open(tmp_path: Path) -> None:
    """``store.Admin(path).topics()`` with a delayed message due delivers it (a write: the
    store's write lock file opened) and the Admin, never closed (as the API's examples write a
    one-off call), left that file for the collector: ``ResourceWarning: unclosed file``."""
    import subprocess
    import sys
    script = (
        "import gc, time, store\n"
        f"p = {str(tmp_path / 'st')!r}\n"
        "with store.Producer(p) as producer:\n"
        "    producer.send('t', 'x', delay=1)\n"
        "time.sleep(1.2)\n"
        "assert [t.topic for t in store.Admin(p).topics()] == ['t']\n"
        "gc.collect()\n")
    cp = subprocess.run([sys.executable, "-X", "dev", "-W", "error::ResourceWarning", "-c", script],
                        capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0 and "ResourceWarning" not in cp.stderr, cp.stderr


def test_an_admin_of_a_directory_that_is_no_store_leaves_nothing_open(tmp_path: Path) -> None:
    """``store.Admin(DIR)`` of a directory holding other files left the listing of DIR open
    (a scandir left by an early return): ResourceWarning under ``-X dev``."""
    import subprocess
    import sys
    (tmp_path / "not-a-store").mkdir()
    (tmp_path / "not-a-store" / "notes.txt").write_text("mine")
    script = f"import gc, store\nstore.Admin({str(tmp_path / 'not-a-store')!r})\ngc.collect()\n"
    cp = subprocess.run([sys.executable, "-X", "dev", "-c", script], capture_output=True, text=True, timeout=60)
    assert "ResourceWarning" not in cp.stderr, cp.stderr


def test_a_look_that_cannot_deliver_due_delays_says_so_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """``topics()`` and ``topic_status()`` deliver due delayed messages first (so counts
    include them); when that fails (here the scheduler's lock is a directory) the counts are
    of the store as it is, with one warning, not silence and not one per look."""
    root = tmp_path / "s"
    with mq.Producer(root) as p:
        p.send("T", b"later", delay=1)
    with Store.open(root) as s:
        lock = s.layout.service_lock("schedule")
    lock.unlink(missing_ok=True)
    lock.mkdir(parents=True)
    caplog.clear()
    with mq.Admin(root) as admin:
        assert [t.topic for t in admin.topics()] == ["T"]
        admin.topic_status("T")
        admin.topics()
    warned = [r.getMessage() for r in caplog.records if (r.name, r.levelname) == ("store", "WARNING")]
    assert len(warned) == 1 and "delayed messages now due were not delivered" in warned[0], warned
