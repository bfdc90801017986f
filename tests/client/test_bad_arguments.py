"""A Python caller's wrong argument types: each is refused with the library's documented error
(``store.UsageError``, a ``store.StoreError``) in one line naming the argument, before anything
is sent or joined, never a bare ``TypeError`` from deep inside a send."""
from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Callable

import pytest

import store
from tests.procs import MQ


@pytest.fixture
def path(mq: MQ) -> str:
    mq.ok("topic", "create", "T", "--queues", "1")
    return str(mq.root)


_SENDS: list[tuple[str, dict[str, Any], str]] = [
    ("keys", {"keys": 5}, "keys must be a str or a list of str, not int"),
    ("keys", {"keys": b"k"}, "keys must be a str or a list of str, not bytes"),
    ("keys", {"keys": {"k": 1}}, "keys must be a str or a list of str, not dict"),
    ("keys", {"keys": [5]}, "a key must be a str, not int"),
    ("properties", {"properties": 5}, "properties must be a dict of str, not int"),
    ("properties", {"properties": "a=b"}, "properties must be a dict of str, not str"),
    ("properties", {"properties": [5]}, "property 5: expected a NAME=VALUE string, not int"),
]


@pytest.mark.parametrize("arg,kw,said", _SENDS, ids=[f"{a}={kw[a]!r}" for a, kw, _ in _SENDS])
def test_a_send_with_a_wrong_type_is_refused_naming_the_argument(mq: MQ, path: str, arg: str,
                                                                  kw: dict[str, Any], said: str) -> None:
    async def async_send(many: bool) -> None:
        async with store.AsyncProducer(path) as ap:
            await (ap.send_many("T", [b"x"], **kw) if many else ap.send("T", b"x", **kw))

    sends: list[Callable[[], Any]] = []
    with store.Producer(path) as p, store.TransactionProducer(path) as tp:
        sends += [lambda: p.send("T", b"x", **kw), lambda: p.send_many("T", [b"x", b"y"], **kw),
                  lambda: asyncio.run(async_send(False)), lambda: asyncio.run(async_send(True)),
                  lambda: tp.send("T", b"x", local_tx=lambda m: store.TxState.COMMIT, **kw)]
        for send in sends:
            with pytest.raises(store.UsageError) as err:
                send()
            assert str(err.value) == said and "\n" not in said
    assert mq.ok("consume", "T", "--no-group", "--from", "first", "-e").stdout == b""


def test_other_wrong_types_of_producers_and_consumers_are_usage_errors(path: str, tmp_path: Path) -> None:
    cases: list[tuple[Callable[[], Any], str]] = [
        (lambda: store.Producer(5), "path must be a store directory (a str or os.PathLike), not int"),   # type: ignore[arg-type]
        (lambda: store.Producer(path).send_many("T", 5), "bodies must be a list (or another iterable) "   # type: ignore[arg-type]
                                                           "of message bodies, not int"),
        (lambda: store.Producer(path).send(None, b"x"), "a topic name must be a str, not NoneType"),   # type: ignore[arg-type]
        (lambda: store.Consumer(5, "g", path), "a topic name must be a str, not int"),   # type: ignore[arg-type]
        (lambda: store.Consumer("T", 5, path), "a group name must be a str, not int"),   # type: ignore[arg-type]
        (lambda: store.Consumer("T", "g", path, tags=5), "tags must be an expression"),   # type: ignore[arg-type]
        (lambda: store.Consumer("T", "g", path, tags=["a", 5]), "tags must be an expression"),   # type: ignore[list-item]
        (lambda: store.Consumer("T", "g", path, client_id=5), "a client id must be a str, not int"),   # type: ignore[arg-type]
    ]
    for call, said in cases:
        with pytest.raises(store.UsageError, match="^" + said.replace("(", r"\(").replace(")", r"\)")):
            call()
    with store.Consumer("T", "g", path, tags=iter(["a", "b"])) as c:   # (any iterable of str)
        assert c.client_id


@pytest.mark.parametrize("to", [None, "OUT"])
def test_a_bad_flush_is_refused_with_or_without_to(path: str, to: str | None) -> None:
    """``run(flush="x")`` without ``to`` was accepted (the value applied to no stage), and
    ``messages(flush="x")`` too; the async consumer's the same."""
    said = "flush must be 'async' or 'sync', not 'x'"
    with store.Consumer("T", "g", path, start_from="first") as c:
        with pytest.raises(store.UsageError, match=said):
            c.run(lambda m: None, exit_at_end=True, to=to, flush="x")
    with store.Consumer("T", "g", path, start_from="first") as c:
        with pytest.raises(store.UsageError, match=said):
            c.messages(exit_at_end=True, to=to, flush="x")

    async def run() -> None:
        async with store.AsyncConsumer("T", "g", path, start_from="first") as ac:
            with pytest.raises(store.UsageError, match=said):
                await ac.run(lambda m: None, exit_at_end=True, to=to, flush="x")
        async with store.AsyncConsumer("T", "g", path, start_from="first") as ac:
            with pytest.raises(store.UsageError, match=said):
                ac.messages(exit_at_end=True, to=to, flush="x")
    asyncio.run(run())


