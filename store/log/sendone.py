"""One message on its own: the put behind ``Producer.send`` (and ``send_many`` of one body).

A batch of one framed by ``framing.py`` pays for what a batch shares (header parts, key
tables, counter digits, per-queue runs and result columns) to use it once: with the API's
route checks outside the lock, about 14 of the 54 µs of CPU a send took besides its
``fdatasync`` (a 100-byte body, measured). Here the record is
encoded by ``record.encode`` into a :class:`~store.log.writebatch.WriteBatch`, which places
and commits it as every batch (the same checks, order, undo and checkpoint): the same bytes
as ``framing.py`` writes for that body (tests/log/test_sendone.py), with the properties in
its order (unique key, sharding key, then the shared ones).
"""
from __future__ import annotations

from store.errors import UsageError
from store.log import format as F
from store.log.record import (
    PROP_KEYS,
    PROP_SHARDING_KEY,
    PROP_TAGS,
    PROP_UNIQ_KEY,
    check_properties_size,
    encode,
    encode_properties,
    record_size,
    tags_code,
)
from store.log.results import PutResult
from store.log.writebatch import WriteBatch

_NV, _PS = F.NAME_VALUE_SEP, F.PROPERTY_SEP

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Callable

    from store.log.messagestore import Store
    from store.log.topics import TopicConfig


def put_one(store: Store, topic: str, body: bytes, props: dict[str, str], queue_id: int = -1,
            sharding_key: str | None = None, *, sync: bool = False,
            check: Callable[[TopicConfig], None] | None = None, uniq: str | None = None) -> PutResult:
    """Store one message for ``topic`` (as :meth:`Store.put_bodies` stores a batch of one
    with these ``properties`` and sharding key). ``check`` is given the topic's config under
    the write lock before anything is placed (the caller's own refusals: a queue the topic
    lacks, an ordered topic without a key). ``uniq``: the unique key, when the sender gives
    one (checked by the caller: ``store.check_msg_id``, which stores it upper case); else a new one."""
    if PROP_UNIQ_KEY in props or PROP_SHARDING_KEY in props:
        raise UsageError("put_one: the unique key is the store's, the sharding key an argument")
    store.check_bodies(len(body), props, () if sharding_key is None else (sharding_key,))
    engine = store.engine
    writer = engine.writer
    with engine.write_lock:
        batch = WriteBatch(engine, sync)
        cfg = batch.topic(topic, queue_id)
        if check is not None:
            check(cfg)
        qid = writer.queue_for(cfg, queue_id, sharding_key)
        now = batch.now
        if uniq is None:
            uniq = writer.uniq_keys.next(now)
        head = f"{PROP_UNIQ_KEY}{_NV}{uniq}{_PS}"
        if sharding_key is not None:
            head += f"{PROP_SHARDING_KEY}{_NV}{sharding_key}{_PS}"
        props_b = head.encode() + encode_properties(props) if props else head.encode()
        topic_b = topic.encode()
        check_properties_size(len(props_b))
        size = record_size(len(body), len(topic_b), len(props_b))
        phys = batch.app.place(size)
        qoff = batch.add_entry(topic, qid, phys, size, tags_code(props.get(PROP_TAGS)))
        batch.app.add(encode(topic_b, body, props_b, qid, qoff, phys, batch.store_ts, now, writer.pid))
        batch.index_message(topic, uniq, props.get(PROP_KEYS), phys)
        batch.commit()
    if engine.hints.flush_due:
        engine.durability.flush_in_background()
    return PutResult(topic, qid, qoff, phys, uniq, batch.store_ts)
