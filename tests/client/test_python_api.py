"""The Python API (``import store``): producers, consumers, transactions and Admin, alone and
side by side with real ``mqctl`` processes on one store.

Every wait is bounded (``wait_for``); the CLI members are separate processes, killed by pid
when a test ends.
"""
from __future__ import annotations

import collections
import datetime as dt
import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

import pytest

import store
from tests.procs import MQ, LockSampler, pid_running, python, wait_for  # noqa: F401  (mq is a fixture)


@pytest.fixture
def path(mq: MQ) -> str:
    return str(mq.root)


def envelopes(raw: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in raw.splitlines() if line.strip()]


class Iterating(threading.Thread):
    """Iterate a consumer in a thread until :meth:`finish` (its ``stop``)."""

    def __init__(self, consumer: store.Consumer, on_message: Callable[[store.Message], None] | None = None) -> None:
        super().__init__(daemon=True)
        self.consumer = consumer
        self.on_message = on_message
        self.got: list[store.Message] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for m in self.consumer.messages():
                if self.on_message is not None:
                    self.on_message(m)
                self.got.append(m)
        except BaseException as exc:  # noqa: BLE001 - reported by finish()
            self.error = exc

    def finish(self) -> None:
        self.consumer.stop()
        self.join(timeout=20)
        assert not self.is_alive(), "the iterating thread did not stop"
        if self.error is not None:
            raise self.error


# -- the package --------------------------------------------------------------------------------

def test_import_store_is_light_and_exports_the_api() -> None:
    code = ("import sys, store\n"
            "names = ['Producer', 'Consumer', 'TransactionProducer', 'TxState', 'Admin', 'Message',\n"
            "         'SendResult', 'StoreError', 'UsageError', 'TopicNotFoundError']\n"
            "assert all(getattr(store, n) for n in names)\n"
            "heavy = sorted(m for m in sys.modules if m.split('.')[0] in\n"
            "               ('rich', 'typer', 'pyspark', 'numpy', 'pyarrow', 'mqctl'))\n"
            "print(heavy)\n")
    cp = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.strip() == "[]"
    assert issubclass(store.UsageError, store.StoreError)
    assert store.TxState.COMMIT == "COMMIT"
    doc = store.Consumer.__doc__ or ""
    assert "at-least-once" in doc and "messages" in doc and "run" in doc


