"""The transaction operations of :class:`store.Admin` (``mqctl tx``): store a half message,
list, resolve and check transactions by id. The transaction records are owned by
``store/tx/transaction.py`` and the check service by ``store/tx/check.py``; this mixin is
their front door over the Admin's store handle. A program that runs its local transactions
in-process uses :class:`store.TransactionProducer` instead."""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from store.client.rules import check_flags

if TYPE_CHECKING:
    from store.log.messagestore import Store
    from store.log.record import Message
    from store.tx.check import PendingTransaction, TransactionCheckEvent, TransactionCheckReport
    from store.tx.transaction import PreparedTransaction, TransactionEnd


class TransactionAdmin:
    """Transactions by id: what ``mqctl tx send|commit|rollback|list|check`` do."""

    if TYPE_CHECKING:
        from store.client.rules import ArgNames
        arg_names: ArgNames | None

        @property
        def store(self) -> Store: ...

    def prepare_transaction(self, topic: str, body: bytes, properties: dict[str, str], *,
                            queue: int | None = None, sharding_key: str | None = None,
                            sync: bool = False) -> PreparedTransaction:
        """Store a half message for ``topic`` (invisible to consumers until committed); its
        real queue is chosen now. ``properties`` as :func:`store.build_properties` makes them.
        Returns the transaction id and the stored half message (``.half``)."""
        from store.client.producer import check_route
        from store.tx.transaction import send_half
        check_route(self.store, topic, queue, sharding_key, self.arg_names)
        return send_half(self.store, topic, body, properties, queue_id=-1 if queue is None else queue,
                         sharding_key=sharding_key, sync=sync)

    def transaction_state(self, tx_id: str) -> str:
        """``PREPARED``, ``COMMITTED`` or ``ROLLED_BACK`` (``TransactionNotFoundError``)."""
        from store.tx.transaction import load
        return load(self.store, tx_id).state

    def end_transaction(self, tx_id: str, commit: bool, *, sync: bool = False) -> TransactionEnd:
        """Commit (the message becomes visible) or roll back ``tx_id`` — or the transaction
        whose record has this offset id. Resolving it the same way twice is a no-op; the other
        way raises ``TransactionStateError``."""
        from store.tx.transaction import end_transaction, resolve_tx_id
        check_flags(commit=commit, sync=sync)
        store = self.store
        return end_transaction(store, resolve_tx_id(store, tx_id), commit, sync=sync)

    def transactions(self, *, parked: bool = False) -> list[PendingTransaction]:
        """The unresolved (PREPARED) transactions, oldest first; with ``parked``, instead
        those the check service parked after ``max_checks`` and nobody resolved since (state
        DISCARDED: :meth:`end_transaction` still resolves them), oldest parked first, each
        with ``parked_at``."""
        from store.tx.check import parked as parked_ones
        from store.tx.check import pending
        return parked_ones(self.store) if parked else pending(self.store)

    def check_transactions(self, checker: Callable[[Message, int], str], *, timeout_ms: int | None = None,
                           max_checks: int | None = None,
                           on_event: Callable[[TransactionCheckEvent], None] | None = None,
                           should_stop: Callable[[], bool] | None = None) -> TransactionCheckReport:
        """One pass of the check service: ``checker(half, check_times)`` is asked about every
        unresolved transaction older than ``timeout_ms`` (default 6 s) and answers ``COMMIT``,
        ``ROLLBACK`` or ``UNKNOWN``; after ``max_checks`` checks (default 15) a transaction is
        parked. Passes of several processes run one at a time."""
        from store.tx.check import DEFAULT_MAX_CHECKS, DEFAULT_TIMEOUT_MS, check_pass
        return check_pass(self.store, checker,
                          timeout_ms=DEFAULT_TIMEOUT_MS if timeout_ms is None else timeout_ms,
                          max_checks=DEFAULT_MAX_CHECKS if max_checks is None else max_checks,
                          on_event=on_event, should_stop=should_stop)
