"""Each format rule has one definition in store/log/format.py (or its owner), and every user
agrees with it: the largest record, the CRC mask, segment names, the header views, the
property separators and reserved names, the index keys, the queue limit."""
from __future__ import annotations

import fnmatch

import pytest

from store.log import format as F
from store.log import settings
from store.log.record import RecordError, decode, encode, record_size_at


def test_the_largest_record_is_built_from_its_fields() -> None:
    assert F.MAX_RECORD_SIZE == 91 + 4 * 1024 * 1024 + 255 + 32767
    # a segment holds the largest record and its end trailer
    assert settings.SEGMENT_SPARE >= F.MAX_RECORD_SIZE - F.MAX_MESSAGE_SIZE + F.END_FILE_MIN_BLANK


def _largest_record() -> bytes:
    props = b"P\x01" + b"v" * (F.MAX_PROPERTIES_SIZE - F.CRC_PROPERTY_SIZE - 3) + b"\x02"
    return encode(b"t" * 127, bytes(F.MAX_MESSAGE_SIZE), props, queue_id=0, queue_offset=0,
                  physical_offset=0, store_timestamp=1, born_timestamp=1, born_port=1)


def test_the_largest_writable_record_is_read_and_one_byte_more_is_impossible() -> None:
    rec = _largest_record()
    assert record_size_at(rec, 0, len(rec)) == len(rec) <= F.MAX_RECORD_SIZE
    assert decode(rec, 0, len(rec)).body == bytes(F.MAX_MESSAGE_SIZE)
    # a TOTALSIZE no writer can make is damage, not a record to read 4 MiB further for
    head = (F.MAX_RECORD_SIZE + 1).to_bytes(4, "big") + F.MAGIC_V1.to_bytes(4, "big")
    buf = head + bytes(F.MAX_RECORD_SIZE)
    with pytest.raises(RecordError, match="impossible record size"):
        record_size_at(buf, 0, len(buf))


def _store_sources() -> list[tuple[str, str]]:
    import pathlib
    root = pathlib.Path(F.__file__).parents[1]
    return [(str(p.relative_to(root.parent)), p.read_text()) for p in sorted(root.rglob("*.py"))]


def test_the_crc_mask_is_written_once() -> None:
    from store.log.record import crc32
    assert F.CRC_MASK == 0x7FFFFFFF
    assert F.crc(b"Hello RocketMQ") == crc32(b"Hello RocketMQ") & F.CRC_MASK
    # the literal outside format.py only where it is a Java int's maximum, not a CRC's mask
    not_a_crc = ("getpid()", "derived_at", "// 1000")
    found = [(path, line.strip()) for path, text in _store_sources() if not path.endswith("log/format.py")
             for line in text.splitlines() if "0x7FFFFFFF" in line.upper().replace("0X", "0x")
             and not any(n in line for n in not_a_crc)]
    assert found == []


def test_the_queue_limit_is_one_number_for_the_store_and_the_command_line(tmp_path) -> None:
    import typer.main

    import store
    from mqctl.commands.bench import bench_app
    from mqctl.commands.topic import topic_app
    from store.errors import UsageError
    from store.log.settings import StoreSettings
    from store.log.topics import TopicConfig

    assert store.MAX_QUEUES == F.MAX_QUEUES == 1024
    limits = []
    for app in (topic_app, bench_app):
        group = typer.main.get_command(app)
        for cmd in group.commands.values():   # type: ignore[attr-defined]
            for p in cmd.params:
                if p.name == "queues":
                    limits.append((cmd.name, p.type.max))
    assert len(limits) == 4 and {m for _, m in limits} == {F.MAX_QUEUES}, limits
    with store.Store.open(tmp_path / "s", create=True) as s:
        s.create_topic("wide", queues=F.MAX_QUEUES)
        with pytest.raises(UsageError, match=f"between 1 and {F.MAX_QUEUES}"):
            s.create_topic("wider", queues=F.MAX_QUEUES + 1)
    with pytest.raises(UsageError):
        StoreSettings(default_queues=F.MAX_QUEUES + 1).validate()
    with pytest.raises(ValueError):
        TopicConfig.from_json({"topicName": "t", "writeQueueNums": F.MAX_QUEUES + 1})


