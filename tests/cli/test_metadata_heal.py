"""Metadata that heals: topic files and group offsets survive damage, topics grow.

Every step is a real ``mqctl`` process on a real store; damage is done to the files the way a
user (or a disk) would: emptied, appended to, a digit flipped, deleted.
"""
from __future__ import annotations

import json
import os
import shutil

import pytest

from tests.procs import MQ, one_error, wait_for

OFFSETS = "config/consumerOffset.json"


def _bodies(res_lines: list[dict]) -> list[str]:
    return [e["body"] for e in res_lines]


def _consume(mq: MQ, topic: str, group: str, *extra: str) -> list[str]:
    res = mq.run("consume", topic, "-g", group, "-e", "--json", *extra)
    assert res.returncode == 0, str(res)
    return _bodies(res.json_lines())


def _status_queues(mq: MQ, topic: str) -> int:
    return len(mq.ok("topic", "status", topic, "--json").json_lines())


# -- D5: the offsets table and its .bak both damaged --------------------------------------------

@pytest.mark.parametrize("how", ["empty", "garbage", "deleted"])
def test_offsets_recovered_from_the_journal_when_both_files_are_lost(mq: MQ, how: str) -> None:
    mq.ok("topic", "create", "t", "--queues", "1")
    mq.send_lines("t", [f"m{i}" for i in range(10)])
    assert _consume(mq, "t", "G", "--from", "first", "--count", "4") == ["m0", "m1", "m2", "m3"]
    assert _consume(mq, "t", "H", "--from", "first", "--count", "7") == [f"m{i}" for i in range(7)]
    for name in (OFFSETS, OFFSETS + ".bak"):
        path = mq.root / name
        if how == "empty":
            path.write_bytes(b"")
        elif how == "garbage":
            path.write_bytes(b"\x00garbage{")
        else:
            path.unlink(missing_ok=True)
    msg_id = mq.ok("send", "t", "m10", "--json").json_lines()[0]["msgId"]
    # every group goes on where it was: nothing skipped, nothing delivered twice
    assert _consume(mq, "t", "G") == [f"m{i}" for i in range(4, 11)]
    assert _consume(mq, "t", "H") == ["m7", "m8", "m9", "m10"]
    assert _consume(mq, "t", "NEW", "--from", "first") == [f"m{i}" for i in range(11)]
    res = mq.run("msg", "show", msg_id)
    assert res.returncode == 0, str(res)
    mq.ok("store", "recover")
    mq.check_clean()


@pytest.mark.parametrize("copies", [(OFFSETS,), (OFFSETS, OFFSETS + ".bak")], ids=["table", "table-and-bak"])
def test_a_damaged_table_is_warned_of_once_per_command(mq: MQ, copies: tuple[str, ...]) -> None:
    """Each command read the table two or three times (the group looked up, then its offsets;
    a member's reset epochs, then its start), each read warning again."""
    mq.ok("topic", "create", "t", "--queues", "1")
    mq.send_lines("t", [f"m{i}" for i in range(6)])
    assert _consume(mq, "t", "G", "--from", "first", "--count", "3") == ["m0", "m1", "m2"]
    mq.ok("offsets", "show", "-g", "G")   # (the snapshot written: the .bak is a good copy)
    commands = [("offsets", "show", "-g", "G"), ("progress", "-g", "G"),
                ("offsets", "reset", "-g", "G", "--topic", "t", "--to-earliest"),
                ("consume", "t", "-g", "G", "-e")]
    for args in commands:
        for name in copies:
            (mq.root / name).write_bytes(b"\x00garbage{")
        res = mq.ok(*args)
        warned = [line for line in res.stderr.splitlines() if "is damaged" in line]
        assert len(warned) == 1 and OFFSETS in warned[0], f"{args}: {res.stderr}"
    assert mq.ok("consume", "t", "-g", "G", "-e").out.split() == [], "m3-m5 delivered once"


