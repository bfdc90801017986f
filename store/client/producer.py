"""The producer: :class:`Producer` sends messages to a store, one or a batch per call; its
batch calls (:meth:`Producer.send_bodies`, :meth:`Producer.send_drafts`) are what ``mqctl
send`` drives, with group commit (``store/client/groupcommit.py``) for ``flush="sync"``."""
from __future__ import annotations

from store import names
from store.client.handle import StoreClient
from store.client.paths import PathLike, resolve_store_path
from store.client.properties import build_properties, check_msg_id
from store.client.rules import check_flush, spelling
from store.errors import UsageError

# (framing, writebatch: what a send runs, loaded with the class, so a program's ``from store
# import Producer`` pays for the write path there, not in its first send; the store's own
# module leaves them to the first write, for readers)
from store.log import framing, writebatch  # noqa: F401
from store.log.messagestore import Store

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    import datetime as _dt
    from threading import RLock
    from typing import Any, Callable, Iterable, Mapping, Sequence, TypeAlias, TypeVar

    from store.client.groupcommit import GroupCommit
    from store.client.rules import ArgNames
    from store.client.sendresult import SendResult
    from store.log.record import Draft
    from store.log.results import BatchResult
    from store.log.topics import TopicConfig

    _R = TypeVar("_R")

Body = bytes | bytearray | memoryview | str
# datetime and the result classes are imported when used: ``mqctl send``'s start-up needs neither
Delay: TypeAlias = "int | _dt.timedelta"


def body_bytes(body: Body) -> bytes:
    """A body given as bytes (or a bytes-like object) or as text (encoded as UTF-8)."""
    if isinstance(body, str):
        try:
            return body.encode("utf-8")
        except UnicodeEncodeError as exc:   # (a lone surrogate: os.fsdecode of bytes that were not UTF-8)
            raise UsageError(f"a message body given as str must be text UTF-8 can encode: {exc.reason} at "
                             f"position {exc.start} (give binary data as bytes)") from None
    if isinstance(body, (bytes, bytearray, memoryview)):
        return bytes(body)
    raise UsageError(f"a message body must be bytes or str, not {type(body).__name__}")


def body_list(bodies: Iterable[Body]) -> list[bytes]:
    """``bodies`` as a list of bytes. A list of bytes (the common case) is used as it is: no
    per-body step. A single body (a str or bytes, itself iterable) is refused, not split
    into one message per character or byte."""
    if isinstance(bodies, (str, bytes, bytearray, memoryview)):
        raise UsageError(f"bodies must be a list (or another iterable) of message bodies, not a single "
                         f"{type(bodies).__name__}: send_many(topic, [body])")
    if type(bodies) is list:
        data: list[Any] = bodies
    else:
        try:
            data = list(bodies)
        except TypeError:   # (not iterable: a number, None)
            raise UsageError(f"bodies must be a list (or another iterable) of message bodies, not "
                             f"{type(bodies).__name__}") from None
    if set(map(type, data)) <= {bytes}:
        return data   # every element checked to be bytes
    return [body_bytes(b) for b in data]


def check_route(store: Store, topic: str, queue: int | None, sharding_key: str | None,
                arg_names: ArgNames | None = None) -> None:
    """:func:`route_check` against ``topic``'s configuration, if it exists yet."""
    cfg = store.find_topic(topic)
    if cfg is not None:
        route_check(cfg, queue, sharding_key, arg_names)


def route_check(cfg: TopicConfig, queue: int | None, sharding_key: str | None,
                arg_names: ArgNames | None = None) -> None:
    """Refuse a message that cannot be routed in ``cfg``: a queue it does not have, or no
    sharding key nor queue on an ordered topic (named in the caller's spelling, ``arg_names``)."""
    if queue is not None and queue >= cfg.queues:
        raise UsageError(f"queue {queue} does not exist: topic {cfg.name!r} has queues 0-{cfg.queues - 1}")
    if cfg.order and queue is None and not sharding_key:   # (an empty key is no key)
        said = spelling(arg_names)
        raise cfg.unrouted(said["sharding_key"], said["queue"])


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
    import datetime as _dt

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


def msg_id_list(msg_ids: Sequence[str | None], n: int) -> list[str | None]:
    """``msg_ids``, one per message (None: a new id), each checked (:func:`store.check_msg_id`)."""
    ids = list(msg_ids)
    if len(ids) != n:
        raise UsageError(f"msg_ids: one id (or None) per message: {len(ids)} ids for {n} messages")
    return [None if m is None else check_msg_id(m, "msg_ids[%d]" % i) for i, m in enumerate(ids)]


