"""Where the store's own readers got to: the delay scheduler's progress and the transaction
check service's progress, and the one place recovery moves every reader position back.

Files (standard JSON, written with :func:`fsutil.atomic_write_json`: temp file, fsync,
rename, previous version kept as ``.bak``)::

    config/delayOffset.json        {"offsetTable": {"<level queue id>": <next offset>, ...},
                                    "delivered":   {"<queue id>": [<offset>, ...], ...},
                                    "progressRecords": <RMQ_SYS_DELAY_PROGRESS records it includes>,
                                    "crc": <CRC-32 of the canonical content: fsutil.json_crc>}
    tx/CID_RMQ_SYS_TRANS.json      {"offsetTable": {"RMQ_SYS_TRANS_HALF_TOPIC@CID_RMQ_SYS_TRANS": {"0": <n>},
                                                    "RMQ_SYS_TRANS_OP_HALF_TOPIC@CID_RMQ_SYS_TRANS": {"0": <n>}}}

``delayOffset.json`` is RocketMQ's file (``delivered`` and ``crc`` are ours: the free-duration
queue's messages delivered out of order; the checksum that catches a digit flipped in a file
that stays valid JSON, when its ``.bak`` is read instead — a file of an earlier version, without
it, is read as it is). Each scheduler pass writes the copies it delivers from a
queue and its progress (a record in ``RMQ_SYS_DELAY_PROGRESS``, body ``{"queue": q, "offset":
<new next offset>, "delivered": [[first, last], ...]}``, the offsets above it this pass
delivered) in one atomic batch, then the file: a pass killed in between delivers nothing twice.
Consumer groups' offsets are ``offsets.py``'s.

After a power cut has shortened queues, :func:`clamp_to_queue_ends` moves every position that
points past its queue's end back to that end — group offsets, broadcast offsets, delay and
transaction-check progress — so that the messages that take those offsets next are delivered.
Recovery calls it, and ``store recover`` also :func:`restore_unreadable` (the scheduler's and
the check service's files written again when no reader can read them): the only things
recovery knows about readers.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from store.errors import StoreError
from store.fsutil import atomic_write_json, atomic_write_json_crc, ensure_dir, json_problem, read_json_with_bak
from store.layout import Layout
from store.log import broadcastoffsets, offsetcommits, offsets
from store.log.record import Draft
from store.names import DELAY_PROGRESS_TOPIC, HALF_TOPIC, OP_HALF_TOPIC, SCHEDULE_TOPIC

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Any

Warn = Callable[[str], None]
QueueEnd = Callable[[str, int], int]

TX_GROUP = "CID_RMQ_SYS_TRANS"
_HALF_KEY = offsets.table_key(HALF_TOPIC, TX_GROUP)
_OP_KEY = offsets.table_key(OP_HALF_TOPIC, TX_GROUP)


# -- the delay scheduler ------------------------------------------------------------------------

def load_delay_progress(layout: Layout, warn: Warn | None = None) -> dict[str, Any]:
    """``{"offsetTable": {queue: next offset}, "delivered": {queue: [offsets]},
    "progressRecords": n}``; empty tables before the scheduler's first pass. Progress records
    written after the file's ``progressRecords`` (a scheduler that died between its batch and
    the file) are applied on top."""
    return _delay_progress_from(layout, read_json_with_bak(layout.delay_offset_json, default={}, warn=warn,
                                                           crc=True))


def _delay_progress_from(layout: Layout, obj: Any) -> dict[str, Any]:
    if not isinstance(obj, dict):
        obj = {}
    table = {str(k): int(v) for k, v in (obj.get("offsetTable") or {}).items()}
    delivered = {str(k): {int(x) for x in v} for k, v in (obj.get("delivered") or {}).items()}
    seen = obj.get("progressRecords", 0)
    bodies, end = offsetcommits.records_after(layout, DELAY_PROGRESS_TOPIC, seen if isinstance(seen, int) else 0)
    for body in bodies:
        try:
            rec = json.loads(body)
            q, start = str(rec["queue"]), int(rec["offset"])
            done = {o for a, b in rec["delivered"] for o in range(int(a), int(b) + 1)}
        except (ValueError, TypeError, KeyError):
            continue
        table[q] = max(table.get(q, 0), start)
        delivered[q] = {o for o in delivered.get(q, set()) | done if o >= table[q]}
    return {"offsetTable": table, "delivered": {k: sorted(v) for k, v in delivered.items() if v},
            "progressRecords": end}


@dataclass(eq=False, repr=False)   # (neither is used: start-up, store/__init__.py)
class DelayProgress:
    """The end record of a scheduler pass's batch for one queue (``offsetcommits.seal``):
    the queue's new offset and the offsets above it this pass delivered (as ranges), so that
    the copies and the progress past them are one atomic write. ``delayOffset.json`` is
    written after it; records newer than the file are applied on reading it."""

    queue: int
    offset: int
    delivered: list[int]

    def to_draft(self) -> Draft:
        ranges: list[list[int]] = []
        for o in sorted(x for x in self.delivered if x >= self.offset):
            if ranges and ranges[-1][1] == o - 1:
                ranges[-1][1] = o
            else:
                ranges.append([o, o])
        body = {"queue": self.queue, "offset": self.offset, "delivered": ranges}
        return Draft(topic=DELAY_PROGRESS_TOPIC, body=json.dumps(body, separators=(",", ":")).encode(),
                     queue_id=0)


def delay_progress_problem(path: Path) -> str | None:
    """Why ``delayOffset.json`` (or its ``.bak``) cannot be read, or None (``store check``)."""
    return json_problem(path, crc=True)


def save_delay_progress(layout: Layout, state: dict[str, Any]) -> None:
    atomic_write_json_crc(layout.delay_offset_json, state)


def _restore_delay_progress(layout: Layout) -> list[str]:
    """An unreadable ``delayOffset.json`` is written again, from its ``.bak`` or, when that
    is unreadable too, from the scheduler's progress records alone (each pass's record holds
    its queue's new offset)."""
    path = layout.delay_offset_json
    if not path.exists():
        return []
    fell_back: list[str] = []
    try:
        state = load_delay_progress(layout, fell_back.append)
        if not fell_back:
            return []
        said = f"{path} was unreadable; restored from its .bak and the scheduler's progress records"
    except StoreError:
        state = _delay_progress_from(layout, {})
        said = (f"{path} was unreadable, with no readable .bak; rebuilt from the scheduler's progress records "
                f"in the log")
    atomic_write_json_crc(path, state, keep_bak=False)   # (a readable .bak stays as it was)
    return [said]


