"""store/log/messagestore.py: the Store façade — put, pull, find, query_key, search_offset, queue choice."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from store.errors import (
    MessageNotFoundError,
    MessageTooLargeError,
    StoreNotFoundError,
    TopicNotFoundError,
    UsageError,
)
from store.log import format as F
from store.log.messagestore import Store
from store.log.record import java_hash
from tests.log.storetestutil import all_messages, draft, jhash, open_store


def files_under(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*") if p.is_file()}


# -- opening ----------------------------------------------------------------------------------

def test_reading_a_missing_store_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(StoreNotFoundError) as ei:
        Store.open(tmp_path / "nope")
    assert ei.value.exit_code == 3
    assert not (tmp_path / "nope").exists()


def test_create_makes_rocketmq_layout_private_to_the_user(root: Path) -> None:
    s = open_store(root)
    for d in ("commitlog", "consumequeue", "index", "config"):
        assert (root / d).is_dir()
        assert (root / d).stat().st_mode & 0o777 == 0o700
    assert (root / "store.json").exists()
    s.close()


def test_a_store_another_process_is_making_is_waited_for(root: Path) -> None:
    """Two commands into a new store at once: the one that finds the other making it (its
    directories and checkpoint made, the store directory's lock held, no store.json yet) waits
    for it and opens the store (it once failed at once, exit 2: "is not empty and is not an
    mqctl store"), the other's checkpoint left alone."""
    import threading

    from store.layout import Layout
    from store.log import preflight
    from store.log.settings import StoreSettings, write_new
    made = threading.Event()
    go_on = threading.Event()
    got: list[object] = []

    def settings() -> None:   # (the other maker, before its store.json)
        made.set()
        go_on.wait(30)
        write_new(Layout(root), StoreSettings())
    maker = threading.Thread(target=lambda: preflight.claim_new_store(Layout(root), settings))
    maker.start()
    assert made.wait(30)
    checkpoint = (root / "checkpoint").read_bytes()
    opener = threading.Thread(target=lambda: got.append(_open_or_error(root)))
    opener.start()
    opener.join(0.3)
    assert opener.is_alive() and not got   # (waiting for the maker's lock)
    go_on.set()
    maker.join()
    opener.join()
    assert isinstance(got[0], Store), got
    got[0].close()
    assert (root / "checkpoint").read_bytes() == checkpoint


def test_a_maker_arriving_late_leaves_the_first_makers_checkpoint_alone(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both makers found no store.json; the first one made the store and wrote into it
    before the second one got to its checkpoint: that must not be put back to an empty log's
    (the next writer would take the store for damaged and recover it)."""
    s = open_store(root)
    s.put([draft("T", "x")])
    s.close()
    written = (root / "checkpoint").read_bytes()
    Store._initialise(root, s.settings)   # (what the second maker does once past its look)
    assert (root / "checkpoint").read_bytes() == written


def test_a_half_made_store_whose_maker_died_is_made_again(root: Path) -> None:
    """A store whose maker stopped before its store.json (a full disk, a kill -9: no one holds
    its lock) is made again by the next opener that may create it; one that may not says
    so (exit 3, naming ``mqctl init``). It once stayed refused for good ("is not empty and is
    not an mqctl store"): only ``rm -rf`` got out."""
    from store.layout import Layout
    from store.log import preflight
    assert preflight.claim_new_store(Layout(root))   # (no store.json written)
    (root / "checkpoint").write_bytes(b"")   # (the full disk's)
    with pytest.raises(StoreNotFoundError, match="creation did not finish .*mqctl init"):
        Store.open(root)
    with Store.open(root, create=True) as s:
        s.put([draft("T", "x")])
    with Store.open(root) as s:
        assert [m.body for m in all_messages(s, "T")] == [b"x"]


@pytest.mark.parametrize("extra", ["notes", "commitlog/00000000000000000000", "config/topics/t.json",
                                   "consumequeue/t/0/00000000000000000000"])
def test_a_directory_with_anything_a_creation_does_not_make_is_refused(root: Path, extra: str) -> None:
    """Beside a half-made store's files, anything else (a user's file, a segment, a topic, a
    queue) makes it not a store: refused (exit 2), and nothing in it touched."""
    from store.layout import Layout
    from store.log import preflight
    assert preflight.claim_new_store(Layout(root))
    (root / extra).parent.mkdir(parents=True, exist_ok=True)
    (root / extra).write_bytes(b"mine")
    before = sorted((str(p), p.read_bytes() if p.is_file() else b"") for p in root.rglob("*"))
    with pytest.raises(UsageError, match="is not empty and is not an mqctl store"):
        Store.open(root, create=True)
    with pytest.raises(StoreNotFoundError, match="is not an mqctl store"):
        Store.open(root)
    assert sorted((str(p), p.read_bytes() if p.is_file() else b"") for p in root.rglob("*")) == before


def _open_or_error(root: Path) -> object:
    try:
        return Store.open(root, create=True)
    except Exception as exc:   # (the test names it)
        return exc


# -- put and pull -----------------------------------------------------------------------------

def test_create_syncs_the_store_directory_once_for_its_subdirectories(tmp_path: Path, monkeypatch) -> None:
    """Every name a new store holds is durable when Store.open(create=True) returns, with two
    fsyncs of the store's directory (one after its four subdirectories, one after store.json's
    rename, which also covers store.json.bak's), not one per name: a created store is paid
    for by every first send."""
    root = tmp_path / "s"
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    Store.open(root, create=True).close()
    monkeypatch.undo()
    assert synced.count(str(root)) == 2, synced
    assert synced.count(str(tmp_path)) == 1   # root's own name
    first_file = next(i for i, p in enumerate(synced) if p.startswith(str(root / ".store.json")))
    assert synced.index(str(root)) < first_file, synced   # the subdirectories before store.json
    names = sorted(p.name for p in root.iterdir())
    assert {"commitlog", "consumequeue", "index", "config", "store.json", "store.json.bak"} <= set(names), names


def test_put_then_pull_gives_dense_offsets_and_all_fields(store: Store) -> None:
    store.create_topic("T", 2)
    res = store.put([draft("T", f"m{i}", queue_id=i % 2, properties={"TAGS": "A" if i % 3 else "B", "KEYS": f"k{i} all", "p": "v"})
                     for i in range(10)])
    assert [r.queue_offset for r in res if r.queue_id == 0] == [0, 1, 2, 3, 4]
    assert [r.queue_offset for r in res if r.queue_id == 1] == [0, 1, 2, 3, 4]
    offs = [r.commitlog_offset for r in res]
    assert offs == sorted(offs) and len(set(offs)) == 10
    pr = store.pull("T", 1, 0, 32)
    assert [m.body for m in pr.messages] == [b"m1", b"m3", b"m5", b"m7", b"m9"]
    assert (pr.next_offset, pr.max_offset, pr.damaged) == (5, 5, [])
    m = pr.messages[0]
    assert (m.topic, m.queue_id, m.queue_offset, m.tags, m.keys) == ("T", 1, 0, "A", ["k1", "all"])
    assert m.user_properties == {"p": "v"} and m.uniq_key == res[1].uniq_key
    assert m.store_timestamp == res[1].store_timestamp and m.born_host.startswith("127.0.0.1:")
    # from the middle, with a count
    assert [m.queue_offset for m in store.pull("T", 0, 2, 2).messages] == [2, 3]
    # at the end: nothing, next stays
    end = store.pull("T", 0, 5)
    assert (end.messages, end.next_offset) == ([], 5)


def test_pull_filters_by_tag_code_then_exact_tag(store: Store) -> None:
    store.create_topic("T", 1)
    store.put([draft("T", f"m{i}", properties={"TAGS": t}) for i, t in enumerate("ABCAB")])
    codes = frozenset({java_hash("A"), java_hash("C")})
    pr = store.pull("T", 0, 0, 32, tag_codes=codes, tags=frozenset({"A", "C"}))
    assert [m.body for m in pr.messages] == [b"m0", b"m2", b"m3"]
    assert pr.next_offset == 5   # filtered-out messages still advance the offset


def test_pull_stops_at_max_bytes(store: Store) -> None:
    store.create_topic("T", 1)
    store.put_bodies("T", [b"x" * 1000] * 10)
    pr = store.pull("T", 0, 0, 32, max_bytes=3000)
    assert 1 <= len(pr.messages) <= 3 and pr.next_offset == len(pr.messages)


def test_put_bodies_matches_put(store: Store) -> None:
    res = store.put_bodies("T", [b"a", b"", b"\x00\xff", b"d" * 5000],
                           properties={"TAGS": "tg", "KEYS": "k1 k2", "x": "y"})
    assert len(res) == 4 and store.topic("T").queues == 8
    got = sorted(all_messages(store, "T"), key=lambda m: m.commitlog_offset)
    assert [m.body for m in got] == [b"a", b"", b"\x00\xff", b"d" * 5000]
    for m, uk, qid, qoff in zip(got, res.uniq_keys, res.queue_ids, res.queue_offsets):
        assert (m.uniq_key, m.queue_id, m.queue_offset) == (uk, qid, qoff)
        assert m.tags == "tg" and m.keys == ["k1", "k2"] and m.user_properties == {"x": "y"}
    assert len(set(res.uniq_keys)) == 4


# -- finding ----------------------------------------------------------------------------------

def test_find_by_offset_id_and_by_unique_key(store: Store) -> None:
    res = store.put([draft("T", f"m{i}") for i in range(5)])
    bres = store.put_bodies("T", [b"b0", b"b1"])
    for i, r in enumerate(res):
        assert store.find(r.msg_id).body == f"m{i}".encode()
        assert store.find(r.msg_id.lower()).body == f"m{i}".encode()
        assert store.find(r.uniq_key).body == f"m{i}".encode()
    assert store.find(bres.uniq_keys[1]).body == b"b1"
    with pytest.raises(MessageNotFoundError) as ei:
        store.find("0" * 32)
    assert ei.value.exit_code == 3
    # an offset id that points between records is not found, not mis-decoded
    with pytest.raises(MessageNotFoundError):
        store.find(F"{F.LOOPBACK_IP:08X}{F.STORE_PORT:08X}{res[1].commitlog_offset + 3:016X}")


def test_query_key_newest_first_and_per_topic(store: Store) -> None:
    store.put([draft("T", f"m{i}", properties={"KEYS": f"order-{i % 3} common"}) for i in range(9)])
    store.put([draft("U", "other", properties={"KEYS": "order-1"})])
    assert [m.body for m in store.query_key("T", "order-1")] == [b"m7", b"m4", b"m1"]
    assert len(store.query_key("T", "common")) == 9
    assert [m.body for m in store.query_key("T", "common", limit=2)] == [b"m8", b"m7"]
    assert [m.body for m in store.query_key("U", "order-1")] == [b"other"]
    assert store.query_key("T", "order") == []   # whole keys only


def test_search_offset_uses_the_lower_boundary(store: Store, monkeypatch) -> None:
    store.create_topic("T", 1)
    clock = [1_700_000_000.000]
    monkeypatch.setattr(time, "time", lambda: clock[0])
    stamps = []
    for ts_s, n in [(0.0, 2), (1.0, 3), (1.0, 1), (5.0, 2)]:
        clock[0] = 1_700_000_000.0 + ts_s
        stamps += [r.store_timestamp for r in store.put([draft("T", "x")] * n)]
    monkeypatch.undo()
    base = 1_700_000_000_000
    assert stamps == [base] * 2 + [base + 1000] * 4 + [base + 5000] * 2
    assert store.search_offset("T", 0, base - 1) == 0
    assert store.search_offset("T", 0, base) == 0
    assert store.search_offset("T", 0, base + 1) == 2       # first one stored at or after
    assert store.search_offset("T", 0, base + 1000) == 2    # LOWER: the first of equals
    assert store.search_offset("T", 0, base + 1001) == 6
    assert store.search_offset("T", 0, base + 5000) == 6
    assert store.search_offset("T", 0, base + 5001) == 8    # newer than all: max offset


def test_store_timestamps_never_go_back(store: Store, monkeypatch) -> None:
    clock = [1_700_000_010.0]
    monkeypatch.setattr(time, "time", lambda: clock[0])
    a = store.put([draft("T", "a")])[0].store_timestamp
    clock[0] -= 5   # the wall clock steps back
    b = store.put([draft("T", "b")])[0].store_timestamp
    c = store.put_bodies("T", [b"c"]).store_timestamp
    assert a <= b <= c


def test_min_offset_follows_retention_of_the_commit_log(root: Path) -> None:
    s = open_store(root, commitlog_segment_size=4096, max_message_size=1000)
    s.create_topic("T", 1)
    res = s.put_bodies("T", [b"y" * 300] * 40)
    assert s.min_offset("T", 0) == 0
    first_kept = s.commitlog.segments()[2]
    for base in s.commitlog.segments()[:2]:
        s.commitlog.segment_path(base).unlink()
    want = next(i for i, p in enumerate(res.commitlog_offsets) if p >= first_kept)
    assert s.min_offset("T", 0) == want > 0
    assert s.max_offset("T", 0) == 40
    assert [m.queue_offset for m in s.iter_queue("T", 0, 0)] == list(range(want, 40))
    s.close()


# -- choosing a queue -------------------------------------------------------------------------

def test_sharding_key_picks_abs_java_hash_mod_queues(store: Store) -> None:
    store.create_topic("T", 8)
    store.create_topic("S", 5)
    keys = ["TopicTest#KEY1", "order-42", "ключ", "\U0001F600", "x" * 100]
    for k in keys:
        for topic, n in (("T", 8), ("S", 5)):
            want = abs(jhash(k)) % n
            assert store.put([draft(topic, "m", sharding_key=k)])[0].queue_id == want
            assert store.put_bodies(topic, [b"a", b"b"], sharding_keys=[k, k]).queue_ids == [want, want]
    assert abs(jhash("TopicTest#KEY1")) % 8 == 4   # the reference's vector: -1656969516
    # an empty key is no key: refused on an ordered topic like none
    store.create_topic("O", 4, order=True)
    with pytest.raises(UsageError, match="ordered"):
        store.put([draft("O", "m", sharding_key="")])
    with pytest.raises(UsageError, match="ordered"):
        store.put_bodies("O", [b"a"], sharding_keys=[""])


def test_round_robin_without_key_or_queue(store: Store) -> None:
    store.create_topic("T", 8)
    q = store.put_bodies("T", [b"x"] * 20).queue_ids
    assert q == [(q[0] + i) % 8 for i in range(20)]
    q2 = [r.queue_id for r in store.put([draft("T", "x")] * 10)]
    assert q2 == [(q[-1] + 1 + i) % 8 for i in range(10)]
    counts = [store.max_offset("T", i) for i in range(8)]
    assert max(counts) - min(counts) <= 1


def test_explicit_queue_and_out_of_range_queue(store: Store) -> None:
    store.create_topic("T", 4)
    assert store.put([draft("T", "x", queue_id=3)])[0].queue_id == 3
    assert store.put_bodies("T", [b"a"] * 3, queue_id=2).queue_ids == [2, 2, 2]
    end = store.commitlog.end()
    for call in (lambda: store.put([draft("T", "x", queue_id=4)]),
                 lambda: store.put_bodies("T", [b"a"], queue_id=4)):
        with pytest.raises(UsageError) as ei:
            call()
        assert ei.value.exit_code == 2
    assert store.commitlog.end() == end


def test_ordered_topic_requires_a_sharding_key_or_queue(store: Store) -> None:
    store.create_topic("O", 4, order=True)
    end = store.commitlog.end()
    with pytest.raises(UsageError, match="ordered"):
        store.put([draft("O", "x")])
    with pytest.raises(UsageError, match="ordered"):
        store.put_bodies("O", [b"x"])
    with pytest.raises(UsageError, match="ordered"):
        store.put_bodies("O", [b"x", b"y"], sharding_keys=["k", None])
    assert store.commitlog.end() == end
    assert store.put([draft("O", "x", sharding_key="k")])[0].queue_id == abs(jhash("k")) % 4
    assert store.put_bodies("O", [b"x"], queue_id=1).queue_ids == [1]


# -- refusals leave nothing behind -----------------------------------------------------------

def test_no_auto_create_refuses_unknown_topics_with_not_found(root: Path) -> None:
    s = open_store(root, auto_create_topics=False)
    before = files_under(root)
    for call in (lambda: s.put([draft("T", "x")]), lambda: s.put_bodies("T", [b"x"])):
        with pytest.raises(TopicNotFoundError) as ei:
            call()
        assert ei.value.exit_code == 3
    assert not s.has_topic("T") and s.commitlog.end() == 0
    s.create_topic("T", 2)
    assert len(s.put_bodies("T", [b"x"])) == 1
    assert set(files_under(root)) >= set(before)
    s.close()


def test_auto_create_uses_the_default_queue_count(root: Path) -> None:
    s = open_store(root, default_queues=3)
    s.put([draft("T", "x")])
    assert s.topic("T").queues == 3
    s.close()


def test_message_over_the_limit_is_refused_and_nothing_is_written(root: Path) -> None:
    s = open_store(root, max_message_size=1000)
    s.put([draft("T", "before")])
    before = files_under(root)
    cp = (root / "checkpoint").read_bytes()
    for call in (lambda: s.put([draft("T", "ok"), draft("T", b"x" * 1001)]),
                 lambda: s.put_bodies("T", [b"ok", b"x" * 1001]),
                 lambda: s.put([draft("NEW", b"x" * 1001)])):
        with pytest.raises(MessageTooLargeError) as ei:
            call()
        assert ei.value.exit_code == 5
    assert files_under(root) == before and (root / "checkpoint").read_bytes() == cp
    assert not s.has_topic("NEW")
    assert len(s.put_bodies("T", [b"x" * 1000])) == 1   # exactly the limit is fine
    s.close()


def test_a_second_handle_sees_the_first_handles_writes(root: Path) -> None:
    a = open_store(root)
    b = Store.open(root)
    a.put_bodies("T", [b"1", b"2"], queue_id=0)
    b.put_bodies("T", [b"3"], queue_id=0)
    a.put_bodies("T", [b"4"], queue_id=0)
    assert [m.body for m in b.iter_queue("T", 0, 0)] == [b"1", b"2", b"3", b"4"]
    assert [m.queue_offset for m in a.iter_queue("T", 0, 0)] == [0, 1, 2, 3]
    a.close(), b.close()
    assert os.path.exists(root / "lock")


@pytest.mark.parametrize("sizes", [[0, 1, 100], [3000, 5000, 70_000], [10, 2047, 2048, 2049]])
def test_fast_path_records_are_byte_identical_to_encode(store: Store, sizes: list[int]) -> None:
    """put_bodies builds records inline (and CRCs big ones by combining): every byte must be
    what record.encode() makes of the same fields (the batch's flags: atomicbatch.py)."""
    from store.log.atomicbatch import marks
    from store.log.record import encode, encode_properties
    bodies = [bytes([i % 256 for i in range(n)]) for n in sizes] * 2
    keys = ([None, "shard-a", None, "ключ", "k", None] * 2)[: len(bodies)]
    for props, skeys in (({}, None), ({"TAGS": "tg", "KEYS": "a b", "x": "y"}, None), ({"TAGS": "t"}, keys)):
        res = store.put_bodies("T", bodies, properties=props, sharding_keys=skeys)
        for i, (off, uk) in enumerate(zip(res.commitlog_offsets, res.uniq_keys)):
            m = store.get(off)
            raw = store.commitlog.read_bytes(off, m.size)
            assert m.body == bodies[i] and m.uniq_key == uk
            want_props = {"UNIQ_KEY": uk}
            if skeys is not None and skeys[i] is not None:
                want_props["__SHARDINGKEY"] = skeys[i]
            want_props.update(props)
            assert m.properties == want_props
            want = encode(b"T", bodies[i], encode_properties(want_props), m.queue_id, m.queue_offset, off,
                          m.store_timestamp, m.born_timestamp, int(m.born_host.split(":")[1]),
                          sysflag=marks(len(bodies))[i])
            assert raw == want
        assert res.uniq_keys == [store.get(o).uniq_key for o in res.commitlog_offsets]


def test_unique_key_counter_wraps_inside_a_batch(store: Store) -> None:
    for start in (65530, 65535, 0):
        store.uniq_keys.counter = start
        res = store.put_bodies("T", [b"m%d" % i for i in range(20)])
        uks = res.uniq_keys
        assert len(set(uks)) == 20
        assert [store.get(o).uniq_key for o in res.commitlog_offsets] == uks
        assert [int(u[-4:], 16) for u in uks] == [(start + 1 + i) & 0xFFFF for i in range(20)]
        assert store.uniq_keys.counter == (start + 20) & 0xFFFF
        for u, i in zip(uks, range(20)):
            assert store.find(u).body == b"m%d" % i


def test_pull_bodies_matches_pull_and_checks_every_record(root: Path) -> None:
    s = open_store(root, commitlog_segment_size=64 * 1024, max_message_size=8000)
    s.create_topic("T", 2)
    s.create_topic("U", 2)
    bodies = [bytes([i % 256]) * (i * 37 % 5000) for i in range(120)]
    s.put_bodies("T", bodies, queue_id=1)
    s.put_bodies("U", bodies[:5], queue_id=1)
    whole = [m.body for m in s.iter_queue("T", 1, 0)]
    got, off = [], 0
    while True:
        r = s.pull_bodies("T", 1, off, 16, max_bytes=20_000)
        assert r.damaged == [] and r.offsets == list(range(off, off + len(r.offsets)))
        got += r.bodies
        if r.next_offset == off:
            break
        off = r.next_offset
    assert got == whole == bodies
    # damage: a flipped byte in one body, a CQ entry pointing at another topic's record
    res = s.pull("T", 1, 7, 1).messages[0]
    seg = s.commitlog.segment_path(s.commitlog.segment_of(res.commitlog_offset))
    data = bytearray(seg.read_bytes())
    data[res.commitlog_offset - s.commitlog.segment_of(res.commitlog_offset) + 90] ^= 1
    seg.write_bytes(bytes(data))
    u0 = s.pull("U", 1, 0, 1).messages[0]
    cq = s.queue("T", 1).segment_path(0)
    raw = bytearray(cq.read_bytes())
    raw[9 * 20:9 * 20 + 20] = F.CQ_ENTRY.pack(u0.commitlog_offset, u0.size, 0)
    cq.write_bytes(bytes(raw))
    # a pull stops where its run leaves a segment (here: at the entry pointing at U's record)
    r_damaged, r_bodies, r_offsets, off = [], [], [], 0
    while off < 120:
        r = s.pull_bodies("T", 1, off, 256, max_bytes=1 << 30)
        r_damaged += r.damaged
        r_bodies += r.bodies
        r_offsets += r.offsets
        assert r.next_offset > off
        off = r.next_offset
    p_damaged, p_msgs, off = [], [], 0
    while off < 120:
        p = s.pull("T", 1, off, 256, max_bytes=1 << 30)
        p_damaged += p.damaged
        p_msgs += p.messages
        off = p.next_offset
    # the damaged record is skipped; the record of the bad entry is found in the log
    assert [q for q, _ in r_damaged] == [q for q, _ in p_damaged] == [7]
    assert r_bodies == [m.body for m in p_msgs] and bodies[9] in r_bodies
    assert r_offsets == [m.queue_offset for m in p_msgs] == [q for q in range(120) if q != 7]
    s.close()


def test_a_damaged_message_asked_for_is_a_corruption_error_only_when_strict(store: Store) -> None:
    from store.errors import CorruptionError
    res = store.put([draft("t", f"body {i}", properties={"KEYS": "k"}) for i in range(3)])
    victim = res[1]
    seg = store.commitlog.segment_path(store.commitlog.segment_of(victim.commitlog_offset))
    with open(seg, "r+b") as f:   # a byte of the second record's body
        f.seek(victim.commitlog_offset + F.RECORD_HEADER_SIZE + 2)
        b = f.read(1)
        f.seek(victim.commitlog_offset + F.RECORD_HEADER_SIZE + 2)
        f.write(bytes([b[0] ^ 0xFF]))
    for ident in (victim.msg_id, victim.uniq_key):
        with pytest.raises(CorruptionError, match="damaged message"):
            store.find(ident, strict=True)
        with pytest.raises(MessageNotFoundError):
            store.find(ident)
    damaged: list[CorruptionError] = []
    assert sorted(m.body for m in store.query_key("t", "k", damaged=damaged)) == [b"body 0", b"body 2"]
    assert [(d.path, d.offset) for d in damaged] == [(str(seg), victim.commitlog_offset - store.commitlog.segment_of(
        victim.commitlog_offset))] and "damaged message" in str(damaged[0])
    assert sorted(m.body for m in store.query_key("t", "k")) == [b"body 0", b"body 2"]
    with pytest.raises(CorruptionError, match="damaged message"):
        store.query_key("t", "k", strict=True)
    # an offset id between records is not a damaged record: not found, strict or not
    between = f"{F.LOOPBACK_IP:08X}{F.STORE_PORT:08X}{res[0].commitlog_offset + 3:016X}"
    with pytest.raises(MessageNotFoundError):
        store.find(between, strict=True)


# -- the offset table ---------------------------------------------------------------------------

def test_a_handles_offset_table_is_kept_and_sees_what_other_processes_change(store: Store) -> None:
    """``Store.offsets`` is one table per handle, kept between calls: a member's view of it
    (its journal records, the reset epochs) still follows what another process commits and
    resets, and a commit computed before that reset is refused as with a table made anew."""
    from tests.procs import finish, python
    table = store.offsets
    assert store.offsets is table
    table.commit("g", {("T", 0): 3}, journal_only=True)
    before = table.snapshot("g").epochs
    finish(python("""
        import sys
        from store.log.messagestore import Store
        with Store.open(sys.argv[1]) as s:
            s.offsets.commit("g", {("T", 1): 5}, journal_only=True)
            s.offsets.reset("g", "T", {0: 1})
    """, store.root))
    assert table.read_group("g") == {("T", 0): 1, ("T", 1): 5}
    assert table.commit("g", {("T", 0): 9}, journal_only=True, expected_epochs=before) == {"T"}
    assert table.commit("g", {("T", 0): 2}, journal_only=True, expected_epochs=table.snapshot("g").epochs) == set()
    assert table.read("g", "T", 0) == 2
