"""What a client producer sees: :class:`SendResult`, where a sent message was stored.

(Apart from :mod:`store.client.message`, which a consumer loads: a consumer builds no
result, and a dataclass costs each process that loads it a fraction of a millisecond.)"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import repeat

from store.log import record

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Any


@dataclass(frozen=True, slots=True)
class SendResult:
    """Where a sent message was stored: what a result line of ``mqctl send --json`` says.

    ``msg_id`` is the message's unique key (what consumers see as ``msg_id``),
    ``offset_msg_id`` its offset id. A delayed message, as ``mqctl send --delay`` reports
    it: ``queue_id`` is the queue it will be delivered to, ``queue_offset`` None (it has none
    until then), ``deliver_timestamp`` when it is due (ms), and ``commitlog_offset`` /
    ``offset_msg_id`` locate its waiting copy."""

    msg_id: str
    topic: str
    queue_id: int
    queue_offset: int | None
    offset_msg_id: str
    commitlog_offset: int
    store_timestamp: int = 0
    deliver_timestamp: int | None = None

    def __getattr__(self, name: str) -> Any:
        # Reached only for an unset slot: the offset id of a result from send_results(), a
        # function of its commit-log offset, formatted the first time it is read (most
        # senders never read it).
        if name != "offset_msg_id":
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        oid = record.offset_msg_id(self.commitlog_offset)
        object.__setattr__(self, "offset_msg_id", oid)
        return oid

    def to_json(self) -> dict[str, Any]:
        """The fields of a ``mqctl send --json`` line."""
        out = {"status": "SEND_OK", "msgId": self.msg_id, "offsetMsgId": self.offset_msg_id,
               "topic": self.topic, "queueId": self.queue_id, "queueOffset": self.queue_offset,
               "commitLogOffset": self.commitlog_offset}
        if self.deliver_timestamp is not None:
            out["deliverTimestamp"] = self.deliver_timestamp
        return out


class _SendResultFields:
    """A :class:`SendResult` being filled in: the very same slots (so CPython lets an
    instance's ``__class__`` be switched to :class:`SendResult`) and plain attribute stores. A
    frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``, a call per
    field: about 1 µs a result, more than framing a small message costs in a batch."""

    __slots__ = SendResult.__slots__


def send_result(topic: str, uniq_key: str, queue_id: int, queue_offset: int, commitlog_offset: int,
                store_timestamp: int) -> SendResult:
    """The :class:`SendResult` of a single send, made as :func:`send_results` makes each."""
    r: Any = object.__new__(_SendResultFields)
    r.msg_id = uniq_key
    r.topic = topic
    r.queue_id = queue_id
    r.queue_offset = queue_offset
    r.commitlog_offset = commitlog_offset   # offset_msg_id left unset: SendResult.__getattr__ derives it
    r.store_timestamp = store_timestamp
    r.deliver_timestamp = None
    r.__class__ = SendResult
    return r  # type: ignore[no-any-return]


def send_results(topic: str, uniq_keys: list[str], queue_ids: list[int], queue_offsets: list[int],
                 commitlog_offsets: list[int], store_timestamp: int) -> list[SendResult]:
    """One :class:`SendResult` per message of a batch written at ``store_timestamp``, from the
    batch's parallel lists (:class:`store.log.results.BatchResult`): the same objects
    ``SendResult(...)`` makes, at a sixth of the cost: each one's ``offset_msg_id`` is formatted
    when first read."""
    # its fields are SendResult's (the shared slots); every element is a SendResult at the end
    out: list[Any] = list(map(object.__new__, repeat(_SendResultFields, len(commitlog_offsets))))
    result = SendResult
    for r, uk, q, o, p in zip(out, uniq_keys, queue_ids, queue_offsets, commitlog_offsets):
        r.msg_id = uk
        r.topic = topic
        r.queue_id = q
        r.queue_offset = o
        r.commitlog_offset = p   # offset_msg_id left unset: SendResult.__getattr__ derives it
        r.store_timestamp = store_timestamp
        r.deliver_timestamp = None
        r.__class__ = result
    return out