def _clamp_delay(layout: Layout, queue_end: QueueEnd) -> list[str]:
    if not layout.delay_offset_json.exists():
        return []
    state = load_delay_progress(layout)
    moved = []
    for key, offset in list(state["offsetTable"].items()):
        end = queue_end(SCHEDULE_TOPIC, int(key))
        if 0 <= end < offset:
            state["offsetTable"][key] = end
            moved.append(f"delay scheduler: queue {key} offset {offset} -> {end}")
    for key, done in state["delivered"].items():
        end = queue_end(SCHEDULE_TOPIC, int(key))
        if end >= 0 and any(o >= end for o in done):
            state["delivered"][key] = [o for o in done if o < end]
            moved.append(f"delay scheduler: queue {key} forgets deliveries at or past {end}")
    if moved:
        save_delay_progress(layout, state)
    return moved


# -- the transaction check service ----------------------------------------------------------------

def tx_progress_path(layout: Layout) -> Path:
    return layout.tx_progress(TX_GROUP)


def _validate_tx_progress(obj: Any) -> None:
    table = obj["offsetTable"]
    for key in (_HALF_KEY, _OP_KEY):
        if not isinstance(table[key]["0"], int) or table[key]["0"] < 0:
            raise ValueError(f"{key}: offset must be a non-negative integer")


def tx_progress_problem(path: Path) -> str | None:
    """Why the check service's progress file (or its ``.bak``) cannot be read, or None."""
    return json_problem(path, _validate_tx_progress)


def load_tx_progress(layout: Layout, warn: Warn | None = None) -> tuple[int, int]:
    """(half offset, op offset) of ``CID_RMQ_SYS_TRANS``; (0, 0) before the first pass."""
    obj = read_json_with_bak(tx_progress_path(layout), None, _validate_tx_progress, warn)
    if obj is None:
        return 0, 0
    return obj["offsetTable"][_HALF_KEY]["0"], obj["offsetTable"][_OP_KEY]["0"]


def save_tx_progress(layout: Layout, half_offset: int, op_offset: int, *, keep_bak: bool = True) -> None:
    ensure_dir(layout.tx_dir())
    atomic_write_json(tx_progress_path(layout), {"offsetTable": {
        _HALF_KEY: {"0": half_offset}, _OP_KEY: {"0": op_offset}}}, keep_bak=keep_bak)


