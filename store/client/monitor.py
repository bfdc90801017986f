"""Live inspection: :class:`Monitor` looks at a store again and again, cheaply and read-only.

``mqctl top`` calls :meth:`Monitor.snapshot` once a second. One call gathers, in one pass,
what ``topic list|status``, ``progress``, ``consumers``, ``locks``, ``dlq list`` and ``tx list``
compute one command at a time (records in ``store/client/snapshot.py``)::

    with store.Monitor() as mon:
        history = store.History()
        while True:
            snap = mon.snapshot()
            history.add(snap)
            print(history.topic_rate("orders"), snap.group("billing").lag)

Read-only, strictly: the store is opened without recovery (a dirty store is reported, not
repaired), no file is created or written, and no lock is taken, not even the shared probes
``mqctl locks`` uses: who is alive is read from the kernel's lock table
(``store/heldlocks.py``). It works on a store the user may only read.

Cheap, because it repeats: a queue's max offset is the size of its last consume-queue file (a
``stat``; the segment listing is kept while the directory does not change); when neither the
commit log, the checkpoint nor the topic table changed since the last look, the topics are
not looked at again. The committed offsets are parsed again only when their file was
replaced, and a topic's stored bytes are summed from the consume-queue entries added since
the last look (a long backlog over several looks: ``bytes_exact`` is False meanwhile).
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from store import names
from store.client.paths import PathLike, resolve_store_path
from store.client.recoverylook import RecoveryLook
from store.client.snapshot import (
    GroupStat,
    LockStat,
    MemberStat,
    PendingTx,
    Problems,
    QueueLag,
    Snapshot,
    TopicStat,
)
from store.heldlocks import HeldLocks
from store.layout import backup_of
from store.log.format import CQ_ENTRY

if TYPE_CHECKING:
    from store.client.locktable import LockInfo
    from store.client.members import MemberInfo
    from store.log.messagestore import Store
    from store.log.topics import TopicConfig

# Consume-queue entries summed per queue per look: a first look at a long backlog is spread
# over several looks instead of stalling one.
BYTES_BUDGET = 262_144
# A cached listing is trusted only when looked at well after the file's mtime (racy-clean).
RACY_NS = 100_000_000


class _QueueBytes:
    """The stored bytes of one queue's entries ``lo``..``hi`` (summed so far)."""

    __slots__ = ("lo", "hi", "bytes")

    def __init__(self, lo: int) -> None:
        self.lo = self.hi = lo
        self.bytes = 0


