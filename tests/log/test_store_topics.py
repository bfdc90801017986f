"""store/log/topics.py and store/names.py: topics.json and the naming rules."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from store import names
from store.errors import InvalidNameError, TopicExistsError, TopicNotFoundError
from store.fsutil import json_crc
from store.layout import Layout
from store.log.consumequeue import queue_ids
from store.log.topics import TopicConfig, TopicTable
from tests.log.storetestutil import draft, open_store


def test_table_round_trip_in_rocketmq_shape(tmp_path: Path) -> None:
    lay = Layout(tmp_path)
    t = TopicTable(lay)
    assert t.all() == {} and t.get("A") is None
    t.save(TopicConfig("A", 4, False, 123, 0))
    t.save(TopicConfig("B", 2, True, 456, 789))
    obj = json.loads(lay.topic_config("B").read_text())
    crc = obj.pop("crc")
    assert obj == {"topicName": "B", "readQueueNums": 2, "writeQueueNums": 2,
                   "perm": 6, "order": True, "createdAt": 456, "createdOffset": 789}
    assert crc == json_crc(obj)
    assert json.loads(lay.topic_mirror("B").read_text()) == json.loads(lay.topic_config("B").read_text())
    assert sorted(os.listdir(lay.topic_cq_dir("B"))) == ["0", "1", "topic.json"], "queue dirs made at creation"
    fresh = TopicTable(lay)
    assert fresh.get("B") == TopicConfig("B", 2, True, 456, 789)
    assert set(fresh.all()) == {"A", "B"}
    epoch = lay.topics_epoch.read_bytes()
    t.save(TopicConfig("B", 3, True, 456, 789))
    assert fresh.get("B") == TopicConfig("B", 3, True, 456, 789), "a cached topic reloads when its file changes"
    # (its token, not its inode: a change replaces the file twice, and the second new file
    # may get the inode the first replacement freed)
    assert lay.topics_epoch.read_bytes() != epoch, "every change replaces the epoch token"


def test_damaged_config_falls_back_to_its_copy_and_warns(tmp_path: Path) -> None:
    lay = Layout(tmp_path)
    warned: list[str] = []
    TopicTable(lay).save(TopicConfig("A", 4))
    with open(lay.topic_config("A"), "r+b") as fh:   # one flipped digit: the crc catches it
        data = fh.read().replace(b'"writeQueueNums": 4', b'"writeQueueNums": 5')
        fh.seek(0)
        fh.write(data)
    assert TopicTable(lay, warn=warned.append).get("A") == TopicConfig("A", 4)
    assert warned and "crc mismatch" in warned[0]
    lay.topic_mirror("A").write_text("")
    assert TopicTable(lay, warn=warned.append).get("A") == TopicConfig("A", 4), "from its queue directories"
    assert "queue directories" in warned[-1] and "store recover" in warned[-1]
    for q in range(4):
        os.rmdir(lay.queue_dir("A", q))
    assert TopicTable(lay, warn=warned.append).get("A") is None


def test_legacy_table_is_read_and_migrated(tmp_path: Path) -> None:
    lay = Layout(tmp_path)
    lay.config_dir.mkdir()
    legacy = {"topicConfigTable": {"A": TopicConfig("A", 3, True, 1, 0).to_json()}, "dataVersion": {"counter": 1}}
    lay.topics_json.write_text(json.dumps(legacy))
    t = TopicTable(lay)
    assert t.legacy() and t.get("A") == TopicConfig("A", 3, True, 1, 0) and set(t.all()) == {"A"}
    t.migrate(lambda topic, qids: None, 0)
    assert not t.legacy() and lay.topics_json.with_name("topics.json.migrated").exists()
    assert TopicTable(lay).get("A") == TopicConfig("A", 3, True, 1, 0)
    assert queue_ids(lay, "A") == [0, 1, 2]


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
    assert names.validate_group("g" * 127)   # the spec's 1-127, as topics
    assert names.validate_any_topic(names.dlq_topic("g" * 127))
    for bad in ("g" * 128, "%RETRY%x", "CID_RMQ_SYS_x", "a b", ""):
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
    assert oct(os.stat(root / "config" / "topics" / "B.json").st_mode & 0o777) == "0o600"
    s.close()
