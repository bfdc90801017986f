"""What a client sees: :class:`Message` (a delivered message) and :class:`SendResult`."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from store.log import record


@dataclass(frozen=True)
class Message:
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
    properties: dict[str, str] = field(default_factory=dict, hash=False)
    reconsume_times: int = 0
    born_timestamp: int = 0
    store_timestamp: int = 0
    offset_msg_id: str = ""
    commitlog_offset: int = 0

    @property
    def text(self) -> str:
        """The body decoded as UTF-8 (``UnicodeDecodeError`` if it is not UTF-8)."""
        return self.body.decode("utf-8")

    @classmethod
    def from_record(cls, m: record.Message, topic: str | None = None) -> "Message":
        """The client view of a stored record; ``topic`` overrides the record's (a retry-topic
        copy is shown under the topic it was first sent to)."""
        # The consumer's per-message cost: properties parsed once, and the frozen dataclass's
        # __init__ (an object.__setattr__ per field) bypassed for the same fields.
        props = m.properties
        offset_id = record.offset_msg_id(m.commitlog_offset)
        raw_keys = props.get(record.PROP_KEYS)
        reserved = record.RESERVED_PROPERTIES
        obj = object.__new__(cls)
        obj.__dict__.update(
            topic=m.topic if topic is None else topic, queue_id=m.queue_id, queue_offset=m.queue_offset,
            msg_id=props.get(record.PROP_UNIQ_KEY) or offset_id, body=m.body, tags=props.get(record.PROP_TAGS),
            keys=[k for k in raw_keys.split(" ") if k] if raw_keys else [],
            properties={k: v for k, v in props.items() if k not in reserved},
            reconsume_times=m.reconsume_times, born_timestamp=m.born_timestamp,
            store_timestamp=m.store_timestamp, offset_msg_id=offset_id, commitlog_offset=m.commitlog_offset)
        return obj

    def __repr__(self) -> str:
        body = self.body if len(self.body) <= 40 else self.body[:40] + b"..."
        return (f"Message(topic={self.topic!r}, queue_id={self.queue_id}, queue_offset={self.queue_offset}, "
                f"msg_id={self.msg_id!r}, tags={self.tags!r}, keys={self.keys!r}, body={body!r}, "
                f"reconsume_times={self.reconsume_times})")


@dataclass(frozen=True)
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

    def to_json(self) -> dict[str, Any]:
        """The fields of a ``mqctl send --json`` line."""
        out = {"status": "SEND_OK", "msgId": self.msg_id, "offsetMsgId": self.offset_msg_id,
               "topic": self.topic, "queueId": self.queue_id, "queueOffset": self.queue_offset,
               "commitLogOffset": self.commitlog_offset}
        if self.deliver_timestamp is not None:
            out["deliverTimestamp"] = self.deliver_timestamp
        return out
