"""``config/topics.json``: RocketMQ's view of the topics (store/log/topicsview.py), as cli.md's
store layout names it, derived from the per-topic files and never read as truth."""
from __future__ import annotations

import json

from store.layout import Layout
from store.log.topics import TopicConfig, TopicTable
from tests.procs import MQ

VIEW = "config/topics.json"


def _view(mq: MQ) -> dict:
    return json.loads((mq.root / VIEW).read_text())


def _table(mq: MQ) -> dict:
    return _view(mq)["topicConfigTable"]


def test_init_writes_an_empty_view(mq: MQ) -> None:
    view = _view(mq)
    assert view["topicConfigTable"] == {}
    assert view["derivedFrom"] == "config/topics"
    assert isinstance(view["dataVersion"]["timestamp"], int) and isinstance(view["dataVersion"]["counter"], int)
    assert not TopicTable(Layout(mq.root)).legacy(), "the view is not taken for a legacy table"


def test_view_follows_create_update_delete_in_rocketmq_shape(mq: MQ) -> None:
    mq.ok("send", "auto", "x")                       # created on first send
    mq.ok("topic", "create", "ord", "--queues", "2", "--order")
    assert _table(mq) == {
        "auto": {"topicName": "auto", "readQueueNums": 8, "writeQueueNums": 8, "perm": 6,
                 "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": False},
        "ord": {"topicName": "ord", "readQueueNums": 2, "writeQueueNums": 2, "perm": 6,
                "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": True}}
    counter = _view(mq)["dataVersion"]["counter"]
    mq.ok("topic", "update", "auto", "--queues", "12")
    assert _table(mq)["auto"]["writeQueueNums"] == 12 and _table(mq)["auto"]["readQueueNums"] == 12
    assert _view(mq)["dataVersion"]["counter"] > counter
    mq.ok("topic", "delete", "auto", "--yes")
    assert set(_table(mq)) == {"ord"}
    assert _view(mq)["dataVersion"]["epoch"] == (mq.root / "config/topics.epoch").read_text().strip()
    assert not list((mq.root / "config").glob(".*tmp")), "written through a temp file, renamed"
    mq.check_clean()


def test_a_topic_being_deleted_is_not_listed(mq: MQ) -> None:
    mq.ok("topic", "create", "gone")
    res = mq.run("topic", "delete", "gone", "--yes", failpoints="topic-delete-after-mark")
    assert res.returncode == -9, str(res)
    assert "gone" not in _table(mq)


def test_a_view_that_missed_a_change_is_rewritten_by_the_next_writer(mq: MQ) -> None:
    mq.ok("topic", "create", "a")
    res = mq.run("topic", "create", "b", failpoints="topic-save-before-view")
    assert res.returncode == -9, str(res)
    assert set(_table(mq)) == {"a"}, "killed between the topic's file and the view"
    check = mq.run("store", "check")
    assert check.returncode == 0, str(check)   # a derived view: a warning, not damage
    assert "mqctl: warning: " in check.stderr and VIEW in check.stderr and "store recover" in check.stderr
    assert set(_table(mq)) == {"a"}, "check changes nothing"
    mq.ok("send", "a", "x")                    # the next writer sees the old epoch token in it
    assert set(_table(mq)) == {"a", "b"}
    assert "warning" not in mq.ok("store", "check").stderr


def test_store_recover_rewrites_a_damaged_or_missing_view(mq: MQ) -> None:
    mq.ok("topic", "create", "a", "--queues", "3")
    (mq.root / VIEW).write_text('{"derivedFrom": "config/topics", "topicConfigTable": {"zzz": {}}}')
    # (each a sentence: "the topics' RocketMQ view is does not list ..." it was)
    assert "the topics' RocketMQ view does not list the topics as" in mq.run("store", "check").stderr
    mq.ok("store", "recover")
    assert set(_table(mq)) == {"a"} and _table(mq)["a"]["writeQueueNums"] == 3
    (mq.root / VIEW).unlink()                  # a store of an earlier version has none
    assert "the topics' RocketMQ view is missing (" in mq.run("store", "check").stderr
    mq.ok("topic", "list")
    assert set(_table(mq)) == {"a"}
    (mq.root / VIEW).write_text("{ torn")       # never read as truth, nor taken for a legacy table
    assert "the topics' RocketMQ view is not valid JSON (" in mq.run("store", "check").stderr
    listed = mq.ok("topic", "list", "--json")
    assert listed.json_lines()[0]["topic"] == "a" and "warning" not in listed.stderr, str(listed)
    assert set(_table(mq)) == {"a"} and not (mq.root / "config/topics.json.migrated").exists()


def test_legacy_table_migrates_and_the_view_takes_its_place(mq: MQ) -> None:
    legacy = {"topicConfigTable": {"old": TopicConfig("old", 3, True, 1, 0).to_json()},
              "dataVersion": {"counter": 7, "timestamp": 1}}
    (mq.root / VIEW).write_text(json.dumps(legacy))
    assert TopicTable(Layout(mq.root)).legacy()
    mq.ok("send", "old", "x", "--queue", "1")
    assert (mq.root / "config/topics.json.migrated").exists()
    assert _table(mq)["old"]["writeQueueNums"] == 3 and _table(mq)["old"]["order"] is True
    assert _view(mq)["derivedFrom"] == "config/topics"
    assert not TopicTable(Layout(mq.root)).legacy()
    mq.check_clean()


def test_recovery_rewrites_a_view_with_the_current_token_but_old_content(tmp_path) -> None:  # noqa: ANN001
    # (a power cut may keep the old epoch token, which the view then matches)
    from store.log import topicsview
    lay = Layout(tmp_path)
    t = TopicTable(lay)
    t.save(TopicConfig("A", 4))
    topicsview.write(lay.topics_json, {}, t.epoch_token())
    assert not t.view.stale() and t.view.problem() is not None
    assert t.view.refresh() == "does not list the topics as config/topics/ has them"
    assert set(json.loads(lay.topics_json.read_text())["topicConfigTable"]) == {"A"}
    assert t.view.refresh() is None


def test_recovery_says_in_a_sentence_why_it_rewrote_the_view(mq: MQ) -> None:
    """"(the topics' RocketMQ view) was does not list the topics ..." it said."""
    from store.log import topicsview
    mq.ok("topic", "create", "a", "--queues", "3")
    lay = Layout(mq.root)
    topicsview.write(lay.topics_json, {}, TopicTable(lay).epoch_token())   # (the current token: not stale)
    res = mq.ok("store", "recover")
    assert (f"{lay.topics_json} (the topics' RocketMQ view) does not list the topics as config/topics/ has them; "
            f"rewritten") in res.stderr, res.stderr
    assert set(_table(mq)) == {"a"}