@pytest.mark.parametrize("name, ok", [
    ("00000000000000000000", True), ("00000000000067108864", True),
    ("0000000000000000000", False), ("000000000000000000000", False),   # 19, 21 digits
    ("0000000000000000000a", False), ("٠" * 20, False),                  # not ASCII digits
    (".00000000000000000000.123.tmp", False), ("00000000000000000000.bak", False), ("", False),
])
def test_is_segment_name(name: str, ok: bool) -> None:
    assert F.is_segment_name(name) is ok


def test_segment_names_are_made_and_recognised_by_one_rule(tmp_path) -> None:
    from store.fsutil import segment_bases
    from store.layout import segment_file, segment_file_s
    for base in (0, 4096, 67108864, 10**19):
        assert F.is_segment_name(F.segment_name(base)) and int(F.segment_name(base)) == base
        assert segment_file(tmp_path, base) == tmp_path / F.segment_name(base)
        assert segment_file_s(str(tmp_path), base) == str(tmp_path / F.segment_name(base))
        segment_file(tmp_path, base).touch()
    for other in ("٠" * 20, "0" * 19, ".%s.1.tmp" % F.segment_name(0)):
        (tmp_path / other).touch()
    assert segment_bases(tmp_path) == [0, 4096, 67108864, 10**19]
    # no segment name spelt out again
    assert [p for p, text in _store_sources() if ":020d" in text] == ["store/log/format.py"]


# The record header as the spec (format.py's docstring, shared/reference/rocketmq.md) lays it out.
SPEC_FIELDS = {"TOTALSIZE": 0, "MAGICCODE": 4, "BODYCRC": 8, "QUEUEID": 12, "FLAG": 16, "QUEUEOFFSET": 20,
               "PHYSICALOFFSET": 28, "SYSFLAG": 36, "BORNTIMESTAMP": 40, "BORNHOST": 48, "BORNPORT": 52,
               "STORETIMESTAMP": 56, "STOREHOST": 64, "STOREPORT": 68, "RECONSUMETIMES": 72,
               "PREPAREDTXOFFSET": 76, "BODYLENGTH": 84}


def test_the_record_field_table_is_the_documented_layout() -> None:
    assert F.RECORD_FIELD_OFFSET == SPEC_FIELDS
    assert F.RECORD_HEADER.format == ">iIIiiqqiqIiqIiiqi" and F.RECORD_HEADER_SIZE == 88
    assert (F.OFF_MAGIC, F.OFF_QUEUE_OFFSET, F.OFF_PHYSICAL_OFFSET, F.OFF_SYSFLAG, F.OFF_STORE_TIMESTAMP) == (
        4, 20, 28, 36, 56)


def _numbered_header() -> tuple[bytes, dict[str, int]]:
    """A header whose every field holds a value of its own (its offset + 1)."""
    values = {name: off + 1 for name, off in F.RECORD_FIELD_OFFSET.items()}
    return F.RECORD_HEADER.pack(*values.values()), values


def _unpacked_fields(fmt: str, start: int) -> list[int]:
    """The header offsets of the fields a struct format reads (its ``x`` skipped), from ``start``."""
    import re
    import struct
    offsets, pos = [], start
    for count, code in re.findall(r"(\d*)([a-zA-Z])", fmt):
        size = struct.calcsize(">" + (count or "") + code)
        if code != "x":
            offsets.append(pos)
        pos += size
    return offsets


