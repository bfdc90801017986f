"""Failed messages: RocketMQ's send-back to ``%RETRY%GROUP`` with delay levels, and the
dead-letter queue ``%DLQ%GROUP`` after the maximum number of reconsumes.

Concurrent consumption: a message that failed its ``reconsumeTimes``-th delivery is parked
in the schedule topic for delay level ``3 + reconsumeTimes`` (10 s, 30 s, 1 m, …, 2 h), then
appears in the group's retry topic with ``reconsumeTimes + 1``; once ``reconsumeTimes`` reaches
the maximum (16) it goes to the DLQ instead. Orderly consumption retries in place and sends a
message straight to the DLQ when its local retries reach the maximum (``--max-reconsume``,
``max_reconsume``). The copy keeps
the unique key, tags and keys, so ``msg show`` finds its whole history.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from store import names
from store.log.record import (
    PROP_DLQ_ORIGIN_MESSAGE_ID,
    PROP_DLQ_ORIGIN_TOPIC,
    PROP_ORIGIN_MESSAGE_ID,
    PROP_RETRY_TOPIC,
    Draft,
    Message,
)
from store.log.schedule import LEVEL_MS, delay_draft

if TYPE_CHECKING:
    from store.log.broker import Store

DEFAULT_MAX_RECONSUME = 16


def original_topic(m: Message) -> str:
    """The topic a retry-topic message was first sent to (RocketMQ renames it back)."""
    return m.properties.get(PROP_RETRY_TOPIC, m.topic) if names.is_retry_topic(m.topic) else m.topic


def _copy_properties(m: Message) -> dict[str, str]:
    props = dict(m.properties)
    props.setdefault(PROP_RETRY_TOPIC, original_topic(m))
    props.setdefault(PROP_ORIGIN_MESSAGE_ID, m.msg_id)
    return props


def dead_letter(store: "Store", group: str, m: Message, reconsume_times: int) -> None:
    """Store a copy of ``m`` in the group's dead-letter topic (queue 0)."""
    props = _copy_properties(m)
    props[PROP_DLQ_ORIGIN_TOPIC] = original_topic(m)
    props[PROP_DLQ_ORIGIN_MESSAGE_ID] = m.msg_id
    store.put([Draft(topic=names.dlq_topic(group), body=m.body, properties=props, queue_id=0,
                     flag=m.flag, born_timestamp=m.born_timestamp, reconsume_times=reconsume_times)])


def send_back(store: "Store", group: str, m: Message, max_reconsume: int,
              retry_delay_ms: int | None = None) -> str:
    """Retry later or dead-letter; returns ``"retry"`` or ``"dlq"``."""
    if m.reconsume_times >= max_reconsume:
        dead_letter(store, group, m, m.reconsume_times)
        return "dlq"
    level = min(3 + m.reconsume_times, len(LEVEL_MS))
    delay = (0, retry_delay_ms) if retry_delay_ms is not None else (level, LEVEL_MS[level - 1])
    draft = Draft(topic=names.retry_topic(group), body=m.body, properties=_copy_properties(m),
                  queue_id=0, flag=m.flag, born_timestamp=m.born_timestamp,
                  reconsume_times=m.reconsume_times + 1)
    store.put([delay_draft(draft, delay, store)])
    return "retry"
