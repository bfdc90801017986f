"""mqctl's store: a RocketMQ-style message queue in a directory, and its Python client.

A Python program is a client like ``mqctl``, side by side with it on the same store::

    import store

    with store.Producer() as producer:                       # $MQCTL_STORE or ~/.mqctl/store
        r = producer.send("orders", b"hello", tags="paid", keys=["order-7"])

    with store.Consumer("orders", group="billing", start_from="first") as consumer:
        for msg in consumer.messages(exit_at_end=True):    # at-least-once
            print(msg.msg_id, msg.text)

``Producer``, ``Consumer`` (iterator and push styles, concurrent and orderly, clustering and
broadcast), ``TransactionProducer`` with ``TxState``, their asyncio twins ``AsyncProducer``,
``AsyncConsumer`` and ``AsyncTransactionProducer``, ``Admin`` (topics, lag, offsets, locks,
members), ``Monitor`` and ``History`` (repeated read-only looks, rates), ``Message`` and
``SendResult`` live in ``store/client/``; the errors, all
``StoreError`` subclasses, in ``store/errors.py``. The engine underneath (``Store``,
``Draft``) is usable on its own::

    from store import Store, Draft
    with Store.open("~/.mqctl/store", create=True) as s:
        s.put([Draft(topic="orders", body=b"hello")])

What else a program (and ``mqctl``, which imports nothing else of ``store``) finds here:

* ``Admin`` also checks, recovers, measures and cleans the whole store (``check``,
  ``recover``, ``stats``, ``plan_clean``, ``clean``, ``sweep_staging``) and handles
  transactions by id (``prepare_transaction``, ``transactions``, ``end_transaction``,
  ``check_transactions``); its results: ``CheckReport``, ``RecoveryReport``, ``CleanPlan``,
  ``FileAction``, ``StagingDir``, ``PendingTransaction``, ``TransactionEnd``, ...
* ``Producer.send_bodies`` / ``send_drafts``: whole batches as ``mqctl send`` writes them,
  with ``Producer(flush="sync", group_commit=True)`` acknowledging through ``on_durable``
  once a background fsync covers a batch.
* Names: ``validate_topic``, ``validate_any_topic``, ``validate_consumable_topic``, ``validate_group``,
  ``validate_client_id``, ``parse_tag_expression``, ``is_system_topic``, ``topic_kind``.
* Times as the command line writes them: ``parse_time``, ``parse_duration``, ``parse_delay``,
  ``format_time``, ``format_local``, ``format_age``.
* Messages: ``build_properties``, ``properties_room`` / ``check_properties_room`` (what
  still fits a record), ``Prop`` (the store's property names), ``envelope`` (the
  ``consume --json`` object), ``message_report`` / ``message_timeline`` (``msg show``),
  ``StoredMessage`` (a record as the engine returns it), ``offset_msg_id``, ``check_msg_id``
  (a unique id a resend keeps: ``Producer.send(msg_id=...)``).
* The consumer runtime for programs that bring their own sink, as ``mqctl consume`` does:
  ``ConsumerRuntime``, ``ConsumeOptions``, ``check_consume_options``, ``check_stage``, ``Outcome``.
* ``create_store`` and ``resolve_store_path``: making and finding a store.
* ``keep_big_buffers``: the allocator told to keep the memory of big batch buffers (bulk I/O).

Names are resolved lazily, so ``import store`` is cheap and a small module (``store.errors``)
does not pay for the engine (``__init__.pyi`` tells type checkers what each name is). A name
loads what using it needs: ``from store import Producer`` the store and its write path,
``Consumer`` the store and its reads, so a program's first open pays for neither.

The modules on the paths of ``mqctl send``, of ``mqctl consume`` (the consumer runtime) and of
a ``Producer`` never import ``typing`` (~3 ms of every such process, for names only
annotations use): they set ``TYPE_CHECKING = False`` themselves, which type checkers read as
``typing.TYPE_CHECKING``, and import ``typing``'s names under it; a protocol is for type
checkers only (``store.client.sinks.is_pool_sink`` tells a pool sink by its members).
tests/cli/test_startup.py checks that a send and a consume load no ``typing``.
Likewise each method ``@dataclass`` generates is compiled as its class is made (~0.1 ms
each): a record on those paths that is never compared nor printed is made with
``@dataclass(eq=False, repr=False)`` (identity equality, the default ``repr``).
"""
from __future__ import annotations

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Any