class Monitor:
    """Repeated read-only looks at a store (see the module docstring).

    ``path=None`` selects ``$MQCTL_STORE``, else ``~/.mqctl/store`` (``StoreNotFoundError``
    when there is no store). ``group`` / ``topic``: look at that group / topic only
    (``GroupNotFoundError`` / ``TopicNotFoundError`` when the store does not know it); the
    groups' retry and dead-letter topics are looked at anyway, for the problems.
    ``check_timeout_ms``: transactions older than this are overdue (``tx check``'s default).
    """

    def __init__(self, path: PathLike | None = None, *, group: str | None = None, topic: str | None = None,
                 check_timeout_ms: int | None = None) -> None:
        from store.log.messagestore import Store
        from store.tx.check import DEFAULT_TIMEOUT_MS
        self.path: Path = resolve_store_path(path)
        self.group, self.topic = group, topic
        self.check_timeout_ms = DEFAULT_TIMEOUT_MS if check_timeout_ms is None else check_timeout_ms
        self._warnings: list[str] = []
        self._store: Store | None = Store.open(self.path, recover=False, warn=self._warn)
        self._bytes: dict[tuple[str, int], _QueueBytes] = {}
        self._topics_key: tuple[Any, ...] | None = None
        self._topic_stats: tuple[TopicStat, ...] = ()
        self._offsets_key: tuple[int, ...] | None = None
        self._offsets: dict[str, dict[tuple[str, int], int]] = {}
        self._tx_key: tuple[Any, ...] | None = None
        self._tx: list[tuple[str, str, int, int]] = []
        self._recovery = RecoveryLook()
        self._table: dict[str, TopicConfig] = {}
        try:
            self._check_filters()
        except BaseException:
            self.close()
            raise

    @property
    def store(self) -> Store:
        if self._store is None:
            from store.errors import UsageError
            raise UsageError("this Monitor is closed")
        return self._store

    def _warn(self, msg: str) -> None:
        if msg not in self._warnings:
            self._warnings.append(msg)

    def _check_filters(self) -> None:
        from store.client.groups import require_group
        if self.topic is not None:
            names.validate_any_topic(self.topic)
            self.store.topic(self.topic)
        if self.group is not None:
            require_group(self.store, self.group)

    # -- one look --------------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        """Look at the store once (see :class:`~store.client.snapshot.Snapshot`).
        ``StoreNotFoundError`` once the store was removed (its files would read as an empty
        store for ever); a look that overlapped the removal may still come back first."""
        from store.errors import StoreIOError
        try:
            snap = self._snapshot()
        except (FileNotFoundError, StoreIOError):   # (a file gone in the middle of the look)
            self._check_there()
            raise
        self._check_there()
        return snap

    def _check_there(self) -> None:
        """StoreNotFoundError once the store is gone, or going: a removal (``rm -rf``) takes the
        files one by one, the directory last, so the files a store always has (its settings or
        their copy, its commit log's and its configuration's directories) are looked at."""
        lay = self.store.layout
        if not (lay.store_json.exists() or backup_of(lay.store_json).exists()) or not lay.commitlog_dir.is_dir() \
                or not lay.config_dir.is_dir():
            from store.errors import StoreNotFoundError
            raise StoreNotFoundError(f"no store at {lay.root} any more (it was removed)")

    def _snapshot(self) -> Snapshot:
        cpu = time.process_time()
        now = time.time_ns() // 1_000_000
        held = HeldLocks()
        topics = self._topics()
        ends = {(t.topic, q): (lo, hi) for t in topics for q, (lo, hi) in enumerate(zip(t.min_offsets, t.max_offsets))}
        offsets = self._committed()
        from store.client.locktable import list_locks
        infos = list_locks(self.store.layout, None, held.held)   # (once: members' queues are their locks)
        groups = self._groups(offsets, ends, held, infos)
        locks = self._locks(infos, now)
        problems = self._problems(topics, groups, now, self._recovery.look(self.store, held, self._table))
        return Snapshot(now, topics, groups, locks, problems, (time.process_time() - cpu) * 1000)

    # -- topics ----------------------------------------------------------------------------
    def _topics(self) -> tuple[TopicStat, ...]:
        store = self.store
        log = store.commitlog
        try:
            st = os.stat(store.layout.checkpoint)
            cp = (st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            cp = (0, 0)
        table = self._table = store.topics()
        try:
            st = os.stat(store.layout.topics_epoch)
            topics_stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            topics_stamp = (0, 0, 0)
        key = (log.min_offset(), log.end(), cp, topics_stamp)
        if key == self._topics_key:
            return self._topic_stats
        stats = []
        trimmed = key[0] > 0   # retention ran: a queue's first entries may point at removed records
        for name, cfg in sorted(table.items()):
            if self.topic is None or name == self.topic or name.startswith((names.RETRY_PREFIX, names.DLQ_PREFIX)):
                stats.append(self._topic(cfg, trimmed))
        live = {(t.topic, q) for t in stats for q in range(t.queues)}
        for gone in [k for k in self._bytes if k not in live]:
            del self._bytes[gone]
        store.close_queues()   # descriptors of the entries summed: none kept between looks
        self._topic_stats = tuple(stats)
        self._topics_key = key if time.time_ns() - cp[0] > RACY_NS else None
        return self._topic_stats

    def _topic(self, cfg: TopicConfig, trimmed: bool) -> TopicStat:
        store = self.store
        los, his, total, exact = [], [], 0, True
        for q in range(cfg.queues):
            cq = store.queue(cfg.name, q)
            hi = cq.max_offset()
            lo = store.min_offset(cfg.name, q) if trimmed else cq.min_offset()
            los.append(lo)
            his.append(hi)
            size, done = self._queue_bytes(cfg.name, q, lo, hi)
            total += size
            exact = exact and done
        return TopicStat(cfg.name, cfg.queues, cfg.order, names.is_system_topic(cfg.name), tuple(los), tuple(his),
                         total, exact)

    def _queue_bytes(self, topic: str, qid: int, lo: int, hi: int) -> tuple[int, bool]:
        """The bytes of the queue's stored messages, adding the entries new since the last
        look (all of them again when the queue's start moved or it was re-created)."""
        import numpy as np
        acc = self._bytes.get((topic, qid))
        if acc is None or lo != acc.lo or hi < acc.hi:
            acc = self._bytes[(topic, qid)] = _QueueBytes(lo)
        cq = self.store.queue(topic, qid)
        budget = BYTES_BUDGET
        while acc.hi < hi and budget > 0:
            raw = cq.read_raw(acc.hi, min(hi - acc.hi, budget))
            if not raw:
                break
            n = len(raw) // CQ_ENTRY.size
            if n < 64:   # numpy's fixed cost is more than a few entries' unpacking
                acc.bytes += sum(size for _phys, size, _tags in CQ_ENTRY.iter_unpack(raw))
            else:
                # an entry is >qiq: five big-endian int32 words, the size is the third
                acc.bytes += int(np.frombuffer(raw, dtype=">i4").reshape(-1, 5)[:, 2].sum(dtype=np.int64))
            acc.hi += n
            budget -= n
        return acc.bytes, acc.hi >= hi

    # -- groups ----------------------------------------------------------------------------
    def _committed(self) -> dict[str, dict[tuple[str, int], int]]:
        """Every group's clustering offsets, parsed again only when the table's snapshot was
        replaced or its journal written (a member's commit appends a record to it)."""
        key: tuple[int, ...] = ()
        for path in (self.store.layout.consumer_offset_json, self.store.layout.consumer_offset_log):
            try:
                st = os.stat(path)
                key += (st.st_ino, st.st_mtime_ns, st.st_size)
            except FileNotFoundError:
                key += (0, 0, 0)
        if key != self._offsets_key:
            self._offsets = self.store.offsets.all_groups()   # (its warn: this monitor's _warn)
            self._offsets_key = key
        return self._offsets

    def _groups(self, offsets: dict[str, dict[tuple[str, int], int]], ends: dict[tuple[str, int], tuple[int, int]],
                held: HeldLocks, locks: list[LockInfo]) -> tuple[GroupStat, ...]:
        from store.client.groups import known_groups
        from store.client.memberview import peek_group_members
        store = self.store
        if self.group is not None:
            groups = [self.group]
        else:
            groups = known_groups(store, [g for g, o in offsets.items() if o])
        topics = {t for t, _ in ends}
        out = []
        for g in groups:
            view = peek_group_members(store.layout, g, held.held, locks)
            members = view.members
            stats = [_member(m, view.queues(m)) for m in members]
            owners = view.owners()
            # Which topics count, as ``Admin.lag``: committed ones, live clustering members'
            # subscriptions (before a first commit), and the group's retry topic.
            mine = {t for t, _ in offsets.get(g, {})}
            for m in members:
                subs = m.record.get("topics")
                if m.shares_queues and isinstance(subs, list):
                    mine.update(t for t in subs if isinstance(t, str))
            mine.add(names.retry_topic(g))
            rows = self._lags(sorted(mine & topics, key=lambda t: (names.is_retry_topic(t), t)),
                              offsets.get(g, {}), ends, owners, None)
            rows += self._broadcast_lags(g, ends, topics)
            out.append(GroupStat(g, tuple(rows), tuple(stats)))
        return tuple(out)

    @staticmethod
    def _lags(topics: list[str], committed: dict[tuple[str, int], int],
              ends: dict[tuple[str, int], tuple[int, int]], owners: dict[tuple[str, int], str],
              client_id: str | None) -> list[QueueLag]:
        rows = []
        for t in topics:
            q = 0
            while (t, q) in ends:
                lo, hi = ends[(t, q)]
                c = committed.get((t, q))
                consumer = c if c is not None and c >= 0 else None
                lag = max(0, hi - lo) if consumer is None else max(0, hi - max(consumer, lo))
                rows.append(QueueLag(t, q, hi, consumer, lag, client_id or owners.get((t, q)), client_id))
                q += 1
        return rows

    def _broadcast_lags(self, group: str, ends: dict[tuple[str, int], tuple[int, int]],
                        topics: set[str]) -> list[QueueLag]:
        from store.client.groups import broadcast_clients
        from store.errors import StoreError
        from store.log.broadcastoffsets import BroadcastOffsetStore
        rows: list[QueueLag] = []
        for cid in broadcast_clients(self.store, group):
            try:
                committed = BroadcastOffsetStore(self.store.layout, cid, group, warn=self._warn).load()
            except StoreError as exc:
                self._warn(f"broadcast offsets of {cid}: {exc}")
                continue
            mine = sorted({t for t, _ in committed} & topics)
            rows += self._lags(mine, committed, ends, {}, cid)
        return rows

    # -- locks -----------------------------------------------------------------------------
    def _locks(self, infos: list[LockInfo], now: int) -> tuple[LockStat, ...]:
        from store.client.admin_rows import lock_state
        out = []
        for i in infos:
            if (self.group is not None and i.group != self.group) or (self.topic is not None and i.topic != self.topic):
                continue
            left = i.expiresAt - now if i.expiresAt is not None else None
            out.append(LockStat(i.group, i.topic, i.queueId, i.clientId, i.pid, i.host, i.renewedAt, i.expiresAt,
                                i.alive, lock_state(i, now), left))
        return tuple(out)

    # -- problems --------------------------------------------------------------------------
    def _problems(self, topics: tuple[TopicStat, ...], groups: tuple[GroupStat, ...], now: int,
                  recovery: tuple[str, ...]) -> Problems:
        from store.log.schedule import backlog
        dlq = {t.topic[len(names.DLQ_PREFIX):]: t.messages for t in topics if t.topic.startswith(names.DLQ_PREFIX)}
        if self.group is not None:
            dlq = {g: n for g, n in dlq.items() if g == self.group}
        retries = {g.group: sum(q.lag for q in g.queues if q.topic == names.retry_topic(g.group)) for g in groups}
        delayed, due = backlog(self.store, now)
        txs = tuple(PendingTx(tx, topic, now - born, checks) for tx, topic, born, checks in self._transactions())
        if self.topic is not None:
            txs = tuple(t for t in txs if t.topic == self.topic)
        in_place = {g.group: sum(m.retrying_in_place for m in g.members) for g in groups}
        return Problems(dlq, {g: n for g, n in retries.items() if n}, txs, self.check_timeout_ms, delayed, due,
                        tuple(self._warnings), {g: n for g, n in in_place.items() if n}, recovery)

    def _transactions(self) -> list[tuple[str, str, int, int]]:
        """(txId, topic, born time, checks) of unresolved transactions, read again only when
        a half or op message was added or the check service moved on."""
        from store.log.positions import tx_progress_path
        from store.tx.check import pending
        store = self.store
        if not store.has_topic(names.HALF_TOPIC):
            return []
        try:
            st = os.stat(tx_progress_path(store.layout))
            progress = (st.st_ino, st.st_mtime_ns)
        except FileNotFoundError:
            progress = (0, 0)
        op = store.max_offset(names.OP_HALF_TOPIC, 0) if store.has_topic(names.OP_HALF_TOPIC) else 0
        key = (store.max_offset(names.HALF_TOPIC, 0), op, progress)
        if key != self._tx_key:
            self._tx = [(p.tx_id, p.topic, p.half.born_timestamp, p.check_times) for p in pending(store)]
            self._tx_key = key
        return self._tx

    # -- lifecycle -------------------------------------------------------------------------
    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None

    def __enter__(self) -> Monitor:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def _member(m: MemberInfo, held: list[dict[str, Any]]) -> MemberStat:
    record = m.record
    queues = tuple(sorted((q["topic"], q["queueId"]) for q in held
                          if isinstance(q, dict) and isinstance(q.get("topic"), str)
                          and isinstance(q.get("queueId"), int)))
    orderly = record.get("orderly")
    mode = record.get("mode")
    retrying = record.get("retryingInPlace")
    return MemberStat(m.clientId, m.pid, m.host, mode if isinstance(mode, str) else None,
                      orderly if isinstance(orderly, bool) else None, queues,
                      m.heard_from, "expired" if m.expired else "live",
                      retrying if isinstance(retrying, int) and not isinstance(retrying, bool) and retrying > 0 else 0)
