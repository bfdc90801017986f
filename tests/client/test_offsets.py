"""Consumer offsets: the clustering table and the broadcast files."""
from __future__ import annotations

import json
import stat
import subprocess
import textwrap
from pathlib import Path

import pytest

from store.errors import CorruptionError, InvalidNameError, UsageError
from store.fsutil import json_crc, with_crc
from store.layout import Layout
from store.log.broadcastoffsets import BroadcastOffsetStore
from store.log.offsets import ClusterOffsetStore
from tests.procs import finish, python


@pytest.fixture
def cluster(layout: Layout, warnings: list[str]) -> ClusterOffsetStore:
    return ClusterOffsetStore(layout, warn=warnings.append)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def bak(path: Path) -> Path:
    return path.with_name(path.name + ".bak")


# -- clustering ------------------------------------------------------------------------------

def test_nothing_committed_reads_minus_one_and_creates_nothing(cluster: ClusterOffsetStore,
                                                                layout: Layout) -> None:
    assert cluster.read("g", "T", 0) == -1
    assert cluster.read_group("g") == {}
    assert cluster.groups() == []
    assert cluster.topics_of("g") == []
    assert not layout.root.exists()


def test_commit_round_trip_in_the_broker_file_format(cluster: ClusterOffsetStore, layout: Layout) -> None:
    assert cluster.commit("g", {("T", 0): 5, ("T", 1): 7, ("U", 0): 1}) == set()
    cluster.commit("h", {("T", 0): 2})

    assert cluster.read("g", "T", 1) == 7
    assert cluster.read_group("g") == {("T", 0): 5, ("T", 1): 7, ("U", 0): 1}
    assert cluster.groups() == ["g", "h"]
    assert cluster.topics_of("g") == ["T", "U"]
    path = layout.consumer_offset_json
    obj = json.loads(path.read_text())
    assert obj.pop("crc") == json_crc(obj)
    assert obj.pop("journalEnd") == layout.consumer_offset_log.stat().st_size - 16
    assert obj == {
        "offsetTable": {"T@g": {"0": 5, "1": 7}, "U@g": {"0": 1}, "T@h": {"0": 2}},
        "resetEpoch": {},
    }
    assert mode(path) == 0o600
    assert mode(path.parent) == 0o700


def test_commit_merges_only_the_given_queues(layout: Layout) -> None:
    first, second = ClusterOffsetStore(layout), ClusterOffsetStore(layout)
    first.commit("g", {("T", 0): 10, ("T", 1): 10})
    second.commit("g", {("T", 1): 20})
    assert first.read_group("g") == {("T", 0): 10, ("T", 1): 20}


def test_increase_only_never_moves_an_offset_back(cluster: ClusterOffsetStore) -> None:
    cluster.commit("g", {("T", 0): 10})
    cluster.commit("g", {("T", 0): 4})
    assert cluster.read("g", "T", 0) == 10
    cluster.commit("g", {("T", 0): 4}, increase_only=False)
    assert cluster.read("g", "T", 0) == 4


def test_reset_sets_exactly_and_bumps_the_epoch(cluster: ClusterOffsetStore) -> None:
    cluster.commit("g", {("T", 0): 10, ("T", 1): 10})
    assert cluster.epochs_of("g").get("T", 0) == 0
    assert cluster.reset("g", "T", {0: 3}) == 1
    assert cluster.read_group("g") == {("T", 0): 3, ("T", 1): 10}
    assert cluster.reset("g", "T", {1: 0}) == 2
    snapshot = cluster.snapshot("g")
    assert snapshot.offsets == {("T", 0): 3, ("T", 1): 0}
    assert snapshot.epochs == {"T": 2}
    assert cluster.epochs_of("h").get("T", 0) == 0


def test_stale_commit_after_a_reset_is_skipped_until_reloaded(layout: Layout) -> None:
    consumer, admin = ClusterOffsetStore(layout), ClusterOffsetStore(layout)
    consumer.commit("g", {("T", 0): 100, ("U", 0): 100})
    loaded = consumer.snapshot("g")

    admin.reset("g", "T", {0: 0})
    skipped = consumer.commit("g", {("T", 0): 150, ("U", 0): 150}, expected_epochs=loaded.epochs)

    assert skipped == {"T"}
    assert consumer.read("g", "T", 0) == 0  # the reset stands
    assert consumer.read("g", "U", 0) == 150  # other topics of the same commit are applied
    reloaded = consumer.snapshot("g")
    assert consumer.commit("g", {("T", 0): 5}, expected_epochs=reloaded.epochs) == set()
    assert consumer.read("g", "T", 0) == 5


