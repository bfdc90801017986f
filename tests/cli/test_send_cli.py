"""``mqctl send`` end to end: real processes, checked against the store's files."""
from __future__ import annotations

import base64
import json
import os
import resource
from pathlib import Path

import pytest

from store.log import format as F
from store.log.messagestore import Store
from tests.log.storetestutil import jhash
from tests.procs import MQ, mqctl, one_error


def messages(root: Path, topic: str) -> list:
    """Every stored message of ``topic`` in log order (through the consume queues)."""
    s = Store.open(root)
    try:
        out = [m for q in s.queue_ids(topic) for m in s.iter_queue(topic, q, 0)]
    finally:
        s.close()
    return sorted(out, key=lambda m: m.commitlog_offset)


def init(root: Path, **settings) -> None:
    """Create the store in-process (saves a process start; the CLI's init is tested elsewhere)."""
    from store.log.settings import StoreSettings
    Store.open(root, create=True, settings=StoreSettings(**settings)).close()


def create_topic(root: Path, name: str, queues: int, order: bool = False) -> None:
    s = Store.open(root, create=True)
    s.create_topic(name, queues, order)
    s.close()


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file() and p.name != "lock"}


# -- one message --------------------------------------------------------------------------------

def test_send_one_body_prints_the_send_result(root: Path) -> None:
    p = mqctl(root, "send", "T", "hello world", "--tag", "TA", "--keys", "k1,k2", "-p", "color=red", "--json", check=True)
    [r] = p.json_lines()
    assert set(r) >= {"status", "msgId", "topic", "queueId", "queueOffset", "commitLogOffset"}
    assert (r["status"], r["topic"], r["queueOffset"]) == ("SEND_OK", "T", 0)
    [m] = messages(root, "T")
    assert (m.body, m.queue_id, m.commitlog_offset, m.uniq_key) == (b"hello world", r["queueId"], r["commitLogOffset"], r["msgId"])
    assert (m.tags, m.keys, m.user_properties) == ("TA", ["k1", "k2"], {"color": "red"})
    # the id printed finds it
    shown = mqctl(root, "msg", "show", r["msgId"], "--json", check=True)
    assert json.loads(shown.stdout)["body"] == "hello world"


def test_send_without_json_summarises_on_stderr_only(root: Path) -> None:
    p = mqctl(root, "send", "T", "x", check=True)
    assert p.stdout == b""
    assert p.stderr.splitlines()[-1].startswith("sent 1 message to T")
    assert "mqctl: created topic T (8 queues)" in p.stderr.splitlines()   # the first send made it


# -- stdin ------------------------------------------------------------------------------------

def test_stdin_lines_one_message_each_in_order(root: Path) -> None:
    lines = [f"line {i}" for i in range(2000)]
    p = mqctl(root, "send", "T", "--queue", "2", "--json", input=("\n".join(lines) + "\n").encode(), check=True)
    rs = p.json_lines()
    assert [r["queueOffset"] for r in rs] == list(range(2000)) and {r["queueId"] for r in rs} == {2}
    assert [m.body.decode() for m in messages(root, "T")] == lines


def test_stdin_last_line_without_newline_and_empty_lines(root: Path) -> None:
    mqctl(root, "send", "T", "-", input=b"a\n\nb\nc", check=True)
    assert [m.body for m in messages(root, "T")] == [b"a", b"b", b"c"]


def test_stdin_dash_reads_stdin(root: Path) -> None:
    mqctl(root, "send", "T", "-", input=b"x\ny\n", check=True)
    assert len(messages(root, "T")) == 2


@pytest.mark.parametrize("delim,data,want", [
    (",", b"a,b,,c", [b"a", b"b", b"c"]),
    ("\\0", b"one\ntwo\x00three\x00", [b"one\ntwo", b"three"]),
    ("--", b"x--y--z", [b"x", b"y", b"z"]),
])
def test_delimiter(root: Path, delim: str, data: bytes, want: list[bytes]) -> None:
    mqctl(root, "send", "T", "--delimiter", delim, input=data, check=True)
    assert [m.body for m in messages(root, "T")] == want


