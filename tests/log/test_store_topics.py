"""store/log/topics.py and store/names.py: topics.json and the naming rules."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from store import names
from store.errors import CorruptionError, InvalidNameError, TopicExistsError, TopicNotFoundError
from store.log.topics import TopicConfig, TopicTable
from tests.log.storetestutil import draft, open_store


def test_table_round_trip_in_rocketmq_shape(tmp_path: Path) -> None:
    path = tmp_path / "config" / "topics.json"
    path.parent.mkdir()
    t = TopicTable(path)
    assert t.load() == {}
    t.save({"A": TopicConfig("A", 4, False, 123, 0), "B": TopicConfig("B", 2, True, 456, 789)})
    obj = json.loads(path.read_text())
    assert obj["topicConfigTable"]["B"] == {"topicName": "B", "readQueueNums": 2, "writeQueueNums": 2,
                                            "perm": 6, "order": True, "createdAt": 456, "createdOffset": 789}
    assert obj["dataVersion"]["counter"] == 1
    fresh = TopicTable(path)
    assert fresh.load()["B"] == TopicConfig("B", 2, True, 456, 789)
    t.save({"A": TopicConfig("A", 4)})
    assert (tmp_path / "config" / "topics.json.bak").exists()
    assert set(fresh.load()) == {"A"}, "a cached table reloads when the file changes"
    assert json.loads(path.read_text())["dataVersion"]["counter"] == 2


def test_damaged_table_falls_back_to_bak_and_warns(tmp_path: Path) -> None:
    path = tmp_path / "topics.json"
    warned: list[str] = []
    t = TopicTable(path, warn=warned.append)
    t.save({"A": TopicConfig("A", 4)})
    t.save({"A": TopicConfig("A", 4), "B": TopicConfig("B", 1)})
    path.write_text("{not json")
    assert set(TopicTable(path, warn=warned.append).load()) == {"A"}
    assert warned and "topics.json" in warned[0]
    path.with_name("topics.json.bak").write_text("")
    with pytest.raises(CorruptionError):
        TopicTable(path).load()


@pytest.mark.parametrize("name", ["T", "a-b_c|d%e", "x" * 127, "0"])
def test_valid_topic_names(name: str) -> None:
    assert names.validate_topic(name) == name


@pytest.mark.parametrize("name", ["", "x" * 128, "a b", "a/b", "..", "a.b", "tópico", "a\nb", "a*"])
def test_invalid_topic_names(name: str) -> None:
    with pytest.raises(InvalidNameError):
        names.validate_topic(name)


@pytest.mark.parametrize("name", ["RMQ_SYS_X", "%RETRY%g", "%DLQ%g", "SCHEDULE_TOPIC_XXXX", "TBW102"])
def test_reserved_topic_names_are_refused_for_users_but_readable(name: str) -> None:
    with pytest.raises(InvalidNameError, match="reserved"):
        names.validate_topic(name)
    assert names.validate_any_topic(name) == name


def test_group_names() -> None:
    assert names.validate_group("g" * 120)
    for bad in ("g" * 121, "%RETRY%x", "CID_RMQ_SYS_x", "a b", ""):
        with pytest.raises(InvalidNameError):
            names.validate_group(bad)
    assert names.retry_topic("g") == "%RETRY%g" and names.dlq_topic("g") == "%DLQ%g"


def test_store_topic_lifecycle(root: Path) -> None:
    s = open_store(root)
    cfg, created = s.create_topic("T", 4)
    assert created and cfg.queues == 4 and not cfg.order
    assert s.create_topic("T", 4) == (cfg, False)
    with pytest.raises(TopicExistsError):
        s.create_topic("T", 5)
    with pytest.raises(TopicExistsError):
        s.create_topic("T", 4, order=True)
    with pytest.raises(InvalidNameError):
        s.create_topic("%DLQ%x")
    s.put([draft("T", "m")])
    s.delete_topic("T")
    assert not s.has_topic("T") and not (root / "consumequeue" / "T").exists()
    with pytest.raises(TopicNotFoundError):
        s.topic("T")
    # re-created: the old record (still in the commit log) does not come back, even after a
    # full rebuild of the derived files
    s.create_topic("T", 4)
    with s.write_lock():
        s.recover(full=True)
    assert sum(s.max_offset("T", q) for q in range(4)) == 0
    s.close()


def test_created_offset_is_the_log_end(root: Path) -> None:
    s = open_store(root)
    s.put([draft("A", "x" * 50)])
    end = s.commitlog.end()
    cfg, _ = s.create_topic("B", 2)
    assert cfg.created_offset == end > 0
    assert oct(os.stat(root / "config" / "topics.json").st_mode & 0o777) == "0o600"
    s.close()