def test_a_topic_missing_from_expected_epochs_is_expected_never_reset(cluster: ClusterOffsetStore) -> None:
    cluster.reset("g", "T", {0: 7})
    assert cluster.commit("g", {("T", 0): 9}, expected_epochs={}) == {"T"}
    assert cluster.read("g", "T", 0) == 7


def test_delete_topic_drops_every_groups_offsets_and_invalidates_holders(cluster: ClusterOffsetStore) -> None:
    cluster.commit("g", {("T", 0): 5, ("U", 0): 5})
    cluster.commit("h", {("T", 3): 5})
    loaded = cluster.snapshot("g")

    cluster.delete_topic("T")

    assert cluster.read_group("g") == {("U", 0): 5}
    assert cluster.groups() == ["g"]
    assert cluster.commit("g", {("T", 0): 6}, expected_epochs=loaded.epochs) == {"T"}
    assert cluster.read("g", "T", 0) == -1


@pytest.mark.parametrize("offsets, error", [
    ({("T", 0): -1}, UsageError),
    ({("T", -1): 3}, UsageError),
    ({("T", 0): True}, UsageError),
    ({("bad/topic", 0): 3}, InvalidNameError),
])
def test_bad_commits_are_refused(cluster: ClusterOffsetStore, offsets: dict, error: type) -> None:
    with pytest.raises(error):
        cluster.commit("g", offsets)
    assert cluster.read_group("g") == {}


def test_bad_group_name_is_refused(cluster: ClusterOffsetStore) -> None:
    with pytest.raises(InvalidNameError):
        cluster.commit("a@b", {("T", 0): 1})


def test_names_that_passed_once_do_not_let_others_pass(cluster: ClusterOffsetStore) -> None:
    """A store checks each group and topic name once (a member commits many times a second):
    the names it saw pass, and only those, skip the check, in the journal's commits as in
    the whole table's, and a topic name is not taken for a group name or the other way."""
    cluster.commit("g", {("T", 0): 1}, journal_only=True)
    assert cluster.try_commit("g", {("T", 0): 2}) == set()
    for group, offsets in (("g", {("bad/topic", 0): 3}), ("%RETRY%g", {("T", 0): 3}), ("T", {("g", 0): -1}),
                           ("a@b", {("T", 0): 3})):
        for commit in (cluster.commit, lambda g, o: cluster.commit(g, o, journal_only=True), cluster.try_commit):
            with pytest.raises((InvalidNameError, UsageError)):
                commit(group, offsets)
    cluster.commit("g", {("%RETRY%g", 0): 5})   # a retry topic is a topic: never a group
    with pytest.raises(InvalidNameError):
        cluster.commit("%RETRY%g", {("T", 0): 6})
    assert cluster.read_group("g") == {("T", 0): 2, ("%RETRY%g", 0): 5}


def test_the_lock_file_directory_is_made_when_missing(tmp_path: Path) -> None:
    from store.errors import StoreIOError
    from store.log.offsets import exclusive
    lock = tmp_path / "a" / "b" / "x.lock"
    with exclusive(lock):
        assert mode(lock) == 0o600 and mode(lock.parent) == mode(lock.parent.parent) == 0o700
    with exclusive(lock):   # (there now: opened at once)
        pass
    (tmp_path / "f").write_text("")
    with pytest.raises(StoreIOError, match="cannot create directory .*/f: "), exclusive(tmp_path / "f" / "c" / "x.lock"):
        pass


def test_garbage_main_file_falls_back_to_bak_and_journal_with_a_warning(cluster: ClusterOffsetStore, layout: Layout,
                                                                         warnings: list[str]) -> None:
    path = layout.consumer_offset_json
    cluster.commit("g", {("T", 0): 5})
    cluster.commit("g", {("T", 0): 9})  # .bak now holds 5, the journal 9
    path.write_bytes(b"\x00garbage{")

    assert cluster.read("g", "T", 0) == 9
    assert len(warnings) == 1 and str(path) in warnings[0] and ".bak" in warnings[0]

    cluster.commit("g", {("T", 1): 1})
    assert json.loads(path.read_text())["offsetTable"] == {"T@g": {"0": 9, "1": 1}}
    # The unreadable file was not rotated over the good copy.
    assert json.loads(bak(path).read_text())["offsetTable"] == {"T@g": {"0": 5}}


@pytest.mark.parametrize("content", [
    {"offsetTable": {"T@g": {"0": "9"}}},
    {"offsetTable": {"Tg": {"0": 9}}},
    {"offsetTable": {"T@g": {"x": 9}}},
    {"offsetTable": [], "resetEpoch": {}},
    {"offsetTable": {}, "resetEpoch": {"T@g": -1}},
    {"offsetTable": {"T@g": {"0": 9}}},   # no crc: written by hand beside a journal
    [1, 2],
])
def test_wrong_shape_counts_as_unreadable(cluster: ClusterOffsetStore, layout: Layout,
                                          warnings: list[str], content: object) -> None:
    cluster.commit("g", {("T", 0): 5})
    cluster.commit("g", {("T", 0): 6})
    layout.consumer_offset_json.write_text(json.dumps(content))
    assert cluster.read("g", "T", 0) == 6
    assert warnings


