"""mqctl's store: a RocketMQ-style message queue in a directory, and its Python client.

A Python program is a client like ``mqctl``, side by side with it on the same store::

    import store

    with store.Producer() as producer:                       # $MQCTL_STORE or ~/.mqctl/store
        r = producer.send("orders", b"hello", tags="paid", keys=["order-7"])

    with store.Consumer("orders", group="billing", start_from="first") as consumer:
        for msg in consumer.messages(exit_at_end=True):    # at-least-once
            print(msg.msg_id, msg.text)

``Producer``, ``Consumer`` (iterator and push styles, concurrent and orderly, clustering and
broadcast), ``TransactionProducer`` with ``TxState``, ``Admin`` (topics, lag, offsets, locks,
members), ``Monitor`` and ``History`` (repeated read-only looks, rates), ``Message`` and
``SendResult`` live in ``store/client/``; the errors, all
``StoreError`` subclasses, in ``store/errors.py``. The engine underneath (``Store``,
``Draft``) is usable on its own::

    from store import Store, Draft
    with Store.open("~/.mqctl/store", create=True) as s:
        s.put([Draft(topic="orders", body=b"hello")])

Names are resolved lazily, so ``import store`` is cheap and a small module (``store.errors``)
does not pay for the engine.
"""
from __future__ import annotations

from typing import Any

_EXPORTS = {
    # the Python client (store/client/)
    "Producer": "client.producer", "Consumer": "client.consumer",
    "TransactionProducer": "tx.producer", "TxState": "tx.producer",
    "TransactionSendResult": "tx.producer", "Admin": "client.admin",
    "Message": "client.message", "SendResult": "client.message",
    # live inspection (``mqctl top``): one look, and rates from successive looks
    "Monitor": "client.monitor", "History": "client.trends", "Drain": "client.trends",
    "sparkline": "client.trends", "format_duration": "client.trends",
    "Snapshot": "client.snapshot", "TopicStat": "client.snapshot", "GroupStat": "client.snapshot",
    "QueueLag": "client.snapshot", "MemberStat": "client.snapshot", "LockStat": "client.snapshot",
    "Problems": "client.snapshot", "PendingTx": "client.snapshot",
    # the engine
    "Store": "log.broker", "open_store": "log.broker", "StoreSettings": "log.settings",
    "PutResult": "log.results", "PullResult": "log.results", "BatchResult": "log.results", "Draft": "log.record",
}
# The error catalogue (store/errors.py): every class, so ``except store.TopicNotFoundError``.
_ERRORS = (
    "StoreError", "OperationError", "StoreIOError", "DamageFoundError", "HandlerError", "UsageError",
    "InvalidNameError", "InvalidPropertyError", "NotFoundError", "StoreNotFoundError", "TopicNotFoundError",
    "GroupNotFoundError", "MessageNotFoundError", "TransactionNotFoundError", "ConflictError",
    "TopicExistsError", "LockHeldError", "ClientIdInUseError", "TransactionStateError", "DataError",
    "CorruptionError", "MessageTooLargeError", "BadInputError",
)
_EXPORTS.update({name: "errors" for name in _ERRORS})

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module 'store' has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(f".{mod}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
