"""``mqctl send`` end to end: real processes, checked against the store's files."""
from __future__ import annotations

import base64
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from store.log import format as F
from store.log.broker import Store
from tests.log.storetestutil import jhash

_BIN = Path(sys.executable).parent / "mqctl"
MQCTL = [str(_BIN)] if _BIN.exists() else [sys.executable, "-m", "mqctl"]


def run(root: Path, *args: str, input: bytes | None = None, preexec_fn=None, timeout: float = 60,
        env_extra: dict | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, MQCTL_STORE=str(root), NO_COLOR="1", PYTHONDONTWRITEBYTECODE="1")
    env.pop("MQCTL_FAILPOINTS", None)
    env.update(env_extra or {})
    return subprocess.run(MQCTL + list(args), input=input, capture_output=True, env=env,
                          timeout=timeout, preexec_fn=preexec_fn)


def ok(p: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert p.returncode == 0, f"exit {p.returncode}: {p.stderr.decode()}"
    return p


def results(p: subprocess.CompletedProcess) -> list[dict]:
    return [json.loads(line) for line in p.stdout.decode().splitlines()]


def error_lines(p: subprocess.CompletedProcess) -> list[str]:
    return [ln for ln in p.stderr.decode().splitlines() if ln.startswith("mqctl: error:")]



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
    from store.log.broker import StoreSettings
    Store.open(root, create=True, settings=StoreSettings(**settings)).close()


def create_topic(root: Path, name: str, queues: int, order: bool = False) -> None:
    s = Store.open(root, create=True)
    s.create_topic(name, queues, order)
    s.close()


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file() and p.name != "lock"}


# -- one message --------------------------------------------------------------------------------

def test_send_one_body_prints_the_send_result(root: Path) -> None:
    p = ok(run(root, "send", "T", "hello world", "--tag", "TA", "--keys", "k1,k2", "-p", "color=red", "--json"))
    [r] = results(p)
    assert set(r) >= {"status", "msgId", "topic", "queueId", "queueOffset", "commitLogOffset"}
    assert (r["status"], r["topic"], r["queueOffset"]) == ("SEND_OK", "T", 0)
    [m] = messages(root, "T")
    assert (m.body, m.queue_id, m.commitlog_offset, m.uniq_key) == (b"hello world", r["queueId"], r["commitLogOffset"], r["msgId"])
    assert (m.tags, m.keys, m.user_properties) == ("TA", ["k1", "k2"], {"color": "red"})
    # the id printed finds it
    shown = ok(run(root, "msg", "show", r["msgId"], "--json"))
    assert json.loads(shown.stdout)["body"] == "hello world"


def test_send_without_json_summarises_on_stderr_only(root: Path) -> None:
    p = ok(run(root, "send", "T", "x"))
    assert p.stdout == b""
    assert p.stderr.decode().startswith("sent 1 message to T")


# -- stdin ------------------------------------------------------------------------------------

def test_stdin_lines_one_message_each_in_order(root: Path) -> None:
    lines = [f"line {i}" for i in range(2000)]
    p = ok(run(root, "send", "T", "--queue", "2", "--json", input=("\n".join(lines) + "\n").encode()))
    rs = results(p)
    assert [r["queueOffset"] for r in rs] == list(range(2000)) and {r["queueId"] for r in rs} == {2}
    assert [m.body.decode() for m in messages(root, "T")] == lines


def test_stdin_last_line_without_newline_and_empty_lines(root: Path) -> None:
    ok(run(root, "send", "T", "-", input=b"a\n\nb\nc"))
    assert [m.body for m in messages(root, "T")] == [b"a", b"b", b"c"]


def test_stdin_dash_reads_stdin(root: Path) -> None:
    ok(run(root, "send", "T", "-", input=b"x\ny\n"))
    assert len(messages(root, "T")) == 2


@pytest.mark.parametrize("delim,data,want", [
    (",", b"a,b,,c", [b"a", b"b", b"c"]),
    ("\\0", b"one\ntwo\x00three\x00", [b"one\ntwo", b"three"]),
    ("--", b"x--y--z", [b"x", b"y", b"z"]),
])
def test_delimiter(root: Path, delim: str, data: bytes, want: list[bytes]) -> None:
    ok(run(root, "send", "T", "--delimiter", delim, input=data))
    assert [m.body for m in messages(root, "T")] == want


