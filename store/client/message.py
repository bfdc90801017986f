"""What a client consumer sees: :class:`Message` (a delivered message), and a pull's
:class:`MessageRows`. (A send's result is :mod:`store.client.sendresult`'s.)"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, overload

from store.log import record


class _Lazy:
    """The raw properties of a message built from a pull's columns (see :class:`MessageRows`):
    its ``msg_id``, ``tags``, ``keys``, ``properties`` and ``offset_msg_id`` are parsed from
    them the first time one is read. Most consumers read a few fields of each message, and
    parsing the properties was most of the cost of building one."""

    __slots__ = ("_raw",)

    _raw: bytes


class Properties(dict[str, str]):
    """A delivered message's user properties: a ``dict`` (as the API promises: ``json.dumps``,
    ``dict(...)``, ``isinstance`` work) that refuses changes, so the message stays what was
    stored for everyone who reads it (``TypeError``, as a ``MappingProxyType`` says). Copy it
    (``dict(msg.properties)``) to change it."""

    __slots__ = ()

    def _refuse(self, *_args: Any, **_kwargs: Any) -> Any:
        raise TypeError("a message's properties are read-only (copy them: dict(msg.properties))")

    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if self or self is _NO_PROPERTIES:   # (filled once, as made: never by an __init__ again)
            self._refuse()
        dict.__init__(self, *args, **kwargs)

    def __reduce__(self) -> tuple[Any, ...]:   # (pickled as built, not item by item)
        return (Properties, (dict(self),))


_NO_PROPERTIES: Properties = dict.__new__(Properties)   # (shared: most messages have none)


# What a message's stored properties give its client view, in :func:`_client_view`'s order.
_LAZY_ORDER = ("offset_msg_id", "msg_id", "tags", "keys", "properties")
_LAZY_FIELDS = frozenset(_LAZY_ORDER)


def _client_view(props: dict[str, str],
                 commitlog_offset: int) -> tuple[str, str, str | None, list[str], dict[str, str]]:
    """``offset_msg_id``, ``msg_id``, ``tags``, ``keys`` and the user ``properties`` of a
    message stored at ``commitlog_offset`` with the properties ``props``."""
    offset_id = record.offset_msg_id(commitlog_offset)
    raw_keys = props.get(record.PROP_KEYS)
    reserved = record.RESERVED_PROPERTIES
    user = {k: v for k, v in props.items() if k not in reserved}
    return (offset_id, props.get(record.PROP_UNIQ_KEY) or offset_id, props.get(record.PROP_TAGS),
            [k for k in raw_keys.split(" ") if k] if raw_keys else [],
            Properties(user) if user else _NO_PROPERTIES)


@dataclass(frozen=True, slots=True)
class Message(_Lazy):
    """A message as a consumer receives it (immutable).

    ``msg_id`` is the id ``mqctl consume --json`` prints as ``msgId``: the producer's unique
    key, or the offset id (``offset_msg_id``) for a message that has none. A message
    redelivered through the group's retry topic shows the topic it was sent to, the retry
    topic's queue and offset, and ``reconsume_times`` > 0. Timestamps are ms since the epoch.
    """

    topic: str
    queue_id: int
    queue_offset: int
    msg_id: str
    body: bytes
    tags: str | None = None
    keys: list[str] = field(default_factory=list, hash=False)
    properties: dict[str, str] = field(default_factory=dict, hash=False)   # (a read-only Properties)
    reconsume_times: int = 0
    born_timestamp: int = 0
    store_timestamp: int = 0
    offset_msg_id: str = ""
    commitlog_offset: int = 0

    def __post_init__(self) -> None:   # (one made by hand; the consumer's are built read-only)
        if type(self.properties) is not Properties:
            object.__setattr__(self, "properties", Properties(self.properties) if self.properties else _NO_PROPERTIES)

    def __getattr__(self, name: str) -> Any:
        # Reached only for an unset slot: a message built by MessageRows whose properties
        # were not parsed yet.
        if name not in _LAZY_FIELDS:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        raw: bytes = object.__getattribute__(self, "_raw")
        props = record.parse_properties(raw.decode("utf-8", "replace"))
        setattr_ = object.__setattr__
        for key, value in zip(_LAZY_ORDER, _client_view(props, self.commitlog_offset)):
            setattr_(self, key, value)
        return object.__getattribute__(self, name)

    @property
    def text(self) -> str:
        """The body decoded as UTF-8 (``UnicodeDecodeError`` if it is not UTF-8)."""
        return self.body.decode("utf-8")

    @classmethod
    def from_record(cls, m: record.Message, topic: str | None = None) -> Message:
        """The client view of a stored record; ``topic`` overrides the record's (a retry-topic
        copy is shown under the topic it was first sent to)."""
        obj: Any = object.__new__(_Building)   # its fields are Message's (the shared slots)
        obj.topic = m.topic if topic is None else topic
        obj.queue_id, obj.queue_offset, obj.body = m.queue_id, m.queue_offset, m.body
        view = _client_view(m.properties, m.commitlog_offset)
        obj.offset_msg_id, obj.msg_id, obj.tags, obj.keys, obj.properties = view
        obj.reconsume_times, obj.born_timestamp = m.reconsume_times, m.born_timestamp
        obj.store_timestamp, obj.commitlog_offset = m.store_timestamp, m.commitlog_offset
        obj.__class__ = Message
        result: Message = obj
        return result

    def __repr__(self) -> str:
        body = self.body if len(self.body) <= 40 else self.body[:40] + b"..."
        return (f"Message(topic={self.topic!r}, queue_id={self.queue_id}, queue_offset={self.queue_offset}, "
                f"msg_id={self.msg_id!r}, tags={self.tags!r}, keys={self.keys!r}, body={body!r}, "
                f"reconsume_times={self.reconsume_times})")


class _Building(_Lazy):
    """A :class:`Message` being filled in. Setting the slots of a frozen dataclass goes
    through ``object.__setattr__``, a call per field; this class has the very same slots
    (so CPython lets an instance's ``__class__`` be switched to :class:`Message`) and plain
    attribute stores: building a message this way costs a third as much."""

    __slots__ = Message.__slots__


class MessageRows:
    """Messages of one queue as a pull's parallel columns (:func:`store.log.columns.pull_records`):
    a sequence of :class:`Message` whose each element is built when it is read, and built
    again if it is read again.

    The consumer caches and hands out batches in this form: a message is made only as the
    iterator gives it or just before the handler is called with it, and the loop's previous
    one is usually gone by then. Built all at once from a pull, a thousand messages per queue
    would live through several garbage collections, and every collection of the older
    generations walked them again: that cost more than building them."""

    __slots__ = ("topic", "queue_id", "offsets", "bodies", "born", "stored", "phys", "reconsume", "props")

    def __init__(self, topic: str, queue_id: int, offsets: list[int], bodies: list[bytes], born: list[int],
                 stored: list[int], phys: list[int], reconsume: list[int], props: list[bytes]) -> None:
        self.topic, self.queue_id = topic, queue_id
        self.offsets, self.bodies, self.born, self.stored = offsets, bodies, born, stored
        self.phys, self.reconsume, self.props = phys, reconsume, props

    def __len__(self) -> int:
        return len(self.offsets)

    def __iter__(self) -> Iterator[Message]:
        return self.walk(iter(range(len(self.offsets))))

    @overload
    def __getitem__(self, i: int) -> Message: ...

    @overload
    def __getitem__(self, i: slice) -> MessageRows: ...

    def __getitem__(self, i: int | slice) -> Message | MessageRows:
        if isinstance(i, slice):
            return MessageRows(self.topic, self.queue_id, self.offsets[i], self.bodies[i], self.born[i],
                               self.stored[i], self.phys[i], self.reconsume[i], self.props[i])
        return next(self.walk(iter((range(len(self.offsets))[i],))))

    def __add__(self, other: MessageRows) -> MessageRows:
        """The rows of both (of the same queue)."""
        return MessageRows(self.topic, self.queue_id, self.offsets + other.offsets, self.bodies + other.bodies,
                           self.born + other.born, self.stored + other.stored, self.phys + other.phys,
                           self.reconsume + other.reconsume, self.props + other.props)

    def walk(self, positions: Iterator[int]) -> Iterator[Message]:
        """The messages at the indexes ``positions`` gives, each built when asked for (the
        iterator of a ``range`` lets a caller tell how far a walk got by what it has left)."""
        topic, queue_id = self.topic, self.queue_id
        offsets, bodies, born, stored = self.offsets, self.bodies, self.born, self.stored
        phys, reconsume, props = self.phys, self.reconsume, self.props
        new = object.__new__
        building, message = _Building, Message
        for i in positions:
            m: Any = new(building)   # its fields are Message's (the shared slots)
            m.topic = topic
            m.queue_id = queue_id
            m.queue_offset = offsets[i]
            m.body = bodies[i]
            m.born_timestamp = born[i]
            m.store_timestamp = stored[i]
            m.commitlog_offset = phys[i]
            m.reconsume_times = reconsume[i]
            m._raw = props[i]
            m.__class__ = message
            yield m