def test_a_flipped_digit_fails_the_crc_and_the_right_offset_comes_back(mq: MQ) -> None:
    mq.ok("topic", "create", "t", "--queues", "1")
    mq.send_lines("t", [f"m{i}" for i in range(10)])
    assert len(_consume(mq, "t", "G", "--from", "first", "--count", "4")) == 4
    path = mq.root / OFFSETS
    text = path.read_text()
    assert '"0": 4' in text
    path.write_text(text.replace('"0": 4', '"0": 6'))
    res = mq.run("store", "check")
    assert res.returncode == 1 and "crc" in res.out + res.stderr, str(res)
    assert _consume(mq, "t", "G") == [f"m{i}" for i in range(4, 10)], "the flipped offset would skip m4, m5"
    mq.check_clean()


def test_lost_group_is_named_by_check_and_reset_to_the_oldest_by_recover(mq: MQ) -> None:
    mq.ok("topic", "create", "t", "--queues", "1")
    mq.send_lines("t", [f"m{i}" for i in range(6)])
    _consume(mq, "t", "G", "--from", "first", "--count", "3")
    (mq.root / "config" / "consumerOffset.log").unlink()
    (mq.root / (OFFSETS + ".bak")).unlink(missing_ok=True)
    p = mq.root / OFFSETS
    p.write_text(p.read_text().replace('"0": 3', '"0": 9'))   # the crc fails; no .bak, no journal
    res = mq.run("store", "check")
    assert res.returncode == 1 and "group(s) G" in res.out + res.stderr, str(res)
    one_error(mq.run("consume", "t", "-g", "G", "-e"), 5)
    assert _consume(mq, "t", "OTHER", "--from", "first") == [f"m{i}" for i in range(6)], "other groups go on"
    res = mq.run("store", "recover")
    assert res.returncode == 0 and "group G" in res.stderr and "oldest message" in res.stderr, str(res)
    assert _consume(mq, "t", "G") == [f"m{i}" for i in range(6)], "reset to the oldest: nothing skipped"
    mq.check_clean()


@pytest.mark.parametrize("where", ["before-the-table-s-end", "past-the-table-s-end"])
def test_a_journal_record_damaged_in_the_middle_is_reported_and_recovered(mq: MQ, where: str) -> None:
    """Bit rot in a record of the offsets journal with valid records after it: readers stop
    at it (offsets fall back, nothing skipped), but ``store check`` said OK. Now check names
    the journal and the byte (exit 1) and ``store recover`` rewrites it from the table it can
    trust: never the records after the damage, never an offset past what was committed."""
    mq.ok("topic", "create", "t", "--queues", "1")
    mq.send_lines("t", [f"m{i}" for i in range(20)])
    for _ in range(4):   # each a commit record, and a table written when the member stops
        assert len(_consume(mq, "t", "G", "--from", "first", "--count", "2")) == 2
    journal = mq.root / "config" / "consumerOffset.log"
    damaged, expected = '"0":4', 8
    if where == "past-the-table-s-end":
        # a member's commits, appended after the table was last written (as a kill -9 leaves them)
        from store.log.offsets import ClusterOffsetStore
        table = ClusterOffsetStore(mq.store().layout)
        for offset in (10, 12, 14):
            table.commit("G", {("t", 0): offset}, journal_only=True)
        damaged, expected = '"0":12', 10
    data = bytearray(journal.read_bytes())
    at = data.index(damaged.encode())
    data[at + 4] ^= 0x01   # one bit: the record's CRC fails, the records after it are whole
    journal.write_bytes(bytes(data))
    offsets = mq.ok("offsets", "show", "-g", "G", "--json").json_lines()
    assert [o["offset"] for o in offsets] == [expected]
    res = mq.check()
    assert res.returncode == 1, str(res)
    problems = [p for p in res.json_lines() if "reason" in p]
    assert [(p["file"], p["known"]) for p in problems] == [(str(journal), False)], res.out
    assert "offsets journal damaged" in problems[0]["reason"] and 0 < problems[0]["offset"] <= at, res.out
    assert res.json_lines()[-1]["status"] == "DAMAGED"
    res = mq.ok("store", "recover")
    assert f"{journal} was damaged at byte {problems[0]['offset']}" in res.stderr, str(res)
    mq.check_clean()
    assert [o["offset"] for o in mq.ok("offsets", "show", "-g", "G", "--json").json_lines()] == [expected]
    assert _consume(mq, "t", "G") == [f"m{i}" for i in range(expected, 20)], "nothing skipped"
    mq.check_clean()