def test_every_view_of_the_record_header_reads_the_fields_at_their_offsets() -> None:
    from store.log import columns, entrysearch, framing
    head, values = _numbered_header()
    by_offset = {off: name for name, off in F.RECORD_FIELD_OFFSET.items()}
    views = {"columns._HEAD": (columns._HEAD, 0), "columns._CHECK": (columns._CHECK, 0),
             "columns._TIMES": (columns._TIMES, 0), "entrysearch._HEAD": (entrysearch._HEAD.unpack_from, 0),
             "framing._HEAD_CONST": (framing._HEAD_CONST.unpack_from, F.OFF_SYSFLAG)}
    for what, (unpack, start) in views.items():
        fmt = unpack.__self__.format
        got = unpack(head, start)
        want = [values[by_offset[off]] for off in _unpacked_fields(fmt, start)]
        assert list(got) == want, what
        assert all(off in by_offset for off in _unpacked_fields(fmt, start)), what
    # the producer's pack: the fields that vary, the 48 constant bytes, BODYLENGTH
    const = framing._HEAD_CONST.pack(*(values[n] for n in list(SPEC_FIELDS)[7:16]))
    assert framing._HEAD_PACK(*(values[n] for n in list(SPEC_FIELDS)[:7]), const, values["BODYLENGTH"]) == head


def test_header_view_builds_the_fast_paths_struct_strings() -> None:
    assert F.header_view("TOTALSIZE..SYSFLAG").format == ">iIIiiqqi"
    assert F.header_view("BORNTIMESTAMP STORETIMESTAMP RECONSUMETIMES").format == ">40xq8xq8xi"
    assert F.header_view("TOTALSIZE..PHYSICALOFFSET BODYLENGTH", raw="SYSFLAG..PREPAREDTXOFFSET").format == (
        ">iIIiiqq48si")
    assert F.header_view("SYSFLAG..PREPAREDTXOFFSET", first="SYSFLAG").format == ">iqIiqIiiq"


def _sources(*tops: str) -> list[tuple[str, str]]:
    import pathlib
    root = pathlib.Path(F.__file__).parents[2]
    return [(str(p.relative_to(root)), p.read_text()) for top in tops for p in sorted((root / top).rglob("*.py"))]


def test_the_property_separators_and_reserved_names_are_written_once() -> None:
    from store.client.propnames import Prop
    from store.log import record
    assert (F.NAME_VALUE_SEP, F.PROPERTY_SEP) == ("\x01", "\x02")
    assert (F.NAME_VALUE_SEP_B, F.PROPERTY_SEP_B) == (b"\x01", b"\x02")
    props = {record.PROP_UNIQ_KEY: "U", record.PROP_SHARDING_KEY: "s", "a": "b"}
    assert record.encode_properties(props) == b"UNIQ_KEY\x01U\x02__SHARDINGKEY\x01s\x02a\x01b\x02"
    assert record.parse_properties(record.encode_properties(props).decode()) == props
    assert (Prop.UNIQ_KEY, Prop.SHARDING_KEY) == (record.PROP_UNIQ_KEY, record.PROP_SHARDING_KEY)
    # the separators as literals (not in messages) only in format.py; the names only in record.py
    seps = [(p, line.strip()) for p, text in _sources("store", "mqctl") for line in text.splitlines()
            if ("\\x01" in line or "\\x02" in line) and "control characters" not in line and "\\\\x0" not in line
            and p != "store/log/format.py"]
    assert seps == []
    names = [(p, line.strip()) for p, text in _sources("store", "mqctl") for line in text.splitlines()
             if ('"__SHARDINGKEY"' in line or '"UNIQ_KEY' in line) and p != "store/log/record.py"]
    assert names == []


def test_the_index_keys_are_made_by_one_rule(tmp_path) -> None:
    import store
    assert F.uniq_key_of("0A1B") == "#0A1B" and F.key_of("orders", "k-1") == "orders#k-1"
    # both write paths (a batch of bodies: framing; drafts: writebatch) index by that rule
    with store.Store.open(tmp_path / "s", create=True) as s:
        s.create_topic("orders", queues=2)
        with store.Producer.of(s) as p:
            a = p.send("orders", b"a", keys=["k-1"])
            p.send_bodies("orders", [b"b", b"c"], properties=store.build_properties(keys=["k-2"]))
        assert [m.body for m in s.query_key("orders", "k-1")] == [b"a"]
        assert sorted(m.body for m in s.query_key("orders", "k-2")) == [b"b", b"c"]
        assert [m.body for m in s.find_all(a.msg_id)] == [b"a"]
    code = [(p, line.split("   #")[0].strip()) for p, text in _sources("store/log") for line in text.splitlines()
            if p != "store/log/format.py"]
    spelt = [(p, c) for p, c in code if any(t in c for t in ('"#" +', '+ "#"', 'b"#"', '}#{'))
             and not c.startswith(("#", '"""', "``", "CRC"))]
    assert spelt == []