def test_both_files_unreadable_are_rebuilt_from_the_journal(cluster: ClusterOffsetStore, layout: Layout) -> None:
    path = layout.consumer_offset_json
    cluster.commit("g", {("T", 0): 5})
    cluster.commit("g", {("T", 0): 6})
    path.write_text("{")
    bak(path).write_text("")
    assert cluster.read("g", "T", 0) == 6
    cluster.commit("g", {("T", 0): 7})
    assert json.loads(path.read_text())["offsetTable"] == {"T@g": {"0": 7}}


def test_both_files_unreadable_without_a_journal_is_a_corruption_error(cluster: ClusterOffsetStore,
                                                                      layout: Layout) -> None:
    path = layout.consumer_offset_json
    cluster.commit("g", {("T", 0): 5})
    cluster.commit("g", {("T", 0): 6})
    layout.consumer_offset_log.unlink()   # a store of an older version
    path.write_text("{")
    bak(path).write_text("")

    with pytest.raises(CorruptionError) as caught:
        cluster.read("g", "T", 0)
    assert caught.value.path == str(path)
    assert caught.value.exit_code == 5
    with pytest.raises(CorruptionError):
        cluster.commit("g", {("T", 0): 7})
    assert path.read_text() == "{"  # never silently restarted from nothing
    assert cluster.reset_lost(lambda t, q: 0, lambda t: 1) == []   # recovery alone starts it over
    assert cluster.read("g", "T", 0) == -1


def test_journal_is_compacted_past_its_bound(cluster: ClusterOffsetStore, layout: Layout,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from store.log import offsetjournal
    monkeypatch.setattr(offsetjournal, "COMPACT_BYTES", 2000)
    for i in range(200):
        cluster.commit("g", {("T", i % 4): i})
    assert layout.consumer_offset_log.stat().st_size < 2000 + 200
    layout.consumer_offset_json.unlink()
    bak(layout.consumer_offset_json).unlink()
    assert cluster.read_group("g") == {("T", q): 196 + q for q in range(4)}


def test_default_warning_goes_to_the_librarys_channel(layout: Layout, caplog: pytest.LogCaptureFixture) -> None:
    """(store.errors.warn: a record of the ``store`` logger where logging is set up, as here;
    a ``mqctl: warning:`` line where it is not, tests/client/test_warning_channel.py.)"""
    store = ClusterOffsetStore(layout)
    store.commit("g", {("T", 0): 1})
    store.commit("g", {("T", 0): 2})
    layout.consumer_offset_json.write_text("not json")
    assert store.read("g", "T", 0) == 2
    assert [(r.name, r.levelname) for r in caplog.records] == [("store", "WARNING")]
    assert "is damaged" in caplog.records[0].getMessage()


COMMITTER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from store.layout import Layout
    from store.log.offsets import ClusterOffsetStore

    root, group, queue_id, count, start = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), Path(sys.argv[5])
    store = ClusterOffsetStore(Layout(Path(root)))
    while not start.exists():
        time.sleep(0.001)
    for offset in range(1, count + 1):
        store.commit(group, {("T", queue_id): offset})
        # A lost update would show up as our own queue going back.
        seen = store.read(group, "T", queue_id)
        if seen != offset:
            sys.exit(f"queue {queue_id}: committed {offset}, read back {seen}")
