"""Inspection and administration: :class:`Admin`.

What ``mqctl topic list``, ``progress``, ``offsets show|reset|delete``, ``locks``, ``unlock``,
``consumers``, ``rebalance`` and ``dlq list|resend`` print is computed by it (dead letters in
``store/client/dlq.py``); the command line only parses its arguments and formats the rows
(``store/client/admin_rows.py``). Its parts, by job: the store handle
(``admin_base.py``), offsets and lag (``offsets_admin.py``), locks, members, rebalance
previews and dead letters (``members_admin.py``), topics and groups here; what a group is:
``groups.py``.
"""
from __future__ import annotations

import errno

from store import names
from store.client.admin_rows import QueueStatus, TopicInfo
from store.client.groups import known_groups
from store.client.maintenance import StoreMaintenance
from store.client.members_admin import MembersAdmin
from store.client.offsets_admin import OffsetsAdmin
from store.client.rules import check_flags
from store.client.txadmin import TransactionAdmin
from store.errors import StoreError, UsageError


class Admin(OffsetsAdmin, MembersAdmin, StoreMaintenance, TransactionAdmin):
    """Inspect and administer a store: topics, a group's lag, offsets, queue locks, members,
    rebalance previews and dead letters; the whole store's check, recovery, statistics and
    retention (:meth:`check`, :meth:`recover`, :meth:`stats`, :meth:`clean`); transactions
    by id (:meth:`transactions`, :meth:`end_transaction`, :meth:`check_transactions`).

    ::

        with store.Admin() as admin:
            admin.create_topic("orders", queues=8)
            for row in admin.lag("billing"):
                print(row.topic, row.queue_id, row.broker_offset, row.consumer_offset, row.lag)
            plan = admin.reset_offsets("billing", "orders", "earliest")     # a plan only
            admin.reset_offsets("billing", "orders", "earliest", execute=True)

    ``path=None`` selects ``$MQCTL_STORE``, else ``~/.mqctl/store``. The store must exist
    (``StoreNotFoundError``), except for :meth:`create_topic`, which creates it.
    Rows are frozen dataclasses (``row.lag``; ``row["lag"]`` and ``row.to_dict()`` work too).
    A group nobody knows raises ``GroupNotFoundError``; a missing topic
    ``TopicNotFoundError``.
    """

    # -- topics ------------------------------------------------------------------------------
    def topics(self, *, system: bool = False) -> list[TopicInfo]:
        """The topics, sorted by name, with their stored message counts. ``system``: include
        ``%RETRY%``, ``%DLQ%`` and ``RMQ_SYS_`` topics."""
        store = self.store
        self._deliver_due_delays()
        rows = []
        for name, cfg in sorted(store.topics().items()):
            if names.is_system_topic(name) and not system:
                continue
            rows.append(TopicInfo(name, cfg.queues, cfg.order, store.messages(name, cfg.queues)))
        return rows

    _delays_told = False   # (a failed delivery is said once per Admin, not at every look)

    def _deliver_due_delays(self) -> None:
        """Deliver the delayed messages that are due, as a broker would have by itself, so
        counts include them before any consumer ran. What stops that (damage in the way, a
        lock that is not a file) is said once per Admin and the counts are as stored; a store
        this process may not write to (permissions, a read-only file system) is counted as it
        is, silently: that is no fault of the store's."""
        from store.log.schedule import deliver_due
        try:
            deliver_due(self.store)
        except (StoreError, OSError) as exc:
            cause = exc if isinstance(exc, OSError) else exc.__cause__
            if isinstance(cause, OSError) and cause.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
                return
            if not self._delays_told:
                self._delays_told = True
                self.store.warn(f"delayed messages now due were not delivered ({exc}): "
                                f"counts leave them out until they are")

    def topic_status(self, topic: str) -> list[QueueStatus]:
        """Per queue of ``topic``: its offsets, message count and last store time
        (``TopicNotFoundError`` when there is no such topic)."""
        names.validate_any_topic(topic)
        store = self.store
        self._deliver_due_delays()
        rows = []
        for q in range(store.topic(topic).queues):
            lo, hi = store.min_offset(topic, q), store.max_offset(topic, q)
            rows.append(QueueStatus(topic, q, lo, hi, hi - lo, store.last_store_timestamp(topic, q)))
        return rows

    def create_topic(self, name: str, queues: int = 8, order: bool = False) -> TopicInfo:
        """Create a topic (a no-op if it exists with this queue count; ``TopicExistsError``
        if with another). ``order``: senders must give a sharding key or a queue."""
        names.validate_topic(name)
        if isinstance(queues, bool) or not isinstance(queues, int):
            raise UsageError(f"queues must be an int, not {queues!r}")
        check_flags(order=order)
        if self._store is None and self._missing is not None:
            from store.log.messagestore import Store
            self._store, self._missing = Store.open(self.path, create=True), None  # as `mqctl topic create`
        cfg, _created = self.store.create_topic(name, queues, bool(order))
        store = self.store
        messages = sum(store.max_offset(name, q) - store.min_offset(name, q) for q in range(cfg.queues))
        return TopicInfo(cfg.name, cfg.queues, cfg.order, messages)

    def update_topic(self, name: str, queues: int) -> TopicInfo:
        """Give a topic ``queues`` queues: more than today adds queues (consumers pick them up
        at once; sharding keys route by the new count from then on), the same is a no-op,
        fewer is refused with ``UsageError`` (exit 2), as Kafka refuses fewer partitions.
        The system's topics are refused (``InvalidNameError``), as by create and delete."""
        names.validate_topic(name)
        if isinstance(queues, bool) or not isinstance(queues, int):
            raise UsageError(f"queues must be an int, not {queues!r}")
        cfg, _changed = self.store.update_topic(name, queues, named=self._arg("queues"))
        store = self.store
        messages = sum(store.max_offset(name, q) - store.min_offset(name, q) for q in range(cfg.queues))
        return TopicInfo(cfg.name, cfg.queues, cfg.order, messages)

    # -- groups ------------------------------------------------------------------------------
    def groups(self) -> list[str]:
        """Every group the store knows of, sorted."""
        return known_groups(self.store)