def test_the_library_names_its_own_parameters_and_the_cli_its_flags(mq: MQ, path: str, tmp_path: Path) -> None:
    """One message each, in the caller's spelling (``arg_names``): a Python program reads
    ``sharding_key``, ``to=TOPIC``, ``commitlog_segment_size``, never ``-s``/``-q``,
    ``--to``, ``--segment-size``, which ``mqctl`` keeps."""
    mq.ok("topic", "create", "O", "--queues", "2", "--order")
    python_said = r"topic 'O' is ordered: give a sharding key \(sharding_key\) or a queue \(queue\)"
    with store.Producer(path) as p, store.TransactionProducer(path) as tp:
        for send in (lambda: p.send("O", b"x"), lambda: p.send_many("O", [b"x", b"y"]),
                     lambda: p.send_bodies("O", [b"x"]), lambda: tp.send("O", b"x")):
            with pytest.raises(store.UsageError, match=f"^{python_said}$"):
                send()
    for args in (["send", "O", "x"], ["tx", "send", "O", "x"]):
        res = mq.run(*args)
        assert res.returncode == 2 and "give a sharding key (--sharding-key) or a queue (--queue)" in res.stderr, res
    for kw, said in (({"broadcast": True}, "to=TOPIC needs a clustering group"),
                     ({"dedup": True}, "dedup is not used with to=TOPIC")):
        with store.Consumer("T", "g", path, **kw) as c:
            with pytest.raises(store.UsageError, match=f"^{said}"):
                c.run(lambda m: None, to="OUT", exit_at_end=True)
    res = mq.run("consume", "T", "-g", "g", "--to", "OUT", "--broadcast")
    assert res.returncode == 2 and "--to needs a clustering group" in res.stderr, res
    with pytest.raises(store.UsageError, match=r"^the segment size \(commitlog_segment_size\) must be"):
        store.create_store(str(tmp_path / "s"), store.StoreSettings(commitlog_segment_size=1000))
    res = mq.run("--store", str(tmp_path / "s"), "init", "--segment-size", "1000")
    assert res.returncode == 2 and r"the segment size (--segment-size) must be" in res.stderr, res
    assert not (tmp_path / "s").exists()



def test_a_topic_not_created_on_send_is_said_to_python_without_cli_advice(tmp_path: Path) -> None:
    """A store that does not create topics on send tells a Python program so, and that it is
    its ``auto_create_topics`` setting, never ``mqctl init --no-auto-create`` or
    ``MQCTL_AUTO_CREATE=0`` (a variable the library never reads); ``mqctl`` says its own
    remedy, as before."""
    root = str(tmp_path / "strict")
    store.create_store(root, store.StoreSettings(auto_create_topics=False))
    said = (r"^topic 'nosuch' does not exist, and topics are not created on send here "
            r"\(auto_create_topics is off\): create it first$")
    with store.Producer(root) as p:
        with pytest.raises(store.TopicNotFoundError, match=said) as info:
            p.send("nosuch", b"x")
    assert info.value.topic == "nosuch"
    store.Admin(root).create_topic("T", 1)
    with store.Consumer("T", "g", root) as c:
        with pytest.raises(store.TopicNotFoundError, match=said.replace("nosuch", "OUT")):
            c.run(lambda m: None, to="OUT", exit_at_end=True)
    mq = MQ(tmp_path / "strict", tmp_path)
    cli = ("mqctl: error: topic 'nosuch' does not exist, and topics are not created on send here "
           "(mqctl init --no-auto-create or MQCTL_AUTO_CREATE=0); create it with: mqctl topic create nosuch")
    res = mq.run("send", "nosuch", "x")
    assert res.returncode == 3 and res.stderr.splitlines() == [cli], res
    res = mq.run("consume", "T", "-g", "g", "--to", "nosuch", "--exit-at-end")
    assert res.returncode == 3 and res.stderr.splitlines() == [cli], res