def test_empty_delimiter_is_a_usage_error(root: Path) -> None:
    assert mqctl(root, "send", "T", "--delimiter", "", input=b"x").returncode == 2


def test_key_delimiter_same_key_same_queue(root: Path) -> None:
    create_topic(root, "T", 8)
    lines = [f"user-{i % 5}:event {i}" for i in range(100)] + ["no key here"]
    p = mqctl(root, "send", "T", "--key-delimiter", ":", "--json", input="\n".join(lines).encode(), check=True)
    rs = p.json_lines()
    assert len(rs) == 101
    for i, r in enumerate(rs[:100]):
        assert r["queueId"] == abs(jhash(f"user-{i % 5}")) % 8
    ms = messages(root, "T")
    assert sorted(m.body.decode() for m in ms) == sorted([f"event {i}" for i in range(100)] + ["no key here"])
    by_queue: dict[int, set[str]] = {}
    for m in ms:
        if m.body != b"no key here":
            by_queue.setdefault(m.queue_id, set()).add(m.properties["__SHARDINGKEY"])
    for q, keys in by_queue.items():
        assert all(abs(jhash(k)) % 8 == q for k in keys)


def test_input_json_fields(root: Path) -> None:
    create_topic(root, "T", 4)
    lines = [
        {"body": "plain", "tags": "TA", "keys": "k1"},
        {"body": "listed", "keys": ["k2", "k3"]},
        {"body": base64.b64encode(b"\x00\x01\xff\xfe").decode(), "bodyEncoding": "base64"},
        {"body": "sharded", "shardingKey": "user-7"},
        {"body": "queued", "queueId": 3},
        {"body": "props", "properties": {"color": "red", "n": "1"}},
        {"body": "ünïcode ✓"},
    ]
    p = mqctl(root, "send", "T", "--input", "json", "--json",
              input="".join(json.dumps(o) + "\n" for o in lines).encode(), check=True)
    rs = p.json_lines()
    assert len(rs) == 7
    s = Store.open(root)
    got = [s.find(r["msgId"]) for r in rs]
    s.close()
    assert [m.body for m in got] == [b"plain", b"listed", b"\x00\x01\xff\xfe", b"sharded", b"queued",
                                     b"props", "ünïcode ✓".encode()]
    assert got[0].tags == "TA" and got[0].keys == ["k1"]
    assert got[1].keys == ["k2", "k3"]
    assert got[3].queue_id == abs(jhash("user-7")) % 4 == rs[3]["queueId"]
    assert got[4].queue_id == 3
    assert got[5].user_properties == {"color": "red", "n": "1"}
    # the envelope consume --json writes is what send --input json reads: a copy round-trips
    c = mqctl(root, "consume", "T", "-g", "copier", "--from", "first", "-e", "--json", check=True)
    mqctl(root, "send", "COPY", "--input", "json", input=c.stdout, check=True)
    assert sorted(m.body for m in messages(root, "COPY")) == sorted(m.body for m in got)


def test_malformed_json_line_stops_there_after_sending_the_lines_before(root: Path) -> None:
    good = [json.dumps({"body": f"m{i}"}) for i in range(3)]
    data = "\n".join(good + ['{"body": "broken"', json.dumps({"body": "after"})]) + "\n"
    p = mqctl(root, "send", "T", "--input", "json", "--json", input=data.encode())
    err = one_error(p, 5, allow_info=True)
    assert [r["status"] for r in p.json_lines()] == ["SEND_OK"] * 3
    assert "line 4" in err
    assert [m.body for m in messages(root, "T")] == [b"m0", b"m1", b"m2"]


@pytest.mark.parametrize("bad", ['"just a string"', '{"nobody": 1}', '{"body": 5}',
                                 '{"body": "x", "bodyEncoding": "base64"}',
                                 '{"body": "x", "properties": {"TAGS": "reserved"}}',
                                 '{"body": "x", "queueId": -1}', '{"body": "x", "keys": 5}'])
def test_invalid_json_records_are_data_errors_naming_the_line(root: Path, bad: str) -> None:
    p = mqctl(root, "send", "T", "--input", "json", "--json", input=f'{{"body": "ok"}}\n{bad}\n'.encode())
    assert "line 2" in one_error(p, 5, allow_info=True)
    assert len(p.json_lines()) == 1 and [m.body for m in messages(root, "T")] == [b"ok"]