def test_empty_delimiter_is_a_usage_error(root: Path) -> None:
    assert run(root, "send", "T", "--delimiter", "", input=b"x").returncode == 2


def test_key_delimiter_same_key_same_queue(root: Path) -> None:
    create_topic(root, "T", 8)
    lines = [f"user-{i % 5}:event {i}" for i in range(100)] + ["no key here"]
    p = ok(run(root, "send", "T", "--key-delimiter", ":", "--json", input="\n".join(lines).encode()))
    rs = results(p)
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
    p = ok(run(root, "send", "T", "--input", "json", "--json",
               input="".join(json.dumps(o) + "\n" for o in lines).encode()))
    rs = results(p)
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
    c = ok(run(root, "consume", "T", "-g", "copier", "--from", "first", "-e", "--json"))
    ok(run(root, "send", "COPY", "--input", "json", input=c.stdout))
    assert sorted(m.body for m in messages(root, "COPY")) == sorted(m.body for m in got)


def test_malformed_json_line_stops_there_after_sending_the_lines_before(root: Path) -> None:
    good = [json.dumps({"body": f"m{i}"}) for i in range(3)]
    data = "\n".join(good + ['{"body": "broken"', json.dumps({"body": "after"})]) + "\n"
    p = run(root, "send", "T", "--input", "json", "--json", input=data.encode())
    assert p.returncode == 5
    assert [r["status"] for r in results(p)] == ["SEND_OK"] * 3
    [err] = error_lines(p)
    assert "line 4" in err
    assert [m.body for m in messages(root, "T")] == [b"m0", b"m1", b"m2"]


@pytest.mark.parametrize("bad", ['"just a string"', '{"nobody": 1}', '{"body": 5}',
                                 '{"body": "x", "bodyEncoding": "base64"}',
                                 '{"body": "x", "properties": {"TAGS": "reserved"}}',
                                 '{"body": "x", "queueId": -1}', '{"body": "x", "keys": 5}'])
def test_invalid_json_records_are_data_errors_naming_the_line(root: Path, bad: str) -> None:
    p = run(root, "send", "T", "--input", "json", "--json", input=f'{{"body": "ok"}}\n{bad}\n'.encode())
    assert p.returncode == 5, p.stderr
    [err] = error_lines(p)
    assert "line 2" in err
    assert len(results(p)) == 1 and [m.body for m in messages(root, "T")] == [b"ok"]


def test_json_queue_id_out_of_range_names_the_line_and_keeps_earlier_lines(root: Path) -> None:
    create_topic(root, "T", 2)
    p = run(root, "send", "T", "--input", "json", "--json",
            input=b'{"body": "a"}\n{"body": "b", "queueId": 1}\n{"body": "c", "queueId": 2}\n{"body": "d"}\n')
    assert p.returncode == 5, p.stderr
    [err] = error_lines(p)
    assert "line 3" in err and "queue 2" in err
    assert len(results(p)) == 2 and [m.body for m in messages(root, "T")] == [b"a", b"b"]


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
    p = run(root, "send", "T", "--json", *args, input=data)
    assert p.returncode == 5, p.stderr
    [err] = error_lines(p)
    assert "line 6" in err and "100" in err
    assert len(results(p)) == 5
    assert [m.body for m in messages(root, "T")] == bodies[:5]


def test_oversized_single_body_is_refused_and_nothing_is_written(root: Path) -> None:
    init(root, max_message_size=100)
    before = tree(root)
    p = run(root, "send", "T", "y" * 101)
    assert p.returncode == 5 and len(error_lines(p)) == 1
    assert tree(root) == before


def test_a_big_batch_over_many_store_batches(root: Path) -> None:
    n = 50_000
    data = b"".join(b"%07d\n" % i for i in range(n))
    p = ok(run(root, "send", "T", "--json", input=data))
    rs = results(p)
    assert len(rs) == n and len({r["commitLogOffset"] for r in rs}) == n
    ms = messages(root, "T")
    assert [m.body for m in ms] == [b"%07d" % i for i in range(n)]
    assert ok(run(root, "store", "check")).returncode == 0


# -- names, queues, flush -------------------------------------------------------------------------