_EXPORTS = {
    # the Python client (store/client/)
    "Producer": "client.producer", "Consumer": "client.consumer",
    "AsyncProducer": "client.aio_producer", "AsyncConsumer": "client.aio_consumer",
    "AsyncTransactionProducer": "tx.aio_producer", "TransactionProducer": "tx.producer", "TxState": "tx.producer",
    "TransactionSendResult": "tx.producer", "Admin": "client.admin",
    "Message": "client.message", "SendResult": "client.sendresult",
    # live inspection (``mqctl top``): one look, and rates from successive looks
    "Monitor": "client.monitor", "History": "client.trends", "Drain": "client.trends",
    "sparkline": "client.trends", "format_duration": "client.trends",
    "Snapshot": "client.snapshot", "TopicStat": "client.snapshot", "GroupStat": "client.snapshot",
    "QueueLag": "client.snapshot", "MemberStat": "client.snapshot", "LockStat": "client.snapshot",
    "Problems": "client.snapshot", "PendingTx": "client.snapshot",
    # what Admin's methods return (store/client/admin.py, maintenance.py, txadmin.py)
    "LockRow": "client.admin_rows", "MemberRow": "client.admin_rows", "ResetPlan": "client.admin_rows",
    "CheckReport": "log.check", "RecoveryReport": "log.recovery", "CleanPlan": "log.retention",
    "FileAction": "log.retention", "StagingDir": "spark.staging", "StoreCreation": "client.creation",
    "PendingTransaction": "tx.check", "TransactionCheckEvent": "tx.check",
    "TransactionCheckReport": "tx.check", "TransactionEnd": "tx.transaction",
    "PreparedTransaction": "tx.transaction",
    # creating and finding a store
    "create_store": "client.creation", "resolve_store_path": "client.paths", "keep_big_buffers": "buffers",
    # names: topics, groups, client ids, tag expressions (store/names.py)
    "validate_topic": "names", "validate_any_topic": "names", "validate_consumable_topic": "names",
    "validate_group": "names", "validate_client_id": "names", "is_system_topic": "names",
    "parse_tag_expression": "names", "topic_kind": "names",
    # times and durations as the command line writes them (store/timeparse.py)
    "parse_time": "timeparse", "parse_duration": "timeparse", "format_time": "timeparse",
    "format_local": "timeparse", "format_age": "timeparse", "DURATION_HELP": "timeparse",
    "time_note": "timeparse",
    "parse_delay": "log.schedule",
    # a message's properties and JSON form
    "build_properties": "client.properties", "properties_room": "client.properties",
    "check_properties_room": "client.properties",
    "envelope": "client.envelope", "Prop": "client.propnames",
    "offset_msg_id": "log.record", "has_property_separator": "log.record",
    "check_msg_id": "client.properties",
    "message_report": "client.history", "message_timeline": "client.history",
    # the consume runtime that ``mqctl consume`` drives with its own sinks (store/client/runtime.py)
    "ConsumeOptions": "client.options", "ConsumerRuntime": "client.runtime",
    "Outcome": "client.sinks", "default_broadcast_client_id": "client.options",
    "check_consume_options": "client.rules", "check_stage": "client.stage",
    # the engine
    "Store": "log.messagestore", "open_store": "log.messagestore", "StoreSettings": "log.settings",
    "LARGEST_MESSAGE_SIZE": "log.settings", "MAX_SEGMENT_SIZE": "log.settings", "MAX_QUEUES": "log.format",
    "PutResult": "log.results", "PullResult": "log.results", "BatchResult": "log.results", "Draft": "log.record",
    "StoredMessage": "log.record",
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
    mod, _, attr = mod.partition(":")   # "module:name" when the public name differs
    value = getattr(importlib.import_module(f".{mod}", __name__), attr or name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