def _restore_tx_progress(layout: Layout) -> list[str]:
    """An unreadable check-service progress file is put back from its ``.bak``; when that is
    unreadable too, the service starts again from the oldest half message (the ones already
    resolved have their op records, and are passed over again)."""
    path = tx_progress_path(layout)
    if not path.exists():
        return []
    fell_back: list[str] = []
    try:
        half, op = load_tx_progress(layout, fell_back.append)
        if not fell_back:
            return []
        said = f"{path} was unreadable; restored from its .bak"
    except StoreError:
        half, op = 0, 0
        said = (f"{path} was unreadable, with no readable .bak; the check service starts again from the "
                f"oldest half message (resolved ones are passed over)")
    save_tx_progress(layout, half, op, keep_bak=False)   # (a readable .bak stays as it was)
    return [said]


def _clamp_tx(layout: Layout, queue_end: QueueEnd, warn: Warn) -> list[str]:
    half_end, op_end = queue_end(HALF_TOPIC, 0), queue_end(OP_HALF_TOPIC, 0)
    half, op = load_tx_progress(layout, warn)
    if (0 <= half_end < half) or (0 <= op_end < op):
        save_tx_progress(layout, min(half, max(half_end, 0)), min(op, max(op_end, 0)))
        return [f"transaction check progress moved back to the queues' ends ({half_end}, {op_end})"]
    return []


def _clamp_offsets(cluster: offsets.ClusterOffsetStore, layout: Layout, queue_end: QueueEnd,
                   warn: Warn) -> list[str]:
    """Move every committed offset that points past its queue's end back to that end, for
    clustering groups and broadcast clients alike; returns one line per offset moved.

    Recovery calls this after a power cut has shortened a queue. Consumers may have committed
    offsets for messages that were never durable (async sends, or a sync batch read before its
    fsync); new messages then take those queue offsets again, and a group whose offset stayed
    ahead would never see them. ``queue_end(topic, queue_id)`` is the queue's max offset, or a
    negative number for a queue that no longer exists (left alone)."""
    moved: list[str] = []
    for group in cluster.groups():
        by_topic: dict[str, dict[int, int]] = {}
        for (topic, queue_id), offset in cluster.read_group(group).items():
            end = queue_end(topic, queue_id)
            if 0 <= end < offset:
                by_topic.setdefault(topic, {})[queue_id] = end
                moved.append(f"group {group}: {topic}/{queue_id} offset {offset} -> {end}")
        for topic, ends in by_topic.items():
            cluster.reset(group, topic, ends)
    for client_id, group in broadcastoffsets.broadcast_offset_files(layout):
        try:
            store = broadcastoffsets.BroadcastOffsetStore(layout, client_id, group, warn)
            table = store.load()
        except StoreError:
            continue   # a name that is not ours, or an unreadable file: `store check` reports it
        owned = []
        for (topic, queue_id), offset in table.items():
            end = queue_end(topic, queue_id)
            if 0 <= end < offset:
                store.update(topic, queue_id, end, increase_only=False)
                owned.append((topic, queue_id))
                moved.append(f"broadcast client {client_id} of group {group}: "
                             f"{topic}/{queue_id} offset {offset} -> {end}")
        store.persist(owned)
    for line in moved:
        warn(f"{line} (the queue is shorter after a crash: messages sent from now on are delivered)")
    return moved


# -- all of them ---------------------------------------------------------------------------------

def restore_unreadable(layout: Layout, warn: Warn) -> list[str]:
    """``store recover``: the delay scheduler's and the check service's progress files that
    no reader can read are written again (until then every group consumer, or every
    transaction command, of the store fails on them). Warns and returns one line per file."""
    said = _restore_delay_progress(layout) + _restore_tx_progress(layout)
    for line in said:
        warn(line)
    return said


def clamp_to_queue_ends(cluster: offsets.ClusterOffsetStore, layout: Layout, queue_end: QueueEnd,
                        warn: Warn) -> list[str]:
    """Move every reader position past its queue's end back to that end; warn and return one
    line per position moved (``cluster``: the store's offset table, ``Engine.offsets``).
    ``queue_end(topic, queue_id)`` is the queue's max offset, or a negative number for a queue
    that does not exist (its positions are left alone)."""
    moved = _clamp_offsets(cluster, layout, queue_end, warn)
    for line in _clamp_delay(layout, queue_end) + _clamp_tx(layout, queue_end, warn):
        warn(line)
        moved.append(line)
    return moved
