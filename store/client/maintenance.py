"""The store-wide operations of :class:`store.Admin`: check, recover, measure and clean a store,
and sweep what killed Spark jobs left. Each method asks the module that owns the files
(``store/log/check.py``, ``recovery.py``, ``retention.py``, ``stats.py``,
``store/spark/staging.py``, and for the consumers' dedup logs ``store/client/dedup.py``); this
mixin only gives them one front door, over the Admin's store handle."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from store.log.check import CheckReport
    from store.log.messagestore import Store
    from store.log.recovery import RecoveryReport
    from store.log.retention import CleanPlan, FileAction
    from store.spark.staging import StagingDir

Progress = Callable[[int], None]


class StoreMaintenance:
    """Whole-store maintenance (``mqctl store check|recover|stats|clean``)."""

    if TYPE_CHECKING:
        @property
        def store(self) -> Store: ...

    # -- integrity ---------------------------------------------------------------------------
    def log_bytes(self) -> int:
        """The commit log's size in bytes: the total a ``progress`` callback counts up to."""
        from store.log.stats import commitlog_bytes
        return commitlog_bytes(self.store)

    def check(self, *, progress: Progress | None = None) -> CheckReport:
        """Verify every record's CRC and every consume-queue and index entry. Read-only.
        ``progress(n)`` is told each ``n`` bytes of the log read. ``report.problems`` lists
        what is wrong (empty: the store is sound, or its only damage is ``report.known``:
        damaged records a :meth:`recover` already reported, a loss accepted)."""
        from store.client import dedup
        from store.log.check import Problem
        rep = self.store.check(progress=progress)
        rep.problems += [Problem(*p) for p in dedup.problems(self.store.layout)]
        return rep

    def recover(self, *, progress: Progress | None = None) -> RecoveryReport:
        """Rebuild the consume queues and the key index from the commit log, under the store's
        write lock (producers wait): cut a torn tail, drop entries pointing at nothing. A
        damaged record is left in place, never served, and named in ``report.damage``. The
        consumers' dedup logs lose the lines they cannot read (each said as a warning)."""
        from store.client import dedup
        rep = self.store.recover(full=True, progress=progress)
        dedup.drop_damaged(self.store.layout, self.store.warn)
        return rep

    def stats(self) -> list[dict[str, Any]]:
        """The bytes each part of the store takes on disk (``part``, ``bytes``, ``files``),
        then what a clean would free with the default retention, and with ``force``."""
        from store.log.stats import store_stats
        return store_stats(self.store)

    # -- retention ---------------------------------------------------------------------------
    def plan_clean(self, older_than_ms: int | None = None, *, force: bool = False) -> CleanPlan:
        """What :meth:`clean` would delete now (reads only): segments last modified more than
        ``older_than_ms`` ago (default 72 hours, RocketMQ's fileReservedTime) that every reader
        has passed; with ``force``, also those that lagging readers still need."""
        from store.log.retention import DEFAULT_RETENTION_MS, plan_clean
        return plan_clean(self.store, DEFAULT_RETENTION_MS if older_than_ms is None else older_than_ms, force)

    def clean(self, older_than_ms: int | None = None, *, force: bool = False,
              progress: Progress | None = None,
              on_delete: Callable[[FileAction], None] | None = None) -> CleanPlan:
        """Delete what :meth:`plan_clean` plans, oldest first, under the write lock; each file
        deleted is passed to ``on_delete`` and counted by ``progress(1)``. Returns the plan."""
        from store.log.retention import DEFAULT_RETENTION_MS, clean
        return clean(self.store, DEFAULT_RETENTION_MS if older_than_ms is None else older_than_ms, force,
                     progress=progress, on_delete=on_delete)

    def stale_staging(self) -> list[StagingDir]:
        """Staging directories of Spark writes whose job is gone (what :meth:`sweep_staging`
        would remove)."""
        from store.spark.staging import stale_staging
        return stale_staging(self.store.root)

    def sweep_staging(self) -> list[StagingDir]:
        """Remove the staging directories of killed or failed Spark writes; returns them."""
        from store.spark.staging import sweep_staging
        return sweep_staging(self.store.root)
