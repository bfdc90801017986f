"""What the store knows of one message: its envelope plus its history (copies under the same
unique key in retry/DLQ topics, transaction state, which groups consumed past it)."""
from __future__ import annotations

from typing import Any

from store.client.envelope import envelope
from store.log.messagestore import Store
from store.log.record import Message


def message_report(store: Store, m: Message) -> dict[str, Any]:
    """What ``mqctl msg show --json`` prints about the stored message ``m``: its envelope, its
    system flag, its ``history`` (:func:`message_timeline`, every event ``msg show`` lists, this copy
    marked ``this``), the groups' offsets in its queue and its transaction's state."""
    obj = envelope(m)
    obj["sysFlag"] = m.sysflag
    # a message of a topic deleted since (maybe made anew): its record stays in the log until
    # retention, but no queue holds it; the groups' offsets there are the new topic's
    obj["deleted"] = deleted = not store.topic_holds(m)
    obj["history"] = message_timeline(store, m)
    offsets = store.offsets
    consumed = []
    for group in offsets.groups() if not deleted else ():
        off = offsets.read(group, m.topic, m.queue_id)
        if off >= 0:
            consumed.append({"group": group, "consumed": off > m.queue_offset, "offset": off})
    obj["consumerGroups"] = consumed
    from store.tx.transaction import transaction_state
    state = transaction_state(store, m)
    if state is not None:
        obj["transaction"] = state
    return obj


def message_timeline(store: Store, m: Message, limit: int = 256) -> list[dict[str, Any]]:
    """What happened to ``m``, oldest first, for ``msg show``: every stored copy under its
    unique key (``event``: ``sent``, ``delivered`` after a delay, ``committed`` by a
    transaction, ``scheduled`` in the schedule topic, ``retry``, ``resent`` from the DLQ,
    ``dead-lettered``, transaction ``half`` and ``discarded`` copies) with its store time, the
    transaction's ``commit``/``rollback``/``discard`` records, and after each copy a group can
    consume, one ``consumed`` event per group (and broadcast client) with an offset in its
    queue: ``consumed`` true when the offset is past it. The store does not record when a
    group consumed, so those events have ``time`` None. ``this`` marks ``m`` itself."""
    from store.client.groups import group_offsets, known_groups
    from store.log import format as F
    from store.log.record import PROP_CHECK_TIMES, PROP_DELIVER_MS, PROP_REAL_TOPIC, PROP_TRANSACTION_ID
    from store.names import CHECK_MAX_TOPIC, DLQ_PREFIX, HALF_TOPIC, OP_HALF_TOPIC, RETRY_PREFIX, SCHEDULE_TOPIC
    from store.tx.transaction import PROP_TX_OP, tx_id_of
    copies = store.find_all(m.uniq_key, limit=limit) if m.uniq_key else []
    if all(c.commitlog_offset != m.commitlog_offset for c in copies):
        copies = sorted([*copies, m], key=lambda c: c.commitlog_offset)
    offsets: dict[tuple[str, int], list[tuple[str, str | None, int]]] = {}
    for group in known_groups(store):
        for s in group_offsets(store, group):
            for (t, q), off in s.offsets.items():
                offsets.setdefault((t, q), []).append((group, s.client_id, off))
    events: list[dict[str, Any]] = []
    scheduled_for: set[str] = set()
    for c in copies:
        ev: dict[str, Any] = {"event": "", "time": c.store_timestamp, "topic": c.topic, "queueId": c.queue_id,
                              "queueOffset": c.queue_offset, "reconsumeTimes": c.reconsume_times,
                              "offsetMsgId": c.msg_id, "this": c.commitlog_offset == m.commitlog_offset}
        consumable = True
        if not store.topic_holds(c):
            ev["deleted"], consumable = True, False   # (deleted with its topic: no queue holds it)
        if c.topic == SCHEDULE_TOPIC:
            real = c.properties.get(PROP_REAL_TOPIC, "")
            due = c.properties.get(PROP_DELIVER_MS, "")
            ev.update(event="scheduled", realTopic=real, deliverAt=int(due) if due.isdigit() else None)
            scheduled_for.add(real)
            consumable = False
        elif c.topic.startswith(RETRY_PREFIX):
            ev["event"] = "retry" if c.reconsume_times > 0 else "resent"
        elif c.topic.startswith(DLQ_PREFIX):
            ev["event"], consumable = "dead-lettered", False
        elif c.topic == HALF_TOPIC:
            ev.update(event="half", realTopic=c.properties.get(PROP_REAL_TOPIC, ""),
                      checkTimes=int(c.properties.get(PROP_CHECK_TIMES, "0") or 0))
            consumable = False
        elif c.topic == CHECK_MAX_TOPIC:
            ev.update(event="discarded", checkTimes=int(c.properties.get(PROP_CHECK_TIMES, "0") or 0))
            consumable = False
        elif (c.sysflag & F.TX_MASK) == F.TX_COMMIT:
            ev["event"] = "committed"
        else:
            ev["event"] = "delivered" if c.topic in scheduled_for else "sent"
        events.append(ev)
        if consumable:
            for group, client, off in sorted(offsets.get((c.topic, c.queue_id), []), key=lambda x: (x[0], x[1] or "")):
                events.append({"event": "consumed", "time": None, "group": group, "clientId": client,
                               "offset": off, "consumed": off > c.queue_offset, "topic": c.topic,
                               "queueId": c.queue_id, "queueOffset": c.queue_offset})
    tx_id = tx_id_of(m)
    if tx_id:
        shown = {e["event"] for e in events}
        for op in store.query_key(OP_HALF_TOPIC, tx_id, limit):
            kind = op.properties.get(PROP_TX_OP, "").lower()
            if (op.properties.get(PROP_TRANSACTION_ID) == tx_id and kind in ("commit", "rollback", "discard")
                    and {"commit": "committed", "discard": "discarded"}.get(kind) not in shown):
                events.append({"event": kind, "time": op.store_timestamp, "txId": tx_id,
                               "offsetMsgId": op.msg_id, "this": False})
    return _merge_dated(events)


def _merge_dated(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Sort by time, keeping each undated (``consumed``) event right after the copy before it."""
    blocks: list[list[dict[str, Any]]] = []
    for e in events:
        if e["time"] is None and blocks:
            blocks[-1].append(e)
        else:
            blocks.append([e])
    blocks.sort(key=lambda b: b[0]["time"] if b[0]["time"] is not None else 0)
    return [e for b in blocks for e in b]