def test_the_smaller_rules_are_derived_once() -> None:
    import pathlib
    import re

    from store import names
    from store.log import columns, consumequeue, framing, offsets, positions, schedule
    from store.log.engine import SYSTEM_TOPIC_QUEUES
    # the schedule topic: one queue per delay level, and the free delays' queue after them
    assert SYSTEM_TOPIC_QUEUES[names.SCHEDULE_TOPIC] == len(schedule.level_delays_ms()) + 1 == F.SCHEDULE_QUEUES
    assert schedule.FREE_QUEUE == F.FREE_QUEUE == F.SCHEDULE_QUEUES - 1 == 18
    # the C loops' interface: one number in Python, the C source's own
    c_source = (pathlib.Path(columns.__file__).parent / "nativecheck.c").read_text()
    assert re.search(r"#define INTERFACE (\d+)", c_source)[1] == str(F.NATIVE_INTERFACE)  # type: ignore[index]
    assert re.search(r"#define VIEW_MIN_SIZE (\d+)", c_source)[1] == str(columns._VIEW_MIN_SIZE)  # type: ignore[index]
    if columns.NATIVE:   # a build of this source: every user takes its loops
        assert framing._frame_native is not None and consumequeue.take_entries is not consumequeue.cut_entries
    # topic@group: the offsets table's one separator
    assert positions._HALF_KEY == offsets.table_key(names.HALF_TOPIC, positions.TX_GROUP)
    assert positions._HALF_KEY.split(offsets.TOPIC_GROUP_SEPARATOR) == [names.HALF_TOPIC, positions.TX_GROUP]
    sources = [(p, c) for p, c in _sources("store/log") if p != "store/log/format.py"]
    assert [p for p, c in sources if "INTERFACE == 3" in c or "FREE_QUEUE = 18" in c or "}@{TX_GROUP}" in c] == []


def test_temp_files_are_named_and_recognised_by_one_rule(tmp_path) -> None:
    import os

    from store import fsutil
    from store.log.index import KeyIndex
    from store.log.offsetjournal import Journal
    def _temp(name: str) -> bool:
        return fnmatch.fnmatch(name, fsutil.TEMP_GLOB)
    target = tmp_path / "consumerOffset.json"
    assert fsutil.temp_path(target) == tmp_path / f".consumerOffset.json.{os.getpid()}.tmp"
    assert _temp(fsutil.temp_path(target).name)
    assert _temp(fsutil.temp_path(fsutil.temp_path(target)).name)
    for name in ("consumerOffset.json", "consumerOffset.json.bak", ".beats", "x.tmp", ".x.json"):
        assert not _temp(name)
    # a writer's temp file left by a kill: the index's sweep takes exactly those
    index_dir = tmp_path / "index"
    index_dir.mkdir()
    (index_dir / F.segment_name(0)).write_bytes(b"")
    fsutil.temp_path(index_dir / F.segment_name(4096)).write_bytes(b"half")
    KeyIndex(index_dir).remove_leftovers()
    assert sorted(os.listdir(index_dir)) == [F.segment_name(0)]
    # the offsets journal's rewrite is atomic_write_bytes: the file replaced, no temp left
    j = Journal(tmp_path / "consumerOffset.log")
    j.rewrite({"t@g": {"0": 5}}, 0)
    assert [n for n in os.listdir(tmp_path) if _temp(n)] == []
    spelt = [p for p, text in _sources("store") if ".{os.getpid()}.tmp" in text or '".*.tmp"' in text]
    assert spelt == ["store/fsutil.py"]