def test_json_queue_id_out_of_range_names_the_line_and_keeps_earlier_lines(root: Path) -> None:
    create_topic(root, "T", 2)
    p = mqctl(root, "send", "T", "--input", "json", "--json",
              input=b'{"body": "a"}\n{"body": "b", "queueId": 1}\n{"body": "c", "queueId": 2}\n{"body": "d"}\n')
    err = one_error(p, 5, allow_info=True)
    assert "line 3" in err and "queue 2" in err
    assert len(p.json_lines()) == 2 and [m.body for m in messages(root, "T")] == [b"a", b"b"]


@pytest.mark.parametrize("mode", ["raw", "json", "keyed"])
def test_oversized_message_in_a_batch_stops_there(root: Path, mode: str) -> None:
    init(root, max_message_size=100)
    bodies = [b"small-%d" % i for i in range(5)] + [b"x" * 101] + [b"never"]
    if mode == "json":
        data = b"".join(json.dumps({"body": b.decode()}).encode() + b"\n" for b in bodies)
        args = ["--input", "json"]
    elif mode == "keyed":
        data = b"".join(b"k:" + b + b"\n" for b in bodies)
        args = ["--key-delimiter", ":"]
    else:
        data = b"".join(b + b"\n" for b in bodies)
        args = []
    p = mqctl(root, "send", "T", "--json", *args, input=data)
    err = one_error(p, 5, allow_info=True)
    assert "line 6" in err and "100" in err
    assert len(p.json_lines()) == 5
    assert [m.body for m in messages(root, "T")] == bodies[:5]


