"""The JSON envelope of a message: what ``consume --json`` prints and ``send --input json``
reads back, so ``consume --json | send OTHER --input json`` copies a topic."""
from __future__ import annotations

import base64

from store.log.record import PROP_SHARDING_KEY, Message

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Any


def body_fields(body: bytes) -> dict[str, Any]:
    try:
        return {"body": body.decode("utf-8")}
    except UnicodeDecodeError:
        return {"body": base64.b64encode(body).decode("ascii"), "bodyEncoding": "base64"}


def envelope(m: Message) -> dict[str, Any]:
    out: dict[str, Any] = {
        "topic": m.topic,
        "queueId": m.queue_id,
        "queueOffset": m.queue_offset,
        "msgId": m.uniq_key or m.msg_id,
        "offsetMsgId": m.msg_id,
        "keys": m.keys,
        "tags": m.tags,
        "properties": m.user_properties,
    }
    skey = m.properties.get(PROP_SHARDING_KEY)
    if skey:
        out["shardingKey"] = skey   # so a copy (send --input json --reroute) keeps the routing
    out.update(body_fields(m.body))
    out.update({
        "bornTimestamp": m.born_timestamp,
        "storeTimestamp": m.store_timestamp,
        "reconsumeTimes": m.reconsume_times,
        "commitLogOffset": m.commitlog_offset,
        "bornHost": m.born_host,
    })
    return out