def test_queue_dirs_is_the_one_walk_over_the_queues(tmp_path) -> None:
    import store
    from store.layout import Layout
    from store.log.consumequeue import queue_dirs, queue_ids, sync_changed_queues
    root = tmp_path / "s"
    with store.Store.open(root, create=True) as s:
        s.create_topic("b", queues=2)
        s.create_topic("a", queues=11)
        s.put([store.Draft(topic="b", body=b"x", queue_id=1)])
    lay = Layout(root)
    (lay.consumequeue_dir / "notes.txt").write_text("not a topic")
    (lay.topic_cq_dir("a") / "٣").mkdir()          # not ASCII digits: no queue
    (lay.topic_cq_dir("a") / "backup").mkdir()
    (lay.topic_cq_dir("a") / "007").mkdir()        # not a queue's name (queue 7's is "7")
    assert queue_dirs(lay) == [("a", q) for q in range(11)] + [("b", 0), ("b", 1)]
    assert queue_ids(lay, "a") == list(range(11)) and queue_ids(lay, "nothing") == []
    assert queue_dirs(Layout(tmp_path / "none")) == []
    sync_changed_queues(lay, 0)   # the derived flush walks them (a file among the topics is no topic)
    walks = [p for p, text in _sources("store/log")
             if "os.listdir(root / topic)" in text or "_subdirs(" in text or "if q.isdigit()" in text
             or "qname.isdigit()" in text or "x.isdigit())" in text]
    assert walks == []


def test_every_store_path_is_built_by_layout(tmp_path) -> None:
    import re

    from store.layout import Layout, rebuild_marker
    from store.spark.staging import STAGING_DIR
    lay, r = Layout(tmp_path), tmp_path
    assert lay.member_lock("g", "c@1") == r / "consumers/g/c@1.lock"
    assert lay.member_json("g", "c@1") == r / "consumers/g/c@1.json"
    assert lay.group_mutex("g") == r / "locks/g/.mutex.lock"
    assert lay.topic_locks_dir("g", "t") == r / "locks/g/t" == lay.queue_lock("g", "t", 3).parent
    assert lay.tx_progress("CID_RMQ_SYS_TRANS") == r / "tx/CID_RMQ_SYS_TRANS.json"
    assert lay.topics_json_migrated == r / "config/topics.json.migrated"
    assert lay.dlq_resend_json == r / "config/dlqResend.json"
    assert lay.spark_staging == r / "spark-staging" == r / STAGING_DIR
    assert lay.spark_sink("s1") == r / "spark-sinks" / "s1.json"
    assert lay.broadcast_client_dir("c") == lay.broadcast_offsets("c", "g").parent.parent
    assert lay.queue_dir_names("t", 3) == [str(lay.queue_dir("t", q)) for q in range(3)]
    assert rebuild_marker(lay.index_dir) == r / "index" / F.INDEX_REBUILD_MARKER
    # no name joined onto a store directory outside layout.py (the walks join what they list;
    # not store paths: the JVM reader's jar and the shipped zip live in the user's cache, and a
    # Spark write names the part files inside its own job directory)
    elsewhere = ("store/layout.py", "store/log/format.py", "store/spark/jvm.py", "store/spark/ship.py")
    built = [(p, line.strip()) for p, text in _sources("store") if p not in elsewhere
             for line in text.splitlines() if "/ f\"part-" not in line and (re.search(r'(_dir\(\w*\)|_dir|_root|layout\.\w+\(.*\)) / f?"', line)
             or re.search(r'f"\{[^}]*(_dir|_root|\.dir)[^}]*\}/', line) or ":020d" in line)]
    assert built == []


def test_a_message_id_has_one_length() -> None:
    import time

    from store.log import record
    uniq = record.UniqKeyGenerator().next(int(time.time() * 1000))
    assert F.MSG_ID_LEN == 32 == len(record.offset_msg_id(4096)) == len(uniq)
    assert record.is_msg_id(uniq) and not record.is_msg_id(uniq + "0")
    assert record.UNIQ_KEY_PROPERTY_SIZE == len(record.encode_properties({record.PROP_UNIQ_KEY: uniq}))