_TAG_LISTS: list[tuple[Any, str]] = [
    ([], "tags [] names no tag: give '*' for every message, or the tags to select"),
    (["A", ""], "tags ['A', '']: an empty tag (''); a list names one tag an item"),
    ([" "], "tags [' ']: an empty tag (' '); a list names one tag an item"),
    (["A||B"], "tags ['A||B']: 'A||B' is an expression, not a tag; a list names one tag an item "
               "(['A', 'B']), or give the expression as a str"),
    (("A", "B | C"), "tags ['A', 'B | C']: 'B | C' is not a tag: a message has one tag, and a tag may "
                     "not contain '|' (consumers select several with 'A || B')"),
    (["A,B"], "tags ['A,B']: 'A,B' is not a tag: a tag may not contain ','"),
    (["A*"], "tags ['A*']: 'A*' is not a tag: a tag may not contain '*'"),
    (["*", "A&&B"], "tags ['*', 'A&&B']: 'A&&B' is not a tag: a tag may not contain '&'"),
]


@pytest.mark.parametrize("tags,said", _TAG_LISTS, ids=[repr(t) for t, _ in _TAG_LISTS])
def test_a_list_of_tags_is_checked_as_an_expression_is(mq: MQ, path: str, tags: Any, said: str) -> None:
    """``tags=["A", ""]`` or ``tags=["A||B"]`` skipped the expression's checks: an empty list (or
    one of blanks) subscribed to every message, ``"A||B"`` was one literal tag that matched
    nothing. Each item is one tag, checked as a tag sent is; the consumer joins nothing."""
    for make in (store.Consumer, store.AsyncConsumer):
        with pytest.raises(store.UsageError) as err:
            make("T", "g", path, tags=tags)
        assert str(err.value) == said
    assert mq.members("g") == []
    mq.ok("send", "T", "--tag", "A", input="a\n")
    with store.Consumer("T", "g", path, start_from="first", tags=[" A ", "B"]) as c:   # (spaces dropped)
        assert [m.text for m in c.messages(exit_at_end=True)] == ["a"]
    with store.Consumer("T", "g2", path, start_from="first", tags=("C", "*")) as c:   # ("*": every message)
        assert [m.text for m in c.messages(exit_at_end=True)] == ["a"]


def test_a_python_stage_may_not_write_to_the_topic_it_consumes(mq: MQ) -> None:
    """``mqctl consume A --to A`` is refused (exit 2), but ``Consumer.run(..., to="A")``, a
    ``messages(to="A")`` stage and ``AsyncConsumer.run(..., to="A")`` wrote their outputs into
    their own input, for ever without ``exit_at_end``. The same rule, named in Python's spelling."""
    import asyncio
    path = str(mq.root)
    mq.ok("send", "A", "x")
    with store.Consumer("A", "g", path, start_from="first") as c:
        with pytest.raises(store.UsageError, match=r"^to=TOPIC must name another topic than the one consumed"):
            c.run(lambda m: b"again", to="A", exit_at_end=True)
    with store.Consumer("A", "g", path, start_from="first") as c:
        with pytest.raises(store.UsageError, match=r"^to=TOPIC must name another topic"):
            next(iter(c.messages(exit_at_end=True, to="A")))

    async def aio() -> None:
        async with store.AsyncConsumer("A", "g", path, start_from="first") as ac:
            await ac.run(lambda m: b"again", to="A", exit_at_end=True)

    with pytest.raises(store.UsageError, match=r"^to=TOPIC must name another topic"):
        asyncio.run(aio())
    assert sum(r["messages"] for r in mq.ok("topic", "status", "A", "--json").json_lines()) == 1   # nothing written
    res = mq.run("consume", "A", "-g", "g", "--to", "A")
    assert res.returncode == 2 and "--to must name another topic than the one consumed" in res.stderr, res


def test_the_engine_refuses_a_bad_batch_with_a_usage_error_not_a_value_error(tmp_path: Path) -> None:
    """``store.Store`` is public: its refusals are ``StoreError``s (exit 2 to the CLI), never a
    bare ``ValueError``, and nothing is stored."""
    from store.log.sendone import put_one
    with store.Store.open(tmp_path / "s", create=True) as s:
        s.create_topic("T", 2)
        with pytest.raises(store.UsageError, match=r"^put_bodies: one sharding key \(or None\) per body: 1 keys for 2"):
            s.put_bodies("T", [b"a", b"b"], sharding_keys=["k"])
        with pytest.raises(store.UsageError, match="^put_one: the unique key is the store's"):
            put_one(s, "T", b"a", {"UNIQ_KEY": "0" * 32})
        assert [s.max_offset("T", q) for q in (0, 1)] == [0, 0]