BAD_TOPICS = ["bad name", "a/b", "..", "x" * 128, "%RETRY%g", "%DLQ%g", "RMQ_SYS_X", "SCHEDULE_TOPIC_XXXX",
              "tópico", ""]


@pytest.mark.parametrize("topic", BAD_TOPICS)
def test_bad_or_reserved_topic_creates_no_store(tmp_path: Path, topic: str) -> None:
    root = tmp_path / "store"
    p = run(root, "send", topic, "x")
    assert p.returncode == 2, p.stderr
    assert len(error_lines(p)) == 1
    assert not root.exists(), "no store directory may be created for a refused send"
    assert list(tmp_path.iterdir()) == []


def test_bad_or_reserved_topic_changes_nothing_in_a_store(root: Path) -> None:
    init(root)
    before = tree(root)
    for topic in ("a/b", "%DLQ%g"):
        assert run(root, "send", topic, "x").returncode == 2
        assert run(root, "topic", "create", topic).returncode == 2
    assert tree(root) == before
    assert sorted(os.listdir(root / "consumequeue")) == []


def test_queue_out_of_range_is_a_usage_error(root: Path) -> None:
    create_topic(root, "T", 4)
    ok(run(root, "send", "T", "x", "--queue", "3"))
    before = tree(root)
    for args in (["T", "y", "--queue", "4"], ["T", "--queue", "9"], ["T", "y", "--queue", "-1"]):
        p = run(root, "send", *args, input=b"a\nb\n")
        assert p.returncode == 2, (args, p.stderr)
    assert tree(root) == before


def test_queue_out_of_range_on_a_new_topic_does_not_create_it(root: Path) -> None:
    init(root)
    p = run(root, "send", "NEW", "x", "--queue", "8")     # the default is 8 queues: 0-7
    assert p.returncode == 2
    assert ok(run(root, "topic", "list", "--json")).stdout == b""


def test_ordered_topic_requires_a_key_or_queue(root: Path) -> None:
    create_topic(root, "O", 4, order=True)
    p = run(root, "send", "O", "x")
    assert p.returncode == 2 and "ordered" in p.stderr.decode()
    ok(run(root, "send", "O", "x", "--sharding-key", "k"))
    ok(run(root, "send", "O", "y", "--queue", "1"))
    assert len(messages(root, "O")) == 2
    # per line: a keyed line without its key, a JSON record without key or queue
    p = run(root, "send", "O", "-K", ":", "--json", input=b"k1:a\nk2:b\nnokey\nk3:c\n")
    assert p.returncode == 5 and "line 3" in error_lines(p)[0] and len(results(p)) == 2
    p = run(root, "send", "O", "--input", "json", "--json",
            input=b'{"body": "a", "queueId": 0}\n{"body": "b", "shardingKey": "s"}\n{"body": "c"}\n')
    assert p.returncode == 5 and "line 3" in error_lines(p)[0] and len(results(p)) == 2
    assert len(messages(root, "O")) == 6


def test_no_auto_create_store_refuses_unknown_topics_with_3(root: Path) -> None:
    init(root, auto_create_topics=False)
    p = run(root, "send", "T", "x")
    assert p.returncode == 3 and "topic create" in p.stderr.decode()
    create_topic(root, "T", 2)
    ok(run(root, "send", "T", "x"))
    assert len(messages(root, "T")) == 1


def test_flush_sync(root: Path) -> None:
    p = ok(run(root, "send", "T", "--flush", "sync", "--json", input=b"".join(b"s%d\n" % i for i in range(300))))
    assert len(results(p)) == 300
    assert [m.body for m in messages(root, "T")] == [b"s%d" % i for i in range(300)]
    assert run(root, "send", "T", "x", "--flush", "sometimes").returncode == 2