class Producer(StoreClient):
    """Sends messages to a store, as ``mqctl send`` does.

    ``path`` is the store directory; ``None`` selects ``$MQCTL_STORE``, else
    ``~/.mqctl/store``. The store is created if it does not exist, and so is a topic on its
    first send (unless the store was made with ``mqctl init --no-auto-create``).

    ``flush``: ``"async"`` (a returned result means the message survives a crash of this
    process: it is in the page cache) or ``"sync"`` (it was also fsynced: it survives a crash
    of the machine).

    ``group_commit=True`` (with ``flush="sync"``): a batch call returns once the batch is
    written, and its ``on_durable`` callback runs once an fsync running in the background
    covers it (later, in this thread: during a later send, :meth:`settle` or :meth:`close`).
    One fsync then covers every batch written while the previous one ran, as RocketMQ's
    GroupCommitService: a producer that keeps writing pays far fewer fsyncs than batches.

    Use it as a context manager, or call :meth:`close`::

        with store.Producer() as producer:
            r = producer.send("orders", b"payload", tags="paid", keys=["order-7"])
            print(r.msg_id, r.queue_id, r.queue_offset)

    A producer is not thread-safe: give each thread its own (they may share one store). One
    with ``group_commit`` refuses a call made while another thread's is under way
    (``UsageError``, before anything is written).
    """

    _what = "this producer"

    def __init__(self, path: PathLike | None = None, *, flush: str = "async", group_commit: bool = False) -> None:
        self._setup(flush, group_commit)
        self.path = resolve_store_path(path)
        self._owned = True
        self._store: Store | None = Store.open(self.path, create=True)

    @classmethod
    def of(cls, store: Store, *, flush: str = "async", group_commit: bool = False,
           arg_names: ArgNames | None = None) -> Producer:
        """A producer over an open :class:`store.Store` handle, which :meth:`close` leaves
        open (``mqctl send`` shares its handle this way)."""
        producer = cls.__new__(cls)
        producer._setup(flush, group_commit)
        producer.path, producer._owned, producer._store = store.root, False, store
        producer.arg_names = arg_names   # (how its errors name arguments: the CLI's flags)
        return producer

    def _setup(self, flush: str, group_commit: bool) -> None:
        check_flush(flush)
        if not isinstance(group_commit, bool):
            raise UsageError(f"group_commit must be True or False, not {group_commit!r}")
        if group_commit and flush != "sync":
            raise UsageError("group_commit applies to flush='sync'")
        self.flush = flush
        self.group_commit = group_commit
        self.arg_names: ArgNames | None = None
        self._commits: GroupCommit | None = None
        # (group commit: held by the call under way, whose thread alone may re-enter it, from an
        # on_durable callback; a call from another thread meanwhile is refused, not run beside
        # it: the group's fsync hand-over is one thread's. Without group commit, no cost)
        self._busy: RLock | None = None
        if group_commit:
            from threading import RLock
            self._busy = RLock()
        self._checked_topic = ""   # the topic name ``send`` last found valid (a str's own)

    # -- sending ---------------------------------------------------------------------------
    def send(self, topic: str, body: Body, tags: str | None = None,
             keys: str | Sequence[str] | None = None, sharding_key: str | None = None,
             queue: int | None = None, properties: Mapping[str, str] | None = None,
             delay: Delay | None = None, msg_id: str | None = None) -> SendResult:
        """Send one message and return where it was stored.

        ``body``: bytes, or str (encoded as UTF-8). ``tags``: one tag, what consumers filter
        on. ``keys``: business keys for ``mqctl msg query`` (a str or a list; no spaces).
        ``sharding_key``: messages with the same key go to the same queue
        (``|javaHash(key)| mod queues``); ``queue``: an explicit queue id instead. An ordered
        topic needs one of the two (``UsageError`` otherwise). ``properties``: user
        properties (not the store's reserved names). ``delay``: a delay level 1-18 (1s 5s 10s
        30s 1m 2m ... 2h) or a :class:`datetime.timedelta`. ``msg_id``: the message's unique
        id when it repeats one sent before (a resend, a copy of a consumed message: its
        ``msg_id``), so that ``--dedup`` consumers skip the copy; 32 hex digits, else
        ``BadInputError`` (:func:`store.check_msg_id`). Without it (the rule) each send gets
        a new id.

        Raises ``TopicNotFoundError`` when the topic does not exist and the store does not
        create topics on send, ``MessageTooLargeError`` for a body over the store's limit.
        """
        if delay is not None or self.group_commit:
            return self.send_many(topic, [body], tags=tags, keys=keys, sharding_key=sharding_key,
                                  queue=queue, properties=properties, delay=delay,
                                  msg_ids=None if msg_id is None else [msg_id])[0]
        uniq = None if msg_id is None else check_msg_id(msg_id)
        # One message: framed on its own (``sendone.py``), not as a batch of one.
        store = self._open_store()
        if type(topic) is not str or topic != self._checked_topic:   # (a steady sender's topic: checked once)
            self._checked_topic = names.validate_topic(topic)
        check_route_args(sharding_key, queue)
        data = body if type(body) is bytes else body_bytes(body)
        if tags is None and keys is None and properties is None and sharding_key is None:
            props: dict[str, str] = {}
        else:
            from store.log.record import PROP_SHARDING_KEY
            props = build_properties(tags=tags, keys=keys, properties=properties, sharding_key=sharding_key)
            props.pop(PROP_SHARDING_KEY, None)   # (an argument of put_one: its place is fixed)
        from store.client.sendresult import send_result
        from store.log.sendone import put_one
        r = put_one(store, topic, data, props, -1 if queue is None else queue, sharding_key,
                    sync=self.flush == "sync", check=lambda cfg: self._route_check(cfg, queue, sharding_key),
                    uniq=uniq)
        return send_result(topic, r.uniq_key, r.queue_id, r.queue_offset, r.commitlog_offset, r.store_timestamp)

    def send_many(self, topic: str, bodies: Iterable[Body], tags: str | None = None,
                  keys: str | Sequence[str] | None = None, sharding_key: str | None = None,
                  queue: int | None = None, properties: Mapping[str, str] | None = None,
                  delay: Delay | None = None,
                  msg_ids: Sequence[str | None] | None = None) -> list[SendResult]:
        """Send several messages sharing the other arguments as one batch: one write under
        one lock, all or nothing (across a ``kill -9`` or a power cut too: the next opener cuts
        a batch whose write was cut short). Returns one result per body, in order. ``msg_ids``: one
        per body, each a resent message's id or None (a new one), as ``send``'s ``msg_id``."""
        store = self._open_store()
        names.validate_topic(topic)
        check_route_args(sharding_key, queue)
        data = body_list(bodies)
        ids = None if msg_ids is None else msg_id_list(msg_ids, len(data))
        if not data:
            return []
        if len(data) == 1 and delay is None and not self.group_commit:
            return [self.send(topic, data[0], tags=tags, keys=keys, sharding_key=sharding_key, queue=queue,
                              properties=properties, msg_id=None if ids is None else ids[0])]
        if tags is None and keys is None and properties is None and sharding_key is None:
            props: dict[str, str] = {}   # (nothing to check: a plain send's few microseconds)
        else:
            props = build_properties(tags=tags, keys=keys, properties=properties, sharding_key=sharding_key)
        deliver = delay_spec(delay)
        self._check_route(store, topic, queue, sharding_key)
        if deliver is None and ids is None:
            # the raw-body framing of ``mqctl send`` (Store.put_bodies): one pass over the
            # bodies, properties shared, the sharding key per body
            from store.log.record import PROP_SHARDING_KEY
            shared = {k: v for k, v in props.items() if k != PROP_SHARDING_KEY}
            from store.client.sendresult import send_results
            res = self.send_bodies(topic, data, properties=shared, queue=queue,
                                   sharding_keys=None if sharding_key is None else [sharding_key] * len(data))
            return send_results(topic, res.uniq_keys, res.queue_ids, res.queue_offsets, res.commitlog_offsets,
                                 res.store_timestamp)
        from store.log.record import Draft
        return self.send_drafts([Draft(topic, b, dict(props), -1 if queue is None else queue, sharding_key)
                                 for b in data], delay=delay, msg_ids=ids)

    # -- batches as ``mqctl send`` writes them ---------------------------------------------
    def send_bodies(self, topic: str, bodies: Sequence[bytes | bytearray | memoryview], *,
                    properties: dict[str, str] | None = None, queue: int | None = None,
                    sharding_keys: list[str | None] | None = None,
                    on_durable: Callable[[BatchResult], None] | None = None) -> BatchResult:
        """Send raw bodies to ``topic`` as one batch (one write under one lock, all or
        nothing), sharing ``properties`` as :func:`store.build_properties` makes them; the
        fastest way to send many messages. ``sharding_keys`` gives each body its own key
        (``None`` entries go to ``queue``, else round robin). Returns the results as columns
        (:class:`store.BatchResult`: ``queue_ids``, ``queue_offsets``, ``uniq_keys``, ...).

        ``on_durable(result)`` runs once the batch is as durable as ``flush`` promises: at
        once, or with ``group_commit`` once a background fsync covers it. Checks nothing
        that :meth:`send_many` checks beyond the store's own limits (size, topic)."""
        store = self._open_store()
        if queue is None and sharding_keys is None:   # (refused by the write too, in its own words)
            self._check_route(store, topic, None, None)
        busy = self._take()
        try:
            res = store.put_bodies(topic, bodies, properties=properties, queue_id=-1 if queue is None else queue,
                                   sharding_keys=sharding_keys, sync=self.flush == "sync" and not self.group_commit)
            self._acknowledge(res, on_durable)
        finally:
            if busy is not None:
                busy.release()
        return res

    def send_drafts(self, drafts: list[Draft], *, delay: Delay | None = None,
                    on_durable: Callable[[list[SendResult]], None] | None = None,
                    msg_ids: Sequence[str | None] | None = None) -> list[SendResult]:
        """Send :class:`store.Draft` records (each with its own topic, properties, queue or
        sharding key) as one batch; ``delay`` parks every one of them until due. Returns one
        result per draft; ``on_durable`` as for :meth:`send_bodies`. ``msg_ids``: one per
        draft, a resent message's id or None, as ``send``'s ``msg_id``."""
        store = self._open_store()
        if msg_ids is not None:
            from dataclasses import replace

            from store.log.record import PROP_UNIQ_KEY
            # (the unique key first, where the write puts one it makes; the id given wins)
            drafts = [d if uniq is None else replace(d, properties={
                          PROP_UNIQ_KEY: uniq, **{k: v for k, v in d.properties.items() if k != PROP_UNIQ_KEY}})
                      for d, uniq in zip(drafts, msg_id_list(msg_ids, len(drafts)))]
        deliver = delay_spec(delay)
        if deliver is not None:
            from store.log.schedule import delay_draft
            drafts = [delay_draft(d, deliver, store) for d in drafts]
        busy = self._take()
        try:
            results = store.put(drafts, sync=self.flush == "sync" and not self.group_commit)
            out = self._draft_results(drafts, results)
            self._acknowledge(out, on_durable)
        finally:
            if busy is not None:
                busy.release()
        return out

    @staticmethod
    def _draft_results(drafts: list[Draft], results: list[Any]) -> list[SendResult]:
        from store.client.sendresult import SendResult

        # A parked message reports the topic and queue it will be delivered to (chosen when it
        # was parked), no queue offset (it has none until then) and when it is due.
        from store.log.record import PROP_DELIVER_MS, PROP_REAL_QID, PROP_REAL_TOPIC
        out = []
        for d, r in zip(drafts, results):
            parked = PROP_REAL_QID in d.properties
            out.append(SendResult(
                msg_id=r.uniq_key, topic=d.properties[PROP_REAL_TOPIC] if parked else d.topic,
                queue_id=int(d.properties[PROP_REAL_QID]) if parked else r.queue_id,
                queue_offset=None if parked else r.queue_offset,
                offset_msg_id=r.msg_id, commitlog_offset=r.commitlog_offset, store_timestamp=r.store_timestamp,
                deliver_timestamp=int(d.properties[PROP_DELIVER_MS]) if parked else None))
        return out

    def settle(self) -> None:
        """With ``group_commit``: make every batch sent durable now and run its
        ``on_durable`` (a no-op otherwise)."""
        if self._commits is not None:
            busy = self._take()
            try:
                self._commits.settle()
            finally:
                if busy is not None:
                    busy.release()

    def _take(self) -> RLock | None:
        """(Group commit.) The producer for this call, or UsageError while another thread's
        call is under way."""
        busy = self._busy
        if busy is not None and not busy.acquire(False):
            raise UsageError("this producer (group_commit=True) is in use by another thread: a producer is not "
                             "thread-safe; give each thread its own (they may share one store), or send without "
                             "group_commit (flush='async', or flush='sync' fsyncing each call)")
        return busy

    def _acknowledge(self, result: _R, on_durable: Callable[[_R], None] | None) -> None:
        if not self.group_commit:
            if on_durable is not None:
                on_durable(result)
            return
        if self._commits is None:
            from store.client.groupcommit import GroupCommit
            self._commits = GroupCommit(self._open_store())
        self._commits.written((lambda: on_durable(result)) if on_durable is not None else _nothing)

    def _check_route(self, store: Store, topic: str, queue: int | None, sharding_key: str | None) -> None:
        check_route(store, topic, queue, sharding_key, self.arg_names)

    def _route_check(self, cfg: TopicConfig, queue: int | None, sharding_key: str | None) -> None:
        route_check(cfg, queue, sharding_key, self.arg_names)

    # -- lifecycle -------------------------------------------------------------------------
    def close(self) -> None:
        """Make what was sent durable (``group_commit``: run the pending ``on_durable``
        callbacks), then release the store handle (idempotent)."""
        busy = self._take() if self._commits is not None else None
        commits, self._commits = self._commits, None
        try:
            if commits is not None:
                commits.close()
        finally:
            if busy is not None:
                busy.release()
            if self._owned:
                super().close()
            else:
                self._store = None

    def __repr__(self) -> str:
        return f"Producer(path={str(self.path)!r}, flush={self.flush!r}{', closed' if self._store is None else ''})"


def _nothing() -> None:
    pass