# -- D6: topics ------------------------------------------------------------------------------------

def _make_legacy(mq: MQ, table: dict[str, tuple[int, bool]], bak: dict[str, tuple[int, bool]]) -> None:
    """Turn the store into the one-file topic table of earlier versions."""
    cfg = mq.root / "config"

    def legacy(entries: dict[str, tuple[int, bool]]) -> str:
        return json.dumps({"topicConfigTable": {
            n: {"topicName": n, "readQueueNums": q, "writeQueueNums": q, "perm": 6, "order": o,
                "createdAt": 1, "createdOffset": 0} for n, (q, o) in entries.items()},
            "dataVersion": {"counter": 2, "timestamp": 1}})
    shutil.rmtree(cfg / "topics", ignore_errors=True)
    (cfg / "topics.epoch").unlink(missing_ok=True)
    for mirror in (mq.root / "consumequeue").glob("*/topic.json"):
        mirror.unlink()
    (cfg / "topics.json").write_text(legacy(table))
    (cfg / "topics.json.bak").write_text(legacy(bak))


def test_damaged_legacy_table_keeps_the_newest_topic_and_its_queue_count(mq: MQ) -> None:
    mq.ok("topic", "create", "A", "--queues", "2")
    mq.ok("topic", "create", "B", "--queues", "3")
    mq.send_lines("B", [f"b{i}" for i in range(9)])
    _make_legacy(mq, {"A": (2, False), "B": (3, False)}, {"A": (2, False)})
    with open(mq.root / "config" / "topics.json", "ab") as fh:
        fh.write(b"XX")
    res = mq.run("send", "B", "after")
    assert res.returncode == 0, str(res)
    assert _status_queues(mq, "B") == 3, "send re-created B with the default queue count"
    assert sorted(_consume(mq, "B", "G", "--from", "first")) == sorted([f"b{i}" for i in range(9)] + ["after"])
    mq.ok("store", "recover")
    listed = {r["topic"]: r["queues"] for r in mq.ok("topic", "list", "--json").json_lines()}
    assert listed == {"A": 2, "B": 3}
    mq.check_clean()


@pytest.mark.parametrize("damage", ["append", "delete-both"])
def test_damaged_topic_file_never_recreates_the_topic_with_other_settings(mq: MQ, damage: str) -> None:
    mq.ok("topic", "create", "B", "--queues", "3")
    mq.send_lines("B", [f"b{i}" for i in range(6)])
    config = mq.root / "config" / "topics" / "B.json"
    if damage == "append":
        with open(config, "ab") as fh:
            fh.write(b"XX")
    else:
        config.unlink()
        (mq.root / "consumequeue" / "B" / "topic.json").unlink()
    res = mq.run("send", "B", "-s", "key", "after")
    assert res.returncode == 0, str(res)
    assert _status_queues(mq, "B") == 3
    mq.ok("store", "recover")
    assert _status_queues(mq, "B") == 3
    assert len(_consume(mq, "B", "G", "--from", "first")) == 7
    mq.check_clean()


def test_store_json_lost_with_its_bak_intact(mq: MQ) -> None:
    mq.send_lines("t", ["one"])
    (mq.root / "store.json").unlink()
    res = mq.run("topic", "list", "--json")
    assert res.returncode == 0 and "store.json" in res.stderr, str(res)
    assert (mq.root / "store.json").exists()
    assert _consume(mq, "t", "G", "--from", "first") == ["one"]
    mq.check_clean()


# -- deletion a crash interrupted ------------------------------------------------------------------

@pytest.mark.parametrize("point", ["topic-delete-after-mark", "topic-delete-after-queues"])
def test_interrupted_topic_delete_is_finished(mq: MQ, point: str) -> None:
    mq.ok("topic", "create", "d", "--queues", "2")
    mq.send_lines("d", ["x", "y"])
    _consume(mq, "d", "G", "--from", "first")
    res = mq.run("topic", "delete", "d", "--yes", failpoints=point)
    assert res.returncode < 0, str(res)
    assert "d" not in {r["topic"] for r in mq.ok("topic", "list", "--json").json_lines()}
    assert mq.run("store", "check").returncode == 1
    res = mq.run("store", "recover")
    assert res.returncode == 0 and "deletion of topic 'd'" in res.stderr, str(res)
    assert not (mq.root / "consumequeue" / "d").exists()
    assert not (mq.root / "config" / "topics" / "d.json").exists()
    assert mq.offsets("G", "d") == {}
    mq.check_clean()
    mq.ok("send", "d", "fresh")
    assert _consume(mq, "d", "H", "--from", "first") == ["fresh"], "old messages came back"