def test_flush_sync_acknowledges_only_synced_batches(root: Path) -> None:
    """--flush sync fsyncs in a thread while later batches are written (group commit). The
    first batch always has an fsync of its own, and every later batch is covered by at least
    one more; a process killed as that second fsync starts has printed the first batch's
    results only (never a batch no fsync covered), in input order, and they are stored."""
    data = b"".join(b"s%d\n" % i for i in range(95))
    p = ok(run(root, "send", "T", "--flush", "sync", "--batch-size", "10", "--json", input=data))
    assert [r["queueOffset"] for r in results(p)] == [i // 8 for i in range(95)]   # order kept
    assert [m.body for m in messages(root, "T")] == [b"s%d" % i for i in range(95)]
    p = run(root, "send", "U", "--flush", "sync", "--batch-size", "10", "--json", input=data,
            env_extra={"MQCTL_FAILPOINTS": "sync-before-fsync:2"})
    assert p.returncode == -9, p.stderr.decode()
    acked = results(p)
    by_id = {m.uniq_key: m.body for m in messages(root, "U")}
    assert [by_id[r["msgId"]] for r in acked] == [b"s%d" % i for i in range(10)]


def test_sharding_key_and_queue_together_is_a_usage_error(root: Path) -> None:
    assert run(root, "send", "T", "x", "-s", "k", "-q", "1").returncode == 2
    assert not root.exists()


# -- missing and unwritable stores -----------------------------------------------------------------

@pytest.mark.parametrize("args", [["topic", "list"], ["topic", "status", "T"], ["msg", "show", "0" * 32],
                                  ["store", "check"], ["consume", "T", "-g", "g", "-e"]])
def test_reading_a_missing_store_exits_3_and_creates_nothing(tmp_path: Path, args: list[str]) -> None:
    root = tmp_path / "store"
    p = run(root, *args)
    assert p.returncode == 3, p.stderr
    assert len(error_lines(p)) == 1
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
    p = run(root, "send", "T", "--queue", "0", "--json", input=data, preexec_fn=_fsize_limit(limit))
    assert p.returncode == 1, p.stderr
    errs = error_lines(p)
    assert len(errs) == 1 and "file size limit" in errs[0], p.stderr
    assert len(p.stderr.decode().strip().splitlines()) == 1
    sent = results(p)
    assert 0 < len(sent) < 20_000
    # exactly what was reported is stored, and every byte of the log is a whole record
    ms = messages(root, "T")
    assert len(ms) == 100 + len(sent)
    assert {m.commitlog_offset for m in ms[100:]} == {r["commitLogOffset"] for r in sent}
    assert seg.stat().st_size == ms[-1].commitlog_offset + ms[-1].size <= limit
    ok(run(root, "store", "check"))
    # the store still opens and takes writes without the limit
    ok(run(root, "send", "T", "after", "--queue", "0"))
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
    p = run(root, "send", "T", "--queue", "0", "--json", input=b"a\nb\nc\n",
            preexec_fn=_fsize_limit(index_size))
    assert p.returncode == 1 and len(error_lines(p)) == 1, p.stderr
    assert results(p) == []
    after = tree(root)
    for name in before:
        if not name.startswith("index/"):
            assert after[name] == before[name], f"{name} changed by a failed batch"
    assert [m.body for m in messages(root, "T")] == [b"first"]
    ok(run(root, "store", "check"))
    ok(run(root, "send", "T", "second", "--queue", "0", "--keys", "kk"))
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
    p = run(root, "send", "NEWTOPIC", "y", "--queue", "0")
    assert p.returncode != 0
    assert len(error_lines(p)) == 1 and "Traceback" not in p.stderr.decode()
    (root / "consumequeue" / "NEWTOPIC").unlink()
    assert run(root, "store", "check").returncode == 0
    after = tree(root)
    assert {k: v for k, v in after.items() if k.startswith("commitlog/")} == \
        {k: v for k, v in before.items() if k.startswith("commitlog/")}


def test_a_slow_pipe_is_sent_line_by_line_without_waiting_for_more(root: Path) -> None:
    """``tail -f | mqctl send``: each line is stored and reported while stdin stays open."""
    import select
    env = dict(os.environ, MQCTL_STORE=str(root), NO_COLOR="1")
    p = subprocess.Popen(MQCTL + ["send", "T", "--json"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env)
    try:
        for i in range(3):
            p.stdin.write(b"line %d\n" % i)
            p.stdin.flush()
            ready, _, _ = select.select([p.stdout], [], [], 30)
            assert ready, f"no result for line {i} while stdin is still open"
            r = json.loads(p.stdout.readline())
            assert r["status"] == "SEND_OK"
            assert [m.body for m in messages(root, "T")][-1] == b"line %d" % i
    finally:
        p.stdin.close()
        p.wait(timeout=30)
    assert p.returncode == 0