@pytest.mark.parametrize("mode", ["raw", "json", "keyed"])
def test_a_line_of_many_megabytes_is_refused_without_being_held(root: Path, mode: str) -> None:
    """A line longer than any message the store takes (a file with no newlines, say) is counted
    to its end, not read into memory: its size is named exactly, and memory stays flat."""
    import subprocess
    import sys
    import threading

    from tests.procs import MQCTL, mqctl_env
    init(root, max_message_size=100)
    huge = 150 << 20
    head = {"raw": b"a\nb\n", "json": b'{"body": "a"}\n{"body": "b"}\n', "keyed": b"k:a\nk:b\n"}[mode]
    args = {"raw": [], "json": ["--input", "json"], "keyed": ["--key-delimiter", ":"]}[mode]
    # Started by a small process that reports its children's peak RSS: a process started by
    # this one (vfork, exec) has its peak RSS begin at this test process's own, which a long
    # run of the suite makes bigger than any limit here.
    peak = root.parent / "peak_rss"
    launch = ("import os, resource, subprocess, sys; p = subprocess.Popen(sys.argv[2:]); os.close(0); "
              "code = p.wait(); "
              "open(sys.argv[1], 'w').write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)); "
              "sys.exit(code)")
    p = subprocess.Popen([sys.executable, "-c", launch, str(peak), *MQCTL, "send", "T", "--json", *args],
                         env=mqctl_env(root), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdin is not None and p.stdout is not None and p.stderr is not None

    def feed(stdin=p.stdin) -> None:
        block = b"x" * (1 << 20)
        try:
            stdin.write(head)
            for _ in range(huge >> 20):
                stdin.write(block)
            stdin.write(b"\nnever\n")
        except BrokenPipeError:
            pass
        finally:
            try:
                stdin.close()
            except BrokenPipeError:
                pass

    t = threading.Thread(target=feed)
    t.start()
    out, err = p.stdout.read(), p.stderr.read().decode()
    p.wait()
    t.join()
    assert p.returncode == 5, err
    lines = [x for x in err.splitlines() if x.startswith("mqctl: error:")]
    assert len(lines) == 1 and "line 3" in lines[0] and f"{huge} bytes" in lines[0], err
    assert "2 messages sent before it" in lines[0], err
    assert len(out.splitlines()) == 2 and [m.body for m in messages(root, "T")] == [b"a", b"b"]
    peak_kib = int(peak.read_text())
    assert peak_kib < 120 * 1024, f"peak RSS {peak_kib} KiB for a {huge >> 20} MiB line"


def test_oversized_single_body_is_refused_and_nothing_is_written(root: Path) -> None:
    init(root, max_message_size=100)
    before = tree(root)
    p = mqctl(root, "send", "T", "y" * 101)
    one_error(p, 5, allow_info=True)
    assert tree(root) == before


@pytest.mark.parametrize("how", ["keys", "one-key-batch", "property", "sharding-key", "api-send", "api-many"])
def test_properties_over_rocketmq_s_limit_are_refused_and_nothing_is_written(root: Path, how: str) -> None:
    """A record's properties field is a signed 16-bit length in RocketMQ's format: 40 KB of
    keys used to be stored (unreadable by a Java reader) and 70 KB crashed with OverflowError."""
    create_topic(root, "T", 4)
    logs = ("commitlog", "consumequeue", "index")
    before = {k: v for k, v in tree(root).items() if k.startswith(logs)}
    big = "k" * 40_000
    if how.startswith("api"):
        import store
        with store.Producer(root) as producer, pytest.raises(store.MessageTooLargeError, match="32767"):
            if how == "api-send":
                producer.send("T", b"x", properties={"a": "v" * 70_000})
            else:
                producer.send_many("T", [b"x", b"y"], properties={"a": "v" * 70_000})
    else:
        args = {"keys": ["--keys", big, "body"], "one-key-batch": ["--keys", big],
                "property": ["--property", f"a={big}", "body"], "sharding-key": ["--sharding-key", big, "body"]}[how]
        p = mqctl(root, "send", "T", *args, input=b"a\nb\n" if how == "one-key-batch" else None)
        assert "32767" in one_error(p, 5, allow_info=True)
    assert messages(root, "T") == []
    assert {k: v for k, v in tree(root).items() if k.startswith(logs)} == before


def test_a_big_batch_over_many_store_batches(root: Path) -> None:
    n = 50_000
    data = b"".join(b"%07d\n" % i for i in range(n))
    p = mqctl(root, "send", "T", "--json", input=data, check=True)
    rs = p.json_lines()
    assert len(rs) == n and len({r["commitLogOffset"] for r in rs}) == n
    ms = messages(root, "T")
    assert [m.body for m in ms] == [b"%07d" % i for i in range(n)]
    mqctl(root, "store", "check", check=True)


# -- names, queues, flush -------------------------------------------------------------------------

BAD_TOPICS = ["bad name", "a/b", "..", "x" * 128, "%RETRY%g", "%DLQ%g", "RMQ_SYS_X", "SCHEDULE_TOPIC_XXXX",
              "tópico", ""]


@pytest.mark.parametrize("topic", BAD_TOPICS)
def test_bad_or_reserved_topic_creates_no_store(tmp_path: Path, topic: str) -> None:
    root = tmp_path / "store"
    p = mqctl(root, "send", topic, "x")
    one_error(p, 2, allow_info=True)
    assert not root.exists(), "no store directory may be created for a refused send"
    assert list(tmp_path.iterdir()) == []


def test_bad_or_reserved_topic_changes_nothing_in_a_store(root: Path) -> None:
    init(root)
    before = tree(root)
    for topic in ("a/b", "%DLQ%g"):
        assert mqctl(root, "send", topic, "x").returncode == 2
        assert mqctl(root, "topic", "create", topic).returncode == 2
    assert tree(root) == before
    assert sorted(os.listdir(root / "consumequeue")) == []


def test_queue_out_of_range_is_a_usage_error(root: Path) -> None:
    create_topic(root, "T", 4)
    mqctl(root, "send", "T", "x", "--queue", "3", check=True)
    before = tree(root)
    for args in (["T", "y", "--queue", "4"], ["T", "--queue", "9"], ["T", "y", "--queue", "-1"]):
        p = mqctl(root, "send", *args, input=b"a\nb\n")
        assert p.returncode == 2, (args, p.stderr)
    assert tree(root) == before


def test_queue_out_of_range_on_a_new_topic_does_not_create_it(root: Path) -> None:
    init(root)
    p = mqctl(root, "send", "NEW", "x", "--queue", "8")     # the default is 8 queues: 0-7
    assert p.returncode == 2
    assert mqctl(root, "topic", "list", "--json", check=True).stdout == b""


def test_ordered_topic_requires_a_key_or_queue(root: Path) -> None:
    create_topic(root, "O", 4, order=True)
    p = mqctl(root, "send", "O", "x")
    assert p.returncode == 2 and "ordered" in p.stderr
    mqctl(root, "send", "O", "x", "--sharding-key", "k", check=True)
    mqctl(root, "send", "O", "y", "--queue", "1", check=True)
    assert len(messages(root, "O")) == 2
    # per line: a keyed line without its key, a JSON record without key or queue
    p = mqctl(root, "send", "O", "-K", ":", "--json", input=b"k1:a\nk2:b\nnokey\nk3:c\n")
    assert "line 3" in one_error(p, 5, allow_info=True) and len(p.json_lines()) == 2
    p = mqctl(root, "send", "O", "--input", "json", "--json",
              input=b'{"body": "a", "queueId": 0}\n{"body": "b", "shardingKey": "s"}\n{"body": "c"}\n')
    assert "line 3" in one_error(p, 5, allow_info=True) and len(p.json_lines()) == 2
    assert len(messages(root, "O")) == 6


def test_no_auto_create_store_refuses_unknown_topics_with_3(root: Path) -> None:
    init(root, auto_create_topics=False)
    p = mqctl(root, "send", "T", "x")
    assert p.returncode == 3 and "topic create" in p.stderr
    create_topic(root, "T", 2)
    mqctl(root, "send", "T", "x", check=True)
    assert len(messages(root, "T")) == 1


def test_flush_sync(root: Path) -> None:
    p = mqctl(root, "send", "T", "--flush", "sync", "--json", input=b"".join(b"s%d\n" % i for i in range(300)), check=True)
    assert len(p.json_lines()) == 300
    assert [m.body for m in messages(root, "T")] == [b"s%d" % i for i in range(300)]
    assert mqctl(root, "send", "T", "x", "--flush", "sometimes").returncode == 2


def test_flush_sync_acknowledges_only_synced_batches(root: Path) -> None:
    """--flush sync fsyncs in a thread while later batches are written (group commit). The
    first batch always has an fsync of its own, and every later batch is covered by at least
    one more; a process killed as that second fsync starts has printed the first batch's
    results only (never a batch no fsync covered), in input order, and they are stored."""
    data = b"".join(b"s%d\n" % i for i in range(95))
    p = mqctl(root, "send", "T", "--flush", "sync", "--batch-size", "10", "--json", input=data, check=True)
    assert [r["queueOffset"] for r in p.json_lines()] == [i // 8 for i in range(95)]   # order kept
    assert [m.body for m in messages(root, "T")] == [b"s%d" % i for i in range(95)]
    p = mqctl(root, "send", "U", "--flush", "sync", "--batch-size", "10", "--json", input=data,
              failpoints="sync-before-fsync:2")
    assert p.returncode == -9, p.stderr
    acked = p.json_lines()
    by_id = {m.uniq_key: m.body for m in messages(root, "U")}
    assert [by_id[r["msgId"]] for r in acked] == [b"s%d" % i for i in range(10)]


def test_sharding_key_and_queue_together_is_a_usage_error(root: Path) -> None:
    assert mqctl(root, "send", "T", "x", "-s", "k", "-q", "1").returncode == 2
    assert not root.exists()


def test_sharding_key_routes_every_stdin_line_to_its_queue(root: Path) -> None:
    # the raw stdin fast path used to spread the lines round robin, ignoring --sharding-key
    p = mqctl(root, "send", "T", "-s", "k", "--json", input="a\nb\nc\n")
    assert p.returncode == 0, p.stderr
    queues = {json.loads(line)["queueId"] for line in p.stdout.splitlines()}
    single = json.loads(mqctl(root, "send", "T", "d", "-s", "k", "--json").stdout)["queueId"]
    assert queues == {single} == {abs(107) % 8}   # Java "k".hashCode() = 107


# -- missing and unwritable stores -----------------------------------------------------------------

@pytest.mark.parametrize("args", [["topic", "list"], ["topic", "status", "T"], ["msg", "show", "0" * 32],
                                  ["store", "check"], ["consume", "T", "-g", "g", "-e"]])
def test_reading_a_missing_store_exits_3_and_creates_nothing(tmp_path: Path, args: list[str]) -> None:
    root = tmp_path / "store"
    p = mqctl(root, *args)
    one_error(p, 3, allow_info=True)
    assert not root.exists()


def _fsize_limit(nbytes: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, nbytes))
    return apply


def test_file_size_limit_fails_the_batch_cleanly(root: Path) -> None:
    """A write the file system refuses (here RLIMIT_FSIZE, which binds root too) fails the
    batch with one clear line and a non-zero exit; nothing of it is visible afterwards."""
    s = Store.open(root, create=True)
    s.put_bodies("T", [b"before %d" % i for i in range(100)], queue_id=0)
    s.close()
    seg = root / "commitlog" / F.segment_name(0)
    size0 = seg.stat().st_size
    before = tree(root)
    body = b"z" * 100
    data = b"".join(body + b"\n" for _ in range(20_000))  # > 4 MB of records: several batches
    limit = size0 + 3_000_000                               # the first batch (~2 MB) fits
    p = mqctl(root, "send", "T", "--queue", "0", "--json", input=data, preexec_fn=_fsize_limit(limit))
    assert "file size limit" in one_error(p, 1)   # the only line on stderr
    sent = p.json_lines()
    assert 0 < len(sent) < 20_000
    # exactly what was reported is stored, and every byte of the log is a whole record
    ms = messages(root, "T")
    assert len(ms) == 100 + len(sent)
    assert {m.commitlog_offset for m in ms[100:]} == {r["commitLogOffset"] for r in sent}
    assert seg.stat().st_size == ms[-1].commitlog_offset + ms[-1].size <= limit
    mqctl(root, "store", "check", check=True)
    # the store still opens and takes writes without the limit
    mqctl(root, "send", "T", "after", "--queue", "0", check=True)
    assert messages(root, "T")[-1].body == b"after"
    assert len(before) <= len(tree(root))


def test_file_size_limit_on_the_index_undoes_log_and_queues(root: Path) -> None:
    """The index file is the biggest: a limit below its size fails the batch after the log
    and consume queue were written. Both are cut back."""
    s = Store.open(root, create=True)
    s.put_bodies("T", [b"first"], queue_id=0)
    s.close()
    before = tree(root)
    index_size = max(p.stat().st_size for p in (root / "index").iterdir())
    p = mqctl(root, "send", "T", "--queue", "0", "--json", input=b"a\nb\nc\n",
              preexec_fn=_fsize_limit(index_size))
    one_error(p, 1, allow_info=True)
    assert p.json_lines() == []
    after = tree(root)
    for name in before:
        if not name.startswith("index/"):
            assert after[name] == before[name], f"{name} changed by a failed batch"
    assert [m.body for m in messages(root, "T")] == [b"first"]
    mqctl(root, "store", "check", check=True)
    mqctl(root, "send", "T", "second", "--queue", "0", "--keys", "kk", check=True)
    assert [m.body for m in messages(root, "T")] == [b"first", b"second"]
    s = Store.open(root)
    assert [m.body for m in s.query_key("T", "kk")] == [b"second"]
    s.close()


def test_unwritable_store_directory_fails_with_one_line(root: Path) -> None:
    """chmod does not stop root; a read-only bind mount would, but needs privileges the test
    may not have. A file where a directory must go is refused by the kernel for everyone."""
    s = Store.open(root, create=True)
    s.put_bodies("T", [b"x"])
    s.close()
    before = tree(root)
    (root / "consumequeue" / "NEWTOPIC").write_bytes(b"not a directory")
    p = mqctl(root, "send", "NEWTOPIC", "y", "--queue", "0")
    assert p.returncode != 0
    one_error(p, p.returncode, allow_info=True)
    (root / "consumequeue" / "NEWTOPIC").unlink()
    assert mqctl(root, "store", "check").returncode == 0
    after = tree(root)
    assert {k: v for k, v in after.items() if k.startswith("commitlog/")} == \
        {k: v for k, v in before.items() if k.startswith("commitlog/")}


@pytest.mark.parametrize("flush", ["async", "sync"])
def test_a_slow_pipe_is_sent_line_by_line_without_waiting_for_more(mq: MQ, flush: str) -> None:
    """``tail -f | mqctl send``: each line is stored and reported while stdin stays open;
    with ``--flush sync`` as soon as its fsync is done, not when the next line comes."""
    feeder = mq.feed("T", "--flush", flush)
    for i in range(3):
        assert feeder.batch([f"line {i}"], timeout=30), f"send died at line {i}: {feeder.close()} {feeder.stderr}"
        assert feeder.acked[-1]["status"] == "SEND_OK"
        assert [m.body for m in messages(mq.root, "T")][-1] == b"line %d" % i
    assert feeder.close() == 0, feeder.stderr


def test_a_json_line_keeps_its_msg_id_so_dedup_skips_a_resend(root: Path, tmp_path: Path) -> None:
    """A line resent into its own topic keeps its msgId (RocketMQ's client keeps a UNIQ_KEY it
    finds): `consume T --json | send T --input json` run twice makes copies a --dedup consumer
    of T handles once. A copy into another topic is a new message with a new id, so msg show
    of the original id still finds the original; a line naming no topic keeps its msgId; a
    line without one gets a new id."""
    mqctl(root, "send", "T", "--input", "json", input=b'{"body": "a"}\n{"body": "b"}\n', check=True)
    env = mqctl(root, "consume", "T", "--no-group", "-o", "first", "-e", "--json", check=True).stdout
    ids = [json.loads(line)["msgId"] for line in env.decode().splitlines()]
    for _ in range(2):
        p = mqctl(root, "send", "T", "--input", "json", "--json", input=env, check=True)
        assert [r["msgId"] for r in p.json_lines()] == ids
    assert sorted(m.uniq_key for m in messages(root, "T")) == sorted(ids * 3)
    out = tmp_path / "handled"
    mqctl(root, "consume", "T", "-g", "dg", "--from", "first", "-e", "--dedup",
          "--exec", f"sh -c 'cat >> {out}; echo >> {out}'", check=True)
    assert sorted(out.read_text().split()) == ["a", "b"]
    # a copy into another topic: new ids, and msg show of the original id shows T's
    p = mqctl(root, "send", "COPY", "--input", "json", "--json", input=env, check=True)
    assert not {r["msgId"] for r in p.json_lines()} & set(ids)
    assert mqctl(root, "msg", "show", ids[1], "--json", check=True).json_lines()[0]["topic"] == "T"
    # lower case is the same id (ids are stored in upper case); no msgId: a new id
    lower = json.dumps({"body": "c", "msgId": ids[0].lower()}) + "\n" + json.dumps({"body": "d"}) + "\n"
    p = mqctl(root, "send", "COPY", "--input", "json", "--json", input=lower.encode(), check=True)
    got = [r["msgId"] for r in p.json_lines()]
    assert got[0] == ids[0] and got[1] not in ids
    # msg show: the newest copy, its history every copy
    shown = mqctl(root, "msg", "show", ids[0], "--json", check=True).json_lines()[0]
    assert shown["body"] == "c"


@pytest.mark.parametrize("bad", ['"nothex"', "7", "true", '"' + "A" * 31 + '"', '"' + "G" * 32 + '"',
                                 '"7F00000100002A9F0000000000000000"'])   # (an offsetMsgId)
def test_a_msg_id_that_is_no_message_id_is_a_data_error_naming_the_line(root: Path, bad: str) -> None:
    p = mqctl(root, "send", "T", "--input", "json", "--json",
              input=f'{{"body": "ok"}}\n{{"body": "x", "msgId": {bad}}}\n{{"body": "after"}}\n'.encode())
    err = one_error(p, 5, allow_info=True)
    assert "line 2" in err and "msgId" in err
    assert len(p.json_lines()) == 1 and [m.body for m in messages(root, "T")] == [b"ok"]