# -- topic update --------------------------------------------------------------------------------

def test_topic_update_adds_queues_and_a_running_consumer_takes_them(mq: MQ) -> None:
    mq.ok("topic", "create", "u", "--queues", "2")
    # the backstop rebalance is far away: only the topic change can wake the member
    member = mq.start("consume", "u", "-g", "W", "--json", "--from", "first", "--rebalance-interval", "10m")
    mq.ok("send", "u", "-q", "1", "before")
    wait_for(lambda: b"before" in member.stdout(), what="the member to get the first message")
    res = mq.ok("topic", "update", "u", "--queues", "4", "--json")
    assert res.json_lines() == [{"topic": "u", "queues": 4, "order": False, "updated": True}]
    assert [r["queueId"] for r in mq.ok("topic", "status", "u", "--json").json_lines()] == [0, 1, 2, 3]
    mq.ok("send", "u", "-q", "3", "in-new-queue")
    wait_for(lambda: b"in-new-queue" in member.stdout(), what="the member to pick up queue 3")
    assert member.stop() == 0
    line = one_error(mq.run("topic", "update", "u", "--queues", "3"), 2, "topic 'u' has 4 queues")
    assert line.endswith("; --queues must be at least 4"), line   # (the CLI names its flag)
    res = mq.ok("topic", "update", "u", "--queues", "4")
    assert "already" in res.stderr
    one_error(mq.run("topic", "update", "nosuch", "--queues", "4"), 3)
    mq.check_clean()


def test_update_topic_in_python(mq: MQ) -> None:
    import store
    mq.ok("topic", "create", "p", "--queues", "2")
    with store.Admin(str(mq.root)) as admin:
        info = admin.update_topic("p", 5)
        assert (info.topic, info.queues) == ("p", 5)
        # a library error names the library's parameter, never the CLI's flag
        with pytest.raises(store.UsageError, match=r"^topic 'p' has 5 queues: .*; queues must be at least 5$"):
            admin.update_topic("p", 1)
        for call in (lambda: admin.update_topic("p", 0), lambda: admin.create_topic("q", 1025)):
            with pytest.raises(store.UsageError, match=r"^queues must be between 1 and 1024, got (0|1025)$"):
                call()
    assert _status_queues(mq, "p") == 5
    assert os.path.isdir(mq.root / "consumequeue" / "p" / "4")


def test_a_deleted_groups_old_offsets_in_a_damaged_snapshot_are_not_lost_offsets(mq: MQ) -> None:
    """A damaged snapshot names every ``topic@group`` it held, reset epochs included: a group
    whose offsets were deleted since is known to the journal by its epoch, not lost."""
    mq.ok("topic", "create", "t", "--queues", "1")   # one queue: the bodies come back in order
    mq.send_lines("t", ["a", "b"])
    _consume(mq, "t", "g1", "--from", "first")
    _consume(mq, "t", "g2", "--from", "first")
    mq.ok("offsets", "delete", "-g", "g2", "--yes")
    path = mq.root / "config" / "consumerOffset.json"
    path.write_bytes(path.read_bytes()[:-7] + b"garbage")
    res = mq.run("consume", "t", "-g", "g2", "--from", "first", "-e")
    assert res.returncode == 0 and res.out.split() == ["a", "b"], str(res)
    assert "g2" not in mq.run("store", "check").out
    assert _consume(mq, "t", "g1") == []


def test_a_topic_whose_config_alone_is_lost_is_still_listed(mq: MQ) -> None:
    """Its copy beside the queues stands in for every reader, ``topic list`` included, until
    a send or ``store recover`` writes the config again."""
    mq.ok("topic", "create", "jobs", "--queues", "3")
    mq.send_lines("jobs", ["a", "b"])
    (mq.root / "config" / "topics" / "jobs.json").unlink()
    rows = mq.ok("topic", "list", "--json").json_lines()
    assert [(r["topic"], r["queues"], r["messages"]) for r in rows] == [("jobs", 3, 2)]
    assert mq.run("store", "check").returncode == 1
    mq.ok("store", "recover")
    mq.check_clean()


