"""What the store knows of one message: its envelope plus its history (copies under the same
unique key in retry/DLQ topics, transaction state, which groups consumed past it)."""
from __future__ import annotations

from typing import Any

from store.client.envelope import envelope
from store.log.broker import Store
from store.log.record import Message


def message_report(store: Store, m: Message) -> dict[str, Any]:
    from store.client.offsets import ClusterOffsetStore
    from store.names import DLQ_PREFIX, RETRY_PREFIX, SCHEDULE_TOPIC
    obj = envelope(m)
    obj["sysFlag"] = m.sysflag
    history = []
    if m.uniq_key:
        for c in store.find_all(m.uniq_key):
            if c.commitlog_offset == m.commitlog_offset:
                continue
            kind = ("retry" if c.topic.startswith(RETRY_PREFIX) else "dead-letter" if c.topic.startswith(DLQ_PREFIX)
                    else "delayed" if c.topic == SCHEDULE_TOPIC else "copy")
            history.append({"event": kind, "topic": c.topic, "queueId": c.queue_id, "queueOffset": c.queue_offset,
                            "reconsumeTimes": c.reconsume_times, "storeTimestamp": c.store_timestamp,
                            "offsetMsgId": c.msg_id})
    obj["history"] = history
    offsets = ClusterOffsetStore(store.layout)
    consumed = []
    for group in offsets.groups():
        off = offsets.read(group, m.topic, m.queue_id)
        if off >= 0:
            consumed.append({"group": group, "consumed": off > m.queue_offset, "offset": off})
    obj["consumerGroups"] = consumed
    from store.tx.transaction import transaction_state
    state = transaction_state(store, m)
    if state is not None:
        obj["transaction"] = state
    return obj