""")


def test_concurrent_commits_from_four_processes_lose_nothing(layout: Layout, tmp_path: Path) -> None:
    count = 150
    start = tmp_path / "start"
    members = [("g", 0), ("g", 1), ("g", 2), ("other", 0)]
    procs = [python(COMMITTER, layout.root, group, qid, count, start, stderr=subprocess.PIPE)
             for group, qid in members]
    start.touch()
    finish(*procs)
    store = ClusterOffsetStore(layout)
    assert store.read_group("g") == {("T", 0): count, ("T", 1): count, ("T", 2): count}
    assert store.read_group("other") == {("T", 0): count}


# -- broadcasting ----------------------------------------------------------------------------

def broadcast(layout: Layout, warnings: list[str], client_id: str = "host@1") -> BroadcastOffsetStore:
    return BroadcastOffsetStore(layout, client_id, "g", warn=warnings.append)


def test_broadcast_round_trip_in_the_local_file_format(layout: Layout, warnings: list[str]) -> None:
    store = broadcast(layout, warnings)
    store.update("T", 1, 42)
    store.update("T", 0, 7)
    store.persist({("T", 0), ("T", 1)})

    path = layout.root / "offsets" / "host@1" / "g" / "offsets.json"
    obj = json.loads(path.read_text())
    assert obj == with_crc({"offsetTable": [   # (RocketMQ's table, and our checksum beside it)
        {"topic": "T", "brokerName": "mqctl", "queueId": 0, "offset": 7},
        {"topic": "T", "brokerName": "mqctl", "queueId": 1, "offset": 42},
    ]})
    assert mode(path) == 0o600
    assert mode(path.parent) == mode(path.parent.parent) == 0o700
    reopened = broadcast(layout, warnings)
    assert reopened.read("T", 0) == -1  # nothing until load()
    assert reopened.load() == {("T", 0): 7, ("T", 1): 42}
    assert reopened.read("T", 1) == 42


def test_broadcast_clients_have_separate_files(layout: Layout, warnings: list[str]) -> None:
    first, second = broadcast(layout, warnings, "a@1"), broadcast(layout, warnings, "b@2")
    first.update("T", 0, 5)
    first.persist({("T", 0)})
    assert second.load() == {}


def test_broadcast_update_is_increase_only_unless_told(layout: Layout, warnings: list[str]) -> None:
    store = broadcast(layout, warnings)
    store.update("T", 0, 10)
    store.update("T", 0, 3)
    assert store.read("T", 0) == 10
    store.update("T", 0, 3, increase_only=False)
    assert store.read("T", 0) == 3


def test_broadcast_persist_replaces_only_owned_queues(layout: Layout, warnings: list[str]) -> None:
    before = broadcast(layout, warnings)
    before.update("T", 0, 5)
    before.update("T", 1, 5)
    before.persist({("T", 0), ("T", 1)})

    after = broadcast(layout, warnings)  # never loaded: holds only what it updates
    after.update("T", 1, 9)
    after.update("T", 2, 9)
    after.persist({("T", 1), ("T", 3)})  # T:2 not owned, T:3 owned but never updated

    assert broadcast(layout, warnings).load() == {("T", 0): 5, ("T", 1): 9}


def test_broadcast_garbage_falls_back_to_bak(layout: Layout, warnings: list[str]) -> None:
    store = broadcast(layout, warnings)
    store.update("T", 0, 5)
    store.persist({("T", 0)})
    store.update("T", 0, 8)
    store.persist({("T", 0)})
    path = layout.broadcast_offsets("host@1", "g")
    path.write_text('{"offsetTable": {"{\\"topic\\":\\"T\\"}": 8}}')  # fastjson-ish map: not ours

    assert broadcast(layout, warnings).load() == {("T", 0): 5}
    assert len(warnings) == 1 and str(path) in warnings[0]


def test_broadcast_both_files_unreadable_is_a_corruption_error(layout: Layout, warnings: list[str]) -> None:
    store = broadcast(layout, warnings)
    store.update("T", 0, 5)
    store.persist({("T", 0)})
    store.update("T", 0, 6)
    store.persist({("T", 0)})
    path = layout.broadcast_offsets("host@1", "g")
    path.write_text("[")
    bak(path).write_text('{"offsetTable": [{"topic": "T", "queueId": 0, "offset": 5}]}')  # no brokerName

    with pytest.raises(CorruptionError) as caught:
        broadcast(layout, warnings).load()
    assert caught.value.path == str(path)
    with pytest.raises(CorruptionError):
        store.persist({("T", 0)})


def test_broadcast_refuses_a_client_id_that_could_leave_the_store(layout: Layout, warnings: list[str]) -> None:
    with pytest.raises(InvalidNameError):
        broadcast(layout, warnings, "../x")


def test_a_new_table_is_never_seen_as_a_journal_without_its_snapshot(tmp_path: Path, monkeypatch) -> None:
    # The first commit of a store wrote the journal, then the snapshot: a reader in between
    # (members starting together) found no snapshot and warned that the table was damaged
    from store.log import offsetjournal, offsettable
    lay = Layout(tmp_path)
    (tmp_path / "config").mkdir()
    seen: list[str] = []
    rewrite = offsetjournal.Journal.rewrite

    def journal_written_then_look(self, *args, **kw):   # noqa: ANN001, ANN202
        end = rewrite(self, *args, **kw)
        seen.append(offsettable.load(lay).source)
        return end

    monkeypatch.setattr(offsetjournal.Journal, "rewrite", journal_written_then_look)
    warnings: list[str] = []
    ClusterOffsetStore(lay, warn=warnings.append).commit("g", {("T", 0): 1})
    assert seen == ["snapshot"] and not warnings
    assert ClusterOffsetStore(lay).read_group("g") == {("T", 0): 1}
