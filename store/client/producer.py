"""The producer: :class:`Producer` sends messages to a store, one or a batch per call."""
from __future__ import annotations

import datetime as _dt
from typing import TYPE_CHECKING, Iterable, Mapping, Sequence, Union

from store import names
from store.client.handle import StoreClient
from store.client.message import SendResult, send_results
from store.client.paths import PathLike, resolve_store_path
from store.client.properties import build_properties
from store.errors import UsageError

if TYPE_CHECKING:
    from store.log.broker import Store
    from store.log.record import Draft

Body = Union[bytes, bytearray, memoryview, str]
Delay = Union[int, _dt.timedelta]

def body_bytes(body: Body) -> bytes:
    """A body given as bytes (or a bytes-like object) or as text (encoded as UTF-8)."""
    if isinstance(body, str):
        return body.encode("utf-8")
    if isinstance(body, (bytes, bytearray, memoryview)):
        return bytes(body)
    raise UsageError(f"a message body must be bytes or str, not {type(body).__name__}")


def body_list(bodies: Iterable[Body]) -> list[bytes]:
    """``bodies`` as a list of bytes. A list of bytes (the common case) is used as it is: no
    per-body step."""
    data = bodies if type(bodies) is list else list(bodies)
    if set(map(type, data)) <= {bytes}:
        return data   # type: ignore[return-value]  # every element checked to be bytes
    return [body_bytes(b) for b in data]


def check_route_args(sharding_key: str | None, queue: int | None) -> None:
    """A message goes by its sharding key or to an explicit queue id, never both."""
    if sharding_key is not None and queue is not None:
        raise UsageError("give sharding_key or queue, not both")
    if queue is not None and (isinstance(queue, bool) or not isinstance(queue, int) or queue < 0):
        raise UsageError(f"queue must be a queue id (an int >= 0), not {queue!r}")


def delay_spec(delay: Delay | None) -> tuple[int, int] | None:
    """``delay`` as the store's ``(level, ms)``: a level 1-18 (1s 5s 10s 30s 1m ... 2h) or a
    :class:`datetime.timedelta`; None for no delay."""
    if delay is None:
        return None
    from store.log.schedule import LEVEL_MS
    if isinstance(delay, _dt.timedelta):
        ms = delay // _dt.timedelta(milliseconds=1)
        if ms < 0:
            raise UsageError(f"delay must not be negative, not {delay}")
        return (0, ms) if ms else None
    if isinstance(delay, bool) or not isinstance(delay, int):
        raise UsageError(f"delay must be a level 1-18 or a timedelta, not {delay!r}")
    if not 1 <= delay <= len(LEVEL_MS):
        raise UsageError(f"delay level must be 1-{len(LEVEL_MS)}, not {delay}")
    return delay, LEVEL_MS[delay - 1]