def test_topics_whose_config_directory_is_gone_are_listed_as_every_reader_finds_them(mq: MQ) -> None:
    """``config/topics/`` deleted: ``topic list`` said "no topics" while ``topic status``,
    send and consume found each topic through its copy beside its queues (and ``store
    check`` checked none of their queues' entries). Now the list shows them from their
    copies, check names each config as lost, and recover writes them again (order kept)."""
    mq.ok("topic", "create", "jobs", "--queues", "3")
    mq.ok("topic", "create", "orders", "--queues", "2", "--order")
    mq.send_lines("jobs", ["a", "b"])
    shutil.rmtree(mq.root / "config" / "topics")
    rows = mq.ok("topic", "list", "--json").json_lines()
    assert [(r["topic"], r["queues"], r["order"], r["messages"]) for r in rows] == \
        [("jobs", 3, False, 2), ("orders", 2, True, 0)], rows
    assert _status_queues(mq, "jobs") == 3
    res = mq.check()
    assert res.returncode == 1, res
    named = sorted(p["file"] for p in res.json_lines() if "reason" in p)
    assert named == [str(mq.root / "consumequeue" / t) for t in ("jobs", "orders")], res.out
    assert res.json_lines()[-1]["cqEntries"] == 2, res.out   # (their queues checked too)
    mq.ok("store", "recover")
    mq.check_clean()
    cfg = json.loads((mq.root / "config" / "topics" / "orders.json").read_bytes())
    assert (cfg["writeQueueNums"], cfg["order"]) == (2, True), cfg
    rows = mq.ok("topic", "list", "--json").json_lines()
    assert [(r["topic"], r["queues"], r["order"]) for r in rows] == [("jobs", 3, False), ("orders", 2, True)]


@pytest.mark.parametrize("copy", ["intact", "damaged"])
def test_check_warns_of_a_damaged_topic_config_once_and_names_both_copies_when_both_are_lost(
        mq: MQ, copy: str) -> None:
    mq.ok("send", "t", "a")
    config, mirror = mq.root / "config" / "topics" / "t.json", mq.root / "consumequeue" / "t" / "topic.json"
    config.write_bytes(b"junk\n")
    if copy == "damaged":
        mirror.write_bytes(b"junk\n")
    res = mq.run("store", "check")
    assert res.returncode == 1, res
    warnings = [ln for ln in res.stderr.splitlines() if "warning" in ln]
    assert len(warnings) == 1 and str(config) in warnings[0], res.stderr
    named = [ln.split(":0:")[0] for ln in res.out.splitlines() if ":0:" in ln]
    assert named == ([str(config)] if copy == "intact" else [str(config), str(mirror)]), res.out


def test_a_topic_config_without_its_crc_is_named_in_sentences(mq: MQ) -> None:
    """"…/orders.json is no crc field" was the warning (and "was no crc field" recovery's)."""
    mq.ok("topic", "create", "orders", "--queues", "2")
    config, mirror = mq.root / "config" / "topics" / "orders.json", mq.root / "consumequeue" / "orders" / "topic.json"
    obj = json.loads(config.read_text())
    del obj["crc"]
    config.write_text(json.dumps(obj))
    res = mq.ok("topic", "status", "orders")
    assert f"{config} cannot be trusted (no crc field); using its copy {mirror} (" in res.stderr, res.stderr
    out = mq.run("store", "check").out
    assert f"{config}:0: topic config cannot be trusted (no crc field) (run mqctl store recover)" in out, out
    mirror.unlink()
    res = mq.ok("topic", "status", "orders")
    assert f"{config} cannot be trusted (no crc field), and its copy {mirror} is missing; using its 2" in res.stderr
    assert f"{mirror}:0: topic copy is missing too (" in mq.run("store", "check").out
    res = mq.ok("store", "recover")
    assert f"{config} cannot be trusted (no crc field); restored (2 queue(s))" in res.stderr, res.stderr
    mq.check_clean()
