"""An argument of the wrong type is the store's error (python-api.md: "Errors are the store's
exception hierarchy"), a ``store.UsageError`` naming the argument, never a bare ``TypeError``
from deep inside, and never a silently wider filter (``tags=b"A"`` iterated as ints, each
dropped: every message)."""
from __future__ import annotations

import asyncio
from typing import Any

import pytest

import store
from tests.procs import MQ  # noqa: F401  (mq is a fixture)


@pytest.mark.parametrize("kwargs", [
    {"keys": 5}, {"keys": b"order-7"}, {"keys": [5]},
    {"properties": 5}, {"properties": [5]}, {"properties": "source=web"},
])
def test_a_send_argument_of_the_wrong_type_is_a_usage_error(mq: MQ, kwargs: dict[str, Any]) -> None:
    with store.Producer(str(mq.root)) as p:
        with pytest.raises(store.UsageError, match="keys|propert|key"):
            p.send("T", b"x", **kwargs)
        with pytest.raises(store.UsageError, match="keys|propert|key"):
            p.send_many("T", [b"x", b"y"], **kwargs)
    # nothing was sent, and the right types still go through
    with store.Producer(str(mq.root)) as p:
        p.send("T", b"ok", keys=("a", "b"), properties=["source=web"])
    with store.Consumer("T", "g", str(mq.root), start_from="first") as c:
        assert [(m.text, m.keys, m.properties) for m in c.messages(exit_at_end=True)] == \
            [("ok", ["a", "b"], {"source": "web"})]


def test_send_many_of_something_not_iterable_is_a_usage_error(mq: MQ) -> None:
    with store.Producer(str(mq.root)) as p:
        with pytest.raises(store.UsageError, match="bodies must be"):
            p.send_many("T", None)  # type: ignore[arg-type]
        with pytest.raises(store.UsageError, match="bodies must be"):
            p.send_many("T", 5)  # type: ignore[arg-type]
        assert len(p.send_many("T", (b"a" for _ in range(3)))) == 3


@pytest.mark.parametrize("kwargs", [{"tags": 5}, {"tags": b"A"}, {"tags": [5]}, {"client_id": 5},
                                    {"orderly": "yes"}, {"orderly": 1}, {"broadcast": "no"},
                                    {"dedup": None}])
def test_a_consumer_argument_of_the_wrong_type_is_a_usage_error(mq: MQ, kwargs: dict[str, Any]) -> None:
    with store.Producer(str(mq.root)) as p:
        p.send("T", b"x", tags="B")
    with pytest.raises(store.UsageError):
        store.Consumer("T", "g", str(mq.root), **kwargs)

    async def make() -> None:
        store.AsyncConsumer("T", "g", str(mq.root), **kwargs)
    with pytest.raises(store.UsageError):
        asyncio.run(make())
    # a list of tags still selects
    with store.Consumer("T", "g", str(mq.root), start_from="first", tags=["A", "B"]) as c:
        assert [m.text for m in c.messages(exit_at_end=True)] == ["x"]