def test_every_exported_class_and_function_is_named_as_exported() -> None:
    """``repr``, ``help()`` and tracebacks show a name the user can import: no public name is an
    alias of a class or function named otherwise (``store.TransactionEnd`` once printed as
    ``EndResult``, ``store.StoredMessage`` as ``Message``, a different class from ``store.Message``)."""
    import inspect
    for name in store.__all__:
        obj = getattr(store, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert obj.__name__ == name, f"store.{name} is {obj.__module__}.{obj.__qualname__}"
    ret = inspect.signature(store.TransactionProducer.commit).return_annotation
    assert ret in ("TransactionEnd", store.TransactionEnd), ret


def test_importing_the_clients_loads_what_they_open(tmp_path: Path) -> None:
    """``from store import Producer`` (``Consumer``), as at the top of a program, loads the
    store (and a producer's write path) there: the first open and batch load no more of the
    engine, and a producer's path never imports ``typing`` (store/__init__.py)."""
    root = tmp_path / "s"
    with store.Producer(str(root)) as p:
        p.send("T", "first")
    engine = ("store.log.messagestore", "store.log.engine", "store.log.writebatch", "store.log.framing")
    code = ("import sys\n"
            f"from store import {{0}}\n"
            "loaded = set(sys.modules)\n"
            f"print(sorted(m for m in {engine[:2] + ('{1}',)!r} if m not in loaded))\n"
            "{2}\n"
            "print(sorted(m for m in set(sys.modules) - loaded if m.startswith('store.log')))\n"
            "print('typing' in sys.modules)\n")
    produce = ("with Producer(sys.argv[1]) as p:\n"
               "    p.send_many('T', [b'a', b'b'])")
    consume = ("with Consumer('T', group='g', path=sys.argv[1], start_from='first') as c:\n"
               "    assert 'first' in [m.text for m in c.messages(exit_at_end=True)]")
    for what, first_use in (("Producer", produce), ("Consumer", consume)):
        script = code.format(what, engine[2 if what == "Producer" else 1], first_use)
        cp = subprocess.run([sys.executable, "-c", script, str(root)], capture_output=True, text=True, timeout=120)
        assert cp.returncode == 0, cp.stderr
        lines = cp.stdout.splitlines()
        assert lines[:2] == ["[]", "[]"], (what, lines)
        if what == "Producer":
            assert lines[2] == "False"


def test_a_python_consumer_loads_no_write_path(tmp_path: Path) -> None:
    """A consumer's process (the iterator, to the end) loads neither the write path's modules
    nor hashlib's OpenSSL bindings nor sortedcontainers nor the key index: start-up every
    consumer pays for (tests/cli/test_startup.py: CONSUMER_NEVER_LOADS)."""
    root = tmp_path / "s"
    with store.Producer(str(root)) as p:
        p.send_many("T", [f"m{i}" for i in range(5)])
    code = ("import sys, store\n"
            "with store.Consumer('T', group='g', path=sys.argv[1], start_from='first') as c:\n"
            "    got = [m.text for m in c.messages(exit_at_end=True)]\n"
            "print(sorted(got))\n"
            "print(sorted(m for m in sys.modules if m in ('store.log.framing', 'store.log.arrayframing',\n"
            "      'store.log.writebatch', 'hashlib', '_hashlib', 'sortedcontainers', 'store.log.index')))\n")
    cp = subprocess.run([sys.executable, "-c", code, str(root)], capture_output=True, text=True, timeout=120)
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.splitlines() == [str([f"m{i}" for i in range(5)]), "[]"]


def test_path_none_selects_mqctl_store(mq: MQ, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MQCTL_STORE", str(mq.root))
    with store.Producer() as p:
        p.send("T", "via env")
    with store.Admin() as admin:
        assert [t.topic for t in admin.topics()] == ["T"]


# -- producing ----------------------------------------------------------------------------------

def test_python_producer_to_cli_consumer(mq: MQ, path: str) -> None:
    with store.Producer(path, flush="sync") as p:
        results = [p.send("T", f"m{i}", tags="paid", keys=["k1", f"order-{i}"], properties={"source": "py"})
                   for i in range(10)]
        results += p.send_many("T", [b"b0", "b1", b"b2"], sharding_key="alice")
    cp = mq.ok("consume", "T", "-g", "cli", "--from", "first", "-e", "--json")
    got = {e["msgId"]: e for e in envelopes(cp.stdout)}
    assert len(got) == len(results) == 13
    for r in results:
        e = got[r.msg_id]
        assert (e["topic"], e["queueId"], e["queueOffset"], e["offsetMsgId"]) == \
            (r.topic, r.queue_id, r.queue_offset, r.offset_msg_id)
    first = got[results[0].msg_id]
    assert first["tags"] == "paid" and first["keys"] == ["k1", "order-0"]
    assert first["properties"] == {"source": "py"} and first["body"] == "m0"
    batch = results[10:]   # one batch: one queue (the sharding key), consecutive offsets
    assert len({r.queue_id for r in batch}) == 1
    assert [r.queue_offset for r in batch] == list(range(batch[0].queue_offset, batch[0].queue_offset + 3))


def test_cli_producer_to_python_consumer(mq: MQ, path: str) -> None:
    cp = mq.ok("send", "T", "--json", "--tag", "x", input="".join(f"line {i}\n" for i in range(12)))
    sent = envelopes(cp.stdout)
    with store.Consumer("T", "py", path, start_from="first") as c:
        got = list(c.messages(exit_at_end=True))
    assert sorted((m.msg_id, m.queue_id, m.queue_offset) for m in got) == \
        sorted((s["msgId"], s["queueId"], s["queueOffset"]) for s in sent)
    assert {m.tags for m in got} == {"x"}
    assert sorted(m.text for m in got) == sorted(f"line {i}" for i in range(12))
    assert all(m.store_timestamp >= m.born_timestamp > 0 for m in got)


def test_ordered_topics_and_bad_arguments(path: str) -> None:
    with store.Admin(path) as admin:
        admin.create_topic("O", queues=4, order=True)
    with store.Producer(path) as p:
        with pytest.raises(store.UsageError):
            p.send("O", b"no key")
        with pytest.raises(store.UsageError):
            p.send_many("O", [b"a", b"b"])
        assert p.send("O", b"keyed", sharding_key="alice").topic == "O"
        assert p.send("O", b"queued", queue=3).queue_id == 3
        with pytest.raises(store.UsageError):
            p.send("O", b"both", sharding_key="a", queue=1)
        with pytest.raises(store.UsageError):
            p.send("T", b"x", delay=19)
        with pytest.raises(store.UsageError):
            p.send("T", b"x", properties={"UNIQ_KEY": "forged"})
        assert p.send("T", b"later", delay=3).msg_id
        before = int(time.time() * 1000)
        later = p.send("T", b"later", delay=dt.timedelta(seconds=90), queue=2)
        # as `mqctl send --delay --json` reports it: the real topic and queue, no offset yet
        assert (later.topic, later.queue_id, later.queue_offset) == ("T", 2, None)
        assert later.deliver_timestamp is not None and later.deliver_timestamp >= before + 90_000
        assert later.to_json()["deliverTimestamp"] == later.deliver_timestamp
        with pytest.raises(store.UsageError, match="'\\|'"):
            p.send("T", b"x", tags="paid||new")
    with pytest.raises(store.TopicNotFoundError):
        store.Consumer("missing", "g", path)


def test_send_many_refuses_a_single_body_instead_of_one_message_per_character(mq: MQ, path: str) -> None:
    """A str or bytes is itself iterable: send_many("T", "abc") sent "a", "b" and "c" (and
    AsyncProducer's the same), send_many("T", b"ab") failed on "not int". Both producers now
    refuse it by name, and nothing is sent."""
    import asyncio

    async def async_send(body: Any) -> None:
        async with store.AsyncProducer(path) as ap:
            await ap.send_many("T", body)

    with store.Producer(path) as p:
        for body in ("abc", b"abc", bytearray(b"abc")):
            with pytest.raises(store.UsageError, match="not a single"):
                p.send_many("T", body)
            with pytest.raises(store.UsageError, match="not a single"):
                asyncio.run(async_send(body))
        assert [r.queue_offset for r in p.send_many("T", ["abc"], queue=0)] == [0]
    assert mq.ok("consume", "T", "--no-group", "--from", "first", "-e").stdout == b"abc\n"


def test_a_producer_shared_with_forked_children_loses_nothing(mq: MQ, path: str) -> None:
    """A Producer opened before os.fork() (a pre-fork server, multiprocessing's fork start):
    the children's descriptors share the parent's lock files, and a flock is held per open
    file, so parent and children all "held" the write lock at once and wrote over each
    other's records (1,201 sends acknowledged, about 250 stored, store check crashed). Each
    process now takes a lock of its own, and its own unique-key prefix."""
    with store.Producer(path) as p:
        p.send("F", b"before")
        children = []
        for k in range(4):
            pid = os.fork()
            if pid == 0:   # pragma: no cover (the child's own exit status is checked)
                try:
                    for i in range(150):
                        p.send("F", f"c{k}-{i}".encode())
                    p.send_many("F", [f"m{k}-{i}".encode() for i in range(50)])
                    p.close()
                finally:
                    os._exit(0 if sys.exc_info()[0] is None else 1)
            children.append(pid)
        for i in range(150):
            p.send("F", f"p-{i}".encode())
        assert [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in children] == [0] * 4
    rows = envelopes(mq.ok("consume", "F", "--no-group", "--from", "first", "-e", "--json").stdout)
    assert len({r["body"] for r in rows}) == len(rows) == 1 + 4 * 200 + 150
    assert len({r["msgId"] for r in rows}) == len(rows)
    mq.check_clean()


def test_a_forked_child_does_not_keep_the_lock_of_a_parent_killed_in_its_batch(mq: MQ, path: str) -> None:
    """A child forked from a writing program takes a write lock of its own; it closed its
    copy of the parent's store-directory descriptor no more, and a flock lives while any
    descriptor of its open file does: the parent killed -9 in a batch left the store locked
    for as long as the child lived, and every writer (``mqctl send`` too) hung."""
    script = """
        import os, sys
        import store
        p = store.Producer(sys.argv[1])
        p.send("F", b"before")
        r, w = os.pipe()
        if os.fork() == 0:
            p.send("F", b"child")
            print("child", os.getpid(), flush=True)
            os.write(w, b"x")
            sys.stdin.read()   # lives until the test closes its stdin
            os._exit(0)
        os.read(r, 1)
        p.send("F", b"parent")
        p.send("F", b"killed")   # the third hit of the failpoint: in its batch, under the lock
        os._exit(3)
    """
    env = {**os.environ, "MQCTL_FAILPOINTS": "put-after-log:3"}   # (the child sends 2nd)
    proc = python(script, path, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    child = 0
    try:
        assert proc.stdout is not None
        child = int(proc.stdout.readline().split()[1])
        assert proc.wait(timeout=120) == -9
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)   # BlockingIOError: still held
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
        mq.ok("send", "F", "after")
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        if child and pid_running(child):
            os.kill(child, signal.SIGKILL)
        proc.wait()
    bodies = mq.ok("consume", "F", "--no-group", "--from", "first", "-e").stdout.split()
    assert set(bodies) - {b"killed"} == {b"before", b"child", b"parent", b"after"}   # (the killed batch's
    assert len(bodies) == len(set(bodies))   # record may be kept: it was in the log)


# -- groups shared with the CLI -------------------------------------------------------------

def test_python_and_cli_members_split_the_queues_exactly_once(mq: MQ, path: str) -> None:
    mq.ok("topic", "create", "T", "--queues", "8")
    cli = mq.start("consume", "T", "-g", "G", "--from", "first", "--json", "--client-id", "cli-member")
    wait_for(lambda: "cli-member" in mq.member_queues("G"), what="the CLI member to join")
    consumer = store.Consumer("T", "G", path, start_from="first", client_id="py-member")
    it = Iterating(consumer)
    it.start()
    try:
        split = mq.wait_balanced("G", "T", members=2, queues=8)
        cp = mq.ok("consumers", "-g", "G", "--json")
        assert {r["clientId"] for r in envelopes(cp.stdout)} == {"cli-member", "py-member"}
        with store.Producer(path) as p:
            ids = [r.msg_id for r in p.send_many("T", [f"m{i}" for i in range(400)][:200])]
            ids += [r.msg_id for r in p.send_many("T", [f"m{i}" for i in range(200, 400)])]
            ids += [p.send("T", f"single{i}").msg_id for i in range(16)]
        wait_for(lambda: len(it.got) + len(envelopes(cli.stdout())) >= len(ids), timeout=30,
                 what="both members to consume everything")
        time.sleep(0.3)   # anything handled twice would show up now
    finally:
        it.finish()
        consumer.close()
        assert cli.stop() == 0
    cli_msgs = envelopes(cli.stdout())
    py_ids = [m.msg_id for m in it.got]
    cli_ids = [e["msgId"] for e in cli_msgs]
    assert sorted(py_ids + cli_ids) == sorted(ids), "every message handled exactly once"
    assert py_ids and cli_ids
    assert {m.queue_id for m in it.got} <= split["py-member"]
    assert {e["queueId"] for e in cli_msgs} <= split["cli-member"]
    assert mq.committed_total("G", "T") == len(ids)


def test_python_orderly_member_never_takes_a_queue_locked_by_a_cli_member(mq: MQ, path: str) -> None:
    mq.ok("topic", "create", "T", "--queues", "4", "--order")
    cli = mq.start("consume", "T", "-g", "G", "--orderly", "--from", "first", "--json",
                   "--strategy", "config", "--queues", "0,1,2,3", "--client-id", "cli-member")
    wait_for(lambda: {i.queueId for i in mq.locks("G") if i.alive} == {0, 1, 2, 3},
             what="the CLI member to lock every queue")
    me = os.getpid()
    taken_under_foreign_lock: list[int] = []

    def check_lock(m: store.Message) -> None:
        holders = {i.queueId: i.pid for i in mq.locks("G") if i.alive and i.topic == "T"}
        if holders.get(m.queue_id) != me:
            taken_under_foreign_lock.append(m.queue_id)

    sampler = LockSampler(mq, "G", "T", allowed_pids=lambda: {cli.pid, me})
    sampler.start()
    consumer = store.Consumer("T", "G", path, orderly=True, start_from="first", client_id="py-member")
    it = Iterating(consumer, on_message=check_lock)
    it.start()
    try:
        with store.Producer(path) as p:
            first = [p.send("T", f"a{i}", queue=i % 4) for i in range(40)]
        wait_for(lambda: len(envelopes(cli.stdout())) >= 40, what="the CLI member to consume the first lot")
        time.sleep(1.5)   # more than a rebalance interval: the Python member tries for its queues
        assert it.got == [], "the Python member consumed queues the CLI member has locked"
        assert cli.stop() == 0
        wait_for(lambda: {i.queueId: i.pid for i in mq.locks("G") if i.alive} == {q: me for q in range(4)},
                 what="the Python member to lock every queue once the CLI member left")
        with store.Producer(path) as p:
            second = [p.send("T", f"b{i}", queue=i % 4) for i in range(40)]
        wait_for(lambda: len(it.got) >= 40, what="the Python member to consume the second lot")
    finally:
        it.finish()
        consumer.close()
        sampler.stop()
    assert sampler.conflicts == []
    assert taken_under_foreign_lock == []
    assert sorted(e["msgId"] for e in envelopes(cli.stdout())) == sorted(r.msg_id for r in first)
    assert [m.msg_id for m in it.got if m.queue_id == 0] == [r.msg_id for r in second if r.queue_id == 0]
    assert sorted(m.msg_id for m in it.got) == sorted(r.msg_id for r in second)


# -- iterator semantics ------------------------------------------------------------------------

def _one_queue_topic(path: str, name: str = "Q", order: bool = False) -> None:
    with store.Admin(path) as admin:
        admin.create_topic(name, queues=1, order=order)


def test_iterator_is_at_least_once(path: str) -> None:
    _one_queue_topic(path)
    with store.Producer(path) as p:
        p.send_many("Q", [f"m{i}" for i in range(6)])
    seen: list[str] = []
    with pytest.raises(RuntimeError):
        with store.Consumer("Q", "G", path, start_from="first") as c:
            for m in c.messages(exit_at_end=True):
                seen.append(m.text)
                if m.text == "m2":
                    raise RuntimeError("the loop body failed")
    assert seen == ["m0", "m1", "m2"]
    with store.Consumer("Q", "G", path) as c:
        for m in c.messages(exit_at_end=True):
            seen.append(m.text)
            if m.text == "m3":
                break   # leaving the with block normally commits the message in hand
    assert seen[3:] == ["m2", "m3"]
    with store.Consumer("Q", "G", path) as c:
        assert [m.text for m in c.messages(timeout=0.5)] == ["m4", "m5"]
        # a caught exception: the message in hand comes again in the next loop
        with store.Producer(path) as p:
            p.send("Q", "m6")
        try:
            for m in c.messages(timeout=5):
                raise ValueError(m.text)
        except ValueError as exc:
            assert str(exc) == "m6"
        assert [m.text for m in c.messages(timeout=0.5)] == ["m6"]
    with store.Admin(path) as admin:
        assert [(r.queue_id, r.consumer_offset, r.lag) for r in admin.lag("G", "Q")] == [(0, 7, 0)]


def test_broadcast_and_tags(path: str) -> None:
    with store.Producer(path) as p:
        p.send("B", "paid", tags="paid")
        p.send("B", "refunded", tags="refunded")
        p.send("B", "other", tags="other")
    with store.Consumer("B", "G", path, broadcast=True, start_from="first", client_id="one") as a, \
            store.Consumer("B", "G", path, broadcast=True, start_from="first", client_id="two",
                           tags="paid || refunded") as b:
        assert sorted(m.text for m in a.messages(exit_at_end=True)) == ["other", "paid", "refunded"]
        assert sorted(m.text for m in b.messages(exit_at_end=True)) == ["paid", "refunded"]


def test_a_tag_expression_without_a_tag_is_refused_not_every_message(path: str) -> None:
    """``'||'`` used to select every message; an empty alternative beside a tag is still
    skipped, as RocketMQ skips it, and ``''`` is still every message."""
    for expr in ("||", " || ", " "):
        with pytest.raises(store.UsageError, match="names no tag"):
            store.Consumer("B", "G", path, tags=expr)
    assert store.parse_tag_expression("A ||") == {"A"} and store.parse_tag_expression("") is None


def test_broadcast_refuses_what_only_clustering_has(path: str) -> None:
    """As `mqctl consume --broadcast` does: no dedup (a group's log), no dead letters."""
    with pytest.raises(store.UsageError, match="dedup"):
        store.Consumer("B", "G", path, broadcast=True, dedup=True)
    with store.Producer(path) as p:
        p.send("B", "x")
    with store.Consumer("B", "G", path, broadcast=True, client_id="c1") as c:
        with pytest.raises(store.UsageError, match="max_reconsume"):
            c.run(lambda m: None, exit_at_end=True, max_reconsume=3)
        with pytest.raises(store.UsageError, match="retry_delay"):
            c.run(lambda m: None, exit_at_end=True, retry_delay=1)


def test_start_from_time_and_client_id_in_use(path: str) -> None:
    _one_queue_topic(path)
    with store.Producer(path) as p:
        p.send("Q", "old")
    time.sleep(0.05)
    cut = dt.datetime.now(dt.timezone.utc)
    time.sleep(0.05)
    with store.Producer(path) as p:
        p.send("Q", "new")
    with store.Consumer("Q", "T1", path, start_from=cut) as c:
        assert [m.text for m in c.messages(exit_at_end=True)] == ["new"]
        other = store.Consumer("Q", "T1", path, client_id=c.client_id)   # (it joins when first used)
        with pytest.raises(store.ClientIdInUseError), other:
            pass
    with store.Consumer("Q", "T2", path, start_from="last") as c:
        assert list(c.messages(exit_at_end=True)) == []


def test_a_broadcast_client_id_in_use_is_named_as_each_face_spells_it(mq: MQ, path: str) -> None:
    """Two broadcast consumers of a group on one host, neither given a client id, share the
    default one: the second is told to give each its own, as its caller spells the argument
    (Python: client_id, mqctl: --client-id)."""
    _one_queue_topic(path)
    with store.Consumer("Q", "BC", path, broadcast=True) as c:
        assert list(c.messages(exit_at_end=True)) == []   # (joined: it holds HOST@DEFAULT)
        other = store.Consumer("Q", "BC", path, broadcast=True)
        with pytest.raises(store.ClientIdInUseError) as err, other:
            pass
        assert "its own client_id" in str(err.value) and "--client-id" not in str(err.value), err.value
        r = mq.run("consume", "Q", "-g", "BC", "--broadcast", "-e")
        assert r.returncode == 4 and "its own --client-id" in r.stderr, r


# -- push consumers ---------------------------------------------------------------------------

def test_push_failures_go_through_the_retry_topic_to_the_dlq(mq: MQ, path: str) -> None:
    _one_queue_topic(path)
    with store.Producer(path) as p:
        p.send_many("Q", ["ok1", "bad", "ok2"])
    calls: list[tuple[str, int, str]] = []
    lock = threading.Lock()

    def handler(m: store.Message) -> None:
        with lock:
            calls.append((m.text, m.reconsume_times, m.topic))
        if m.text == "bad":
            raise ValueError("cannot handle it")

    c = store.Consumer("Q", "G", path, start_from="first")
    t = threading.Thread(target=c.run, args=(handler,),
                         kwargs={"threads": 2, "max_reconsume": 2, "retry_delay": 0}, daemon=True)
    t.start()
    try:
        with mq.store() as s:
            wait_for(lambda: s.has_topic("%DLQ%G") and s.max_offset("%DLQ%G", 0) == 1,
                     what="the failed message to reach the DLQ")
    finally:
        c.close()
        t.join(timeout=20)
    assert not t.is_alive()
    assert sorted(x for x in calls if x[0] != "bad") == [("ok1", 0, "Q"), ("ok2", 0, "Q")]
    assert [x[1:] for x in calls if x[0] == "bad"] == [(0, "Q"), (1, "Q"), (2, "Q")]
    cp = mq.ok("consume", "%DLQ%G", "-g", "dlq-reader", "--from", "first", "-e", "--json")
    (dead,) = envelopes(cp.stdout)
    assert dead["body"] == "bad" and dead["reconsumeTimes"] == 2


def test_push_backlog_failures_are_retried_one_by_one(path: str) -> None:
    """A backlog is handed to the handler threads in batches; a failure inside a batch sends
    that message alone to the retry topic, and every other message of the batch is consumed
    once (no redelivery of the batch)."""
    n = 2000
    with store.Producer(path) as p:
        p.send_many("B", [f"m{i}" for i in range(n)])
    calls: collections.Counter[str] = collections.Counter()
    lock = threading.Lock()

    def handler(m: store.Message) -> None:
        with lock:
            calls[m.text] += 1
        if int(m.text[1:]) % 97 == 0 and m.reconsume_times == 0:
            raise ValueError("first delivery of every 97th message fails")

    failing = {f"m{i}" for i in range(0, n, 97)}
    with store.Consumer("B", "G", path, start_from="first") as c:
        t = threading.Thread(target=c.run, args=(handler,), kwargs={"threads": 4, "retry_delay": 0},
                             daemon=True)
        t.start()
        try:
            wait_for(lambda: sum(calls.values()) >= n + len(failing), what="the retries to come back")
        finally:
            c.stop()
            t.join(timeout=30)
    assert not t.is_alive()
    assert set(calls) == {f"m{i}" for i in range(n)}
    assert {k for k, v in calls.items() if v == 2} == failing
    assert all(v == 1 for k, v in calls.items() if k not in failing)


def test_push_orderly_retries_in_place_in_order(path: str) -> None:
    _one_queue_topic(path, "O", order=True)
    with store.Producer(path) as p:
        p.send_many("O", ["a", "b", "c"], queue=0)
    calls: list[tuple[str, int]] = []

    def handler(m: store.Message) -> None:
        calls.append((m.text, m.reconsume_times))
        if m.text == "b" and m.reconsume_times < 2:
            raise RuntimeError("not yet")

    with store.Consumer("O", "G", path, orderly=True, start_from="first") as c:
        c.run(handler, exit_at_end=True, retry_delay=0.05)
    assert calls == [("a", 0), ("b", 0), ("b", 1), ("b", 2), ("c", 0)]
    with store.Admin(path) as admin:
        assert "%RETRY%G" not in [t.topic for t in admin.topics(system=True)]
        assert [r.offset for r in admin.offsets("G", "O")] == [3]


# -- transactions -----------------------------------------------------------------------------

def test_transactions(mq: MQ, path: str) -> None:
    decided: dict[str, store.TxState] = {}

    def check(m: store.Message) -> store.TxState:
        return decided.get(m.keys[0], store.TxState.UNKNOWN)

    with store.TransactionProducer(path, check=check) as tp:
        r1 = tp.send("pay", b"commit me", local_tx=lambda m: store.TxState.COMMIT, keys=["o1"])
        r2 = tp.send("pay", b"roll me back", local_tx=lambda m: store.TxState.ROLLBACK, keys=["o2"])
        r3 = tp.send("pay", b"ask me later", local_tx=lambda m: store.TxState.UNKNOWN, keys=["o3"])

        def boom(m: store.Message) -> store.TxState:
            raise RuntimeError("local transaction crashed")
        r4 = tp.send("pay", b"crashed", local_tx=boom, keys=["o4"])
        r5 = tp.send("pay", b"by hand", keys=["o5"])
        assert (r1.state, r1.transaction_state) == (store.TxState.COMMIT, "COMMITTED")
        assert (r2.state, r2.transaction_state) == (store.TxState.ROLLBACK, "ROLLED_BACK")
        assert (r3.state, r4.state) == (store.TxState.UNKNOWN, store.TxState.UNKNOWN)
        assert set(tp.pending()) == {r3.tx_id, r4.tx_id, r5.tx_id}
        tp.commit(r5.tx_id)
        with pytest.raises(store.TransactionStateError):
            tp.rollback(r5.tx_id)
        decided.update(o3=store.TxState.COMMIT, o4=store.TxState.ROLLBACK)
        report = tp.check_pending(timeout=0)
        assert {(e.tx_id, e.answer) for e in report.events} == {(r3.tx_id, "COMMIT"), (r4.tx_id, "ROLLBACK")}
        assert tp.pending() == []
    cp = mq.ok("consume", "pay", "-g", "G", "--from", "first", "-e", "--json")
    got = {e["msgId"]: e["body"] for e in envelopes(cp.stdout)}
    assert got == {r1.tx_id: "commit me", r3.tx_id: "ask me later", r5.tx_id: "by hand"}


# -- Admin ------------------------------------------------------------------------------------

def test_admin_rows_match_the_cli(mq: MQ, path: str) -> None:
    admin = store.Admin(path)
    try:
        info = admin.create_topic("T", queues=2)
        assert (info.topic, info.queues, info.order) == ("T", 2, False)
        with pytest.raises(store.TopicExistsError):
            admin.create_topic("T", queues=3)
        with store.Producer(path) as p:
            p.send_many("T", [f"a{i}" for i in range(5)], queue=0)
            p.send_many("T", [f"b{i}" for i in range(3)], queue=1)
        assert [(t.topic, t.queues, t.messages) for t in admin.topics()] == [("T", 2, 8)]
        with pytest.raises(store.GroupNotFoundError):
            admin.lag("nobody")
        with store.Consumer("T", "G", path, start_from="first", client_id="py-1") as c:
            for n, _m in enumerate(c.messages(timeout=2), 1):
                if n == 6:
                    break
            (member,) = admin.consumers("G")
            assert member.client_id == "py-1" and member.pid == os.getpid()
            cp = mq.ok("consumers", "-g", "G", "--json")
            assert [r["clientId"] for r in envelopes(cp.stdout)] == ["py-1"]
        assert admin.consumers("G") == []
        lag = admin.lag("G", "T")
        assert [(r.topic, r.queue_id, r.broker_offset) for r in lag] == [("T", 0, 5), ("T", 1, 3)]
        assert sum(r.lag for r in lag) == 2 and all(r.lag == r.broker_offset - r.consumer_offset for r in lag)
        cli = envelopes(mq.ok("progress", "-g", "G", "--topic", "T", "--json").stdout)
        assert [(r["queueId"], r["brokerOffset"], r["consumerOffset"], r["lag"]) for r in cli] == \
            [(r.queue_id, r.broker_offset, r.consumer_offset, r.lag) for r in lag]
        assert lag[0]["lag"] == lag[0].lag
        offs = admin.offsets("G")
        assert [(r.topic, r.queue_id, r.offset) for r in offs] == [("T", r.queue_id, r.consumer_offset) for r in lag]
        plan = admin.reset_offsets("G", "T", "earliest")
        assert [(r.queue_id, r.new) for r in plan.rows] == [(0, 0), (1, 0)] and not plan.applied
        assert [r.offset for r in admin.offsets("G")] == [r.consumer_offset for r in lag]
        admin.reset_offsets("G", "T", 4, execute=True)
        assert [r.offset for r in admin.offsets("G")] == [4, 3]
        assert admin.locks() == []
        with store.Consumer("T", "L", path, orderly=True, start_from="first") as c:
            list(c.messages(exit_at_end=True))
            locks = admin.locks("L")
            assert {(lk.topic, lk.queue_id, lk.state, lk.pid) for lk in locks} == \
                {("T", 0, "held", os.getpid()), ("T", 1, "held", os.getpid())}
        assert admin.locks("L") == []
    finally:
        admin.close()


def test_cli_consume_still_prints_and_execs(mq: MQ, path: str, tmp_path: Path) -> None:
    """The CLI's stdout and --exec sinks over the library runtime."""
    mq.send_lines("T", [f"x{i}" for i in range(5)])
    cp = mq.ok("consume", "T", "-g", "raw", "--from", "first", "-e")
    assert sorted(cp.stdout.splitlines()) == [f"x{i}".encode() for i in range(5)]
    log = tmp_path / "exec.log"
    cp = mq.ok("consume", "T", "-g", "exec", "--from", "first", "-e", "--threads", "1", "--exec",
               f"sh -c 'cat >> {log}; echo >> {log}'")
    assert sorted(log.read_text().split()) == [f"x{i}" for i in range(5)]