class Producer(StoreClient):
    """Sends messages to a store, as ``mqctl send`` does.

    ``path`` is the store directory; ``None`` selects ``$MQCTL_STORE``, else
    ``~/.mqctl/store``. The store is created if it does not exist, and so is a topic on its
    first send (unless the store was made with ``mqctl init --no-auto-create``).

    ``flush``: ``"async"`` (a returned result means the message survives a crash of this
    process: it is in the page cache) or ``"sync"`` (it was also fsynced: it survives a crash
    of the machine).

    Use it as a context manager, or call :meth:`close`::

        with store.Producer() as producer:
            r = producer.send("orders", b"payload", tags="paid", keys=["order-7"])
            print(r.msg_id, r.queue_id, r.queue_offset)

    A producer is not thread-safe: give each thread its own (they may share one store).
    """

    _what = "this producer"

    def __init__(self, path: PathLike | None = None, *, flush: str = "async") -> None:
        if flush not in ("async", "sync"):
            raise UsageError(f"flush must be 'async' or 'sync', not {flush!r}")
        from store.log.broker import Store
        self.path = resolve_store_path(path)
        self.flush = flush
        self._store: Store | None = Store.open(self.path, create=True)

    # -- sending ---------------------------------------------------------------------------
    def send(self, topic: str, body: Body, tags: str | None = None,
             keys: str | Sequence[str] | None = None, sharding_key: str | None = None,
             queue: int | None = None, properties: Mapping[str, str] | None = None,
             delay: Delay | None = None) -> SendResult:
        """Send one message and return where it was stored.

        ``body``: bytes, or str (encoded as UTF-8). ``tags``: one tag, what consumers filter
        on. ``keys``: business keys for ``mqctl msg query`` (a str or a list; no spaces).
        ``sharding_key``: messages with the same key go to the same queue
        (``|javaHash(key)| mod queues``); ``queue``: an explicit queue id instead. An ordered
        topic needs one of the two (``UsageError`` otherwise). ``properties``: user
        properties (not the store's reserved names). ``delay``: a delay level 1-18 (1s 5s 10s
        30s 1m 2m ... 2h) or a :class:`datetime.timedelta`.

        Raises ``TopicNotFoundError`` when the topic does not exist and the store does not
        create topics on send, ``MessageTooLargeError`` for a body over the store's limit.
        """
        return self.send_many(topic, [body], tags=tags, keys=keys, sharding_key=sharding_key,
                              queue=queue, properties=properties, delay=delay)[0]

    def send_many(self, topic: str, bodies: Iterable[Body], tags: str | None = None,
                  keys: str | Sequence[str] | None = None, sharding_key: str | None = None,
                  queue: int | None = None, properties: Mapping[str, str] | None = None,
                  delay: Delay | None = None) -> list[SendResult]:
        """Send several messages sharing the other arguments as one batch: one write under
        one lock, all or nothing. Returns one result per body, in order."""
        store = self._open_store()
        names.validate_topic(topic)
        check_route_args(sharding_key, queue)
        data = body_list(bodies)
        if not data:
            return []
        props = build_properties(tags=tags, keys=keys, properties=properties, sharding_key=sharding_key)
        deliver = delay_spec(delay)
        self._check_route(store, topic, queue, sharding_key)
        if deliver is None:
            # the raw-body framing of ``mqctl send`` (Store.put_bodies): one pass over the
            # bodies, properties shared, the sharding key per body
            from store.log.record import PROP_SHARDING_KEY
            shared = {k: v for k, v in props.items() if k != PROP_SHARDING_KEY}
            res = store.put_bodies(topic, data, properties=shared, queue_id=-1 if queue is None else queue,
                                   sharding_keys=None if sharding_key is None else [sharding_key] * len(data),
                                   sync=self.flush == "sync")
            return send_results(topic, res.uniq_keys, res.queue_ids, res.queue_offsets, res.commitlog_offsets,
                                 res.store_timestamp)
        from store.log.record import Draft
        drafts: list[Draft] = [Draft(topic, b, dict(props), -1 if queue is None else queue, sharding_key)
                               for b in data]
        if deliver is not None:
            from store.log.schedule import delay_draft
            drafts = [delay_draft(d, deliver, store) for d in drafts]
        results = store.put(drafts, sync=self.flush == "sync")
        # A parked message reports the topic and queue it will be delivered to (chosen when it
        # was parked), no queue offset (it has none until then) and when it is due.
        from store.log.record import PROP_DELIVER_MS, PROP_REAL_QID
        out = []
        for d, r in zip(drafts, results):
            parked = PROP_REAL_QID in d.properties
            out.append(SendResult(
                msg_id=r.uniq_key, topic=topic,
                queue_id=int(d.properties[PROP_REAL_QID]) if parked else r.queue_id,
                queue_offset=None if parked else r.queue_offset,
                offset_msg_id=r.msg_id, commitlog_offset=r.commitlog_offset, store_timestamp=r.store_timestamp,
                deliver_timestamp=int(d.properties[PROP_DELIVER_MS]) if parked else None))
        return out

    @staticmethod
    def _check_route(store: "Store", topic: str, queue: int | None, sharding_key: str | None) -> None:
        cfg = store.find_topic(topic)
        if cfg is None:
            return
        if queue is not None and queue >= cfg.queues:
            raise UsageError(f"queue {queue} does not exist: topic {topic!r} has queues 0-{cfg.queues - 1}")
        if cfg.order and queue is None and sharding_key is None:
            raise UsageError(f"topic {topic!r} is ordered: give a sharding_key or a queue")

    # -- lifecycle -------------------------------------------------------------------------
    def __repr__(self) -> str:
        return f"Producer(path={str(self.path)!r}, flush={self.flush!r}{', closed' if self._store is None else ''})"
