"""What the arguments of a consumer (:class:`store.Consumer`, :class:`store.AsyncConsumer`)
mean: where a queue starts, the tag subscription, a push consumer's retries and batches, and
the default client ids of this process's members."""
from __future__ import annotations

import datetime as _dt
import os
import threading
from typing import Callable, Iterable, Union

from store import names
from store.client.message import Message
from store.client.rules import check_consume_options
from store.client.runtime import ConsumerRuntime
from store.errors import UsageError

StartFrom = Union[str, int, _dt.datetime]
Handler = Callable[[Message], object]

RUN_BATCH = 1000         # run(): most messages per hand-over to a handler thread (a backlog: a
                         # queue's whole cache, so its next pull is a whole one too)
RUN_BATCH_S = 0.05       # run(): and no more than the handler calls in this long (as measured)

ids_lock = threading.Lock()
ids_in_use: set[tuple[str, str, str]] = set()   # (store, group, client id) of this process


def default_client_id(root: str, group: str) -> str:
    """``HOST@PID`` as ``mqctl consume`` uses, made unique among this process's consumers of
    the same group (``HOST@PID#2``, ...)."""
    base = f"{os.uname().nodename}@{os.getpid()}"
    with ids_lock:
        n = 1
        while True:
            cid = base if n == 1 else f"{base}#{n}"
            if (root, group, cid) not in ids_in_use:
                return cid
            n += 1


def start_position(start_from: StartFrom) -> tuple[str, int | None]:
    if isinstance(start_from, str):
        start_from = {"earliest": "first", "latest": "last"}.get(start_from, start_from)
        if start_from in ("first", "last"):
            return start_from, None
        raise UsageError(f"start_from must be 'first', 'last', a datetime or ms since the epoch, "
                         f"not {start_from!r}")
    if isinstance(start_from, _dt.datetime):
        return "timestamp", int(start_from.timestamp() * 1000)
    if isinstance(start_from, int) and not isinstance(start_from, bool) and start_from >= 0:
        return "timestamp", start_from
    raise UsageError(f"start_from must be 'first', 'last', a datetime or ms since the epoch, not {start_from!r}")


def tag_filter(tags: str | Iterable[str] | None) -> frozenset[str] | None:
    """A consumer's ``tags``: an expression (``"*"``, ``"A || B"``), or a list (or any other
    iterable but a str) of tags, one tag an item (``["A", "B"]`` is ``"A || B"``; ``"*"`` among
    them: every message). Each item follows the expression's rules for one tag (spaces around
    it dropped; no ``|``, ``&``, ``,`` or ``*`` in it); an empty item, an item that is an
    expression (``"A || B"``) and an empty list are UsageErrors, not "every message"."""
    if tags is None or isinstance(tags, str):
        return names.parse_tag_expression(tags)
    given = list(tags) if isinstance(tags, Iterable) and not isinstance(tags, (bytes, bytearray)) else None
    if given is None or not all(isinstance(t, str) for t in given):
        raise UsageError(f"tags must be an expression (a str, '*' or 'A || B') or a list of str, not {tags!r}")
    if not given:
        raise UsageError("tags [] names no tag: give '*' for every message, or the tags to select")
    out: set[str] = set()
    for tag in given:
        if not tag.strip():
            raise UsageError(f"tags {given!r}: an empty tag ({tag!r}); a list names one tag an item")
        tag = tag.strip()
        if tag == "*":
            out.add(tag)   # (every message: the others checked all the same)
            continue
        if "||" in tag:
            raise UsageError(f"tags {given!r}: {tag!r} is an expression, not a tag; a list names one tag "
                             f"an item ({[t.strip() for t in tag.split('||')]!r}), or give the expression "
                             f"as a str")
        why = names.tag_problem(tag)
        if why is not None:
            raise UsageError(f"tags {given!r}: {tag!r} is not a tag: {why}")
        out.add(tag)
    return None if "*" in out else frozenset(out)


def set_retries(rt: ConsumerRuntime, *, orderly: bool, broadcast: bool, max_reconsume: int | None,
                retry_delay: float | _dt.timedelta | None) -> None:
    """A push consumer's failure handling (``run``, sync and async): ``max_reconsume`` retries
    before the DLQ; ``retry_delay`` the retry topic's delay, or orderly the pause before a
    retry in place (the CLI's --suspend-ms)."""
    if max_reconsume is not None and (isinstance(max_reconsume, bool) or not isinstance(max_reconsume, int)
                                      or max_reconsume < 0):
        raise UsageError(f"max_reconsume must be an int >= 0, not {max_reconsume!r}")
    check_consume_options(broadcast=broadcast, orderly=orderly, max_reconsume=max_reconsume,
                          retry_delay=None if orderly else retry_delay, suspend=retry_delay if orderly else None)
    delay_ms = seconds_ms("retry_delay", retry_delay)
    if orderly:
        rt.retrier.set_retries(max_reconsume, None, max(10, delay_ms) if delay_ms is not None else 1000)
    else:
        rt.retrier.set_retries(max_reconsume, delay_ms, 1000)


def seconds_ms(what: str, value: float | _dt.timedelta | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, _dt.timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise UsageError(f"{what} must be a number of seconds >= 0 or a timedelta, not {value!r}")
    return int(round(value * 1000))


def run_batch_size(per_call_s: float) -> int:
    """The most messages per batch for a handler that took ``per_call_s`` a message: a backlog
    in batches saves hand-overs to threads, but a batch's offsets are committed only once all
    of it is through (a crash hands all of it to the group again): it should not take long."""
    if per_call_s * RUN_BATCH <= RUN_BATCH_S:
        return RUN_BATCH
    return max(1, int(RUN_BATCH_S / per_call_s))
