"""Broadcast clients' offsets: ``offsets/<clientId>/<group>/offsets.json``
(:class:`BroadcastOffsetStore`; RocketMQ's ``LocalFileOffsetStore``).

RocketMQ writes fastjson with ``MessageQueue`` objects as map keys, which is not valid JSON,
and overwrites the file in place. Here it is standard JSON, one object per queue, written
atomically (temp file, rename) with ``offsets.json.bak`` and a sidecar lock
(``offsets.json.lock``)::

    {"offsetTable": [{"topic": "T", "brokerName": "mqctl", "queueId": 0, "offset": 42}, ...],
     "crc": <CRC-32 of the canonical content: fsutil.json_crc>}

A committed offset is the next offset to consume; -1 is "no offset". ``crc`` (readers that
ignore other fields read the table as RocketMQ's) catches a change that keeps the JSON valid,
a digit of an offset flipped; a file of an earlier version has none and is read as it is. A
main file that is missing, empty, unparsable, of the wrong shape or whose ``crc`` fails is
replaced by its ``.bak`` (``warn`` says so); when the ``.bak`` is unreadable too,
:class:`CorruptionError` names the file until ``store recover`` (:func:`reset_lost`) gives the
client every queue's oldest message.
Directories are created 0700, files 0600.

:meth:`BroadcastOffsetStore.delete` (``offsets delete``) removes a client's offsets of a group
durably and in an order that a kill or a power cut at any step leaves either the offsets as
they were or none: the ``.bak`` first (its removal synced), then ``offsets.json`` (synced),
then what is left of the directory, and its parent synced. Crash point
``broadcast-delete-after-bak``: the ``.bak`` gone, ``offsets.json`` still there.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping

from store import fsutil
from store.errors import CorruptionError
from store.errors import warn as say_warning
from store.failpoints import failpoint
from store.layout import Layout, backup_of, lock_beside
from store.log.offsets import FallbackWatch, QueueKey, Warn, check_offset, exclusive
from store.log.offsettable import NO_OFFSET, is_int, parse_offset
from store.names import BROKER_NAME, CLIENT_ID_RE, NAME_RE, validate_any_topic, validate_client_id, validate_group

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any


def _parse_broadcast(obj: Any) -> dict[QueueKey, int]:
    """Parse and validate the broadcast file; ``ValueError`` on any wrong shape."""
    entries = obj.get("offsetTable") if isinstance(obj, dict) else None
    if not isinstance(entries, list):
        raise ValueError("offsetTable is not a list")
    table: dict[QueueKey, int] = {}
    for entry in entries:
        if not isinstance(entry, dict):
            raise ValueError(f"entry {entry!r} is not an object")
        topic, queue_id, offset = entry.get("topic"), entry.get("queueId"), entry.get("offset")
        if not isinstance(topic, str) or not isinstance(entry.get("brokerName"), str):
            raise ValueError(f"entry {entry!r} lacks topic or brokerName")
        if not is_int(queue_id) or queue_id < 0:
            raise ValueError(f"entry {entry!r} has a bad queueId")
        table[(topic, queue_id)] = parse_offset(offset)
    return table


def _broadcast_json(table: Mapping[QueueKey, int]) -> dict[str, Any]:
    entries = [{"topic": topic, "brokerName": BROKER_NAME, "queueId": queue_id, "offset": offset}
               for (topic, queue_id), offset in sorted(table.items())]
    return {"offsetTable": entries}


class BroadcastOffsetStore:
    """One broadcast client's offsets (RocketMQ's ``LocalFileOffsetStore``).

    Offsets live in memory (``update``) and reach the file with ``persist``, which re-reads the
    file and replaces only the queues the client owns, so entries of other queues survive.
    """

    def __init__(self, layout: Layout, client_id: str, group: str, warn: Warn | None = None) -> None:
        self.path = layout.broadcast_offsets(validate_client_id(client_id), validate_group(group))
        self._warn = warn or say_warning
        self._warned: set[str] = set()
        self._table: dict[QueueKey, int] = {}

    def load(self) -> dict[QueueKey, int]:
        """Fill the memory table from the file (replacing it) and return a copy."""
        self._table = self._read_file(FallbackWatch(self._warn_once))
        return dict(self._table)

    def read(self, topic: str, queue_id: int) -> int:
        """The in-memory offset of one queue, or -1 (RocketMQ's READ_FROM_MEMORY)."""
        return self._table.get((topic, queue_id), NO_OFFSET)

    def update(self, topic: str, queue_id: int, offset: int, increase_only: bool = True) -> None:
        """Set one queue's offset in memory; with ``increase_only`` it never moves back."""
        validate_any_topic(topic)
        check_offset(offset, queue_id)
        old = self._table.get((topic, queue_id), NO_OFFSET)
        self._table[(topic, queue_id)] = max(old, offset) if increase_only else offset

    def persist(self, owned: Iterable[QueueKey]) -> None:
        """Write the memory offsets of the ``owned`` queues; other entries of the file stay."""
        mine = {key: self._table[key] for key in owned if key in self._table}
        if not mine:
            return
        fsutil.ensure_dir(self.path.parent)
        with exclusive(lock_beside(self.path)):
            watch = FallbackWatch(self._warn_once)
            on_disk = self._read_file(watch)
            merged = {**on_disk, **mine}
            # An idle consumer persists every few seconds; skip the fsyncs when nothing moved.
            if merged != on_disk or watch.used:
                # (the rename not fsynced, as a clustering member's commit)
                fsutil.atomic_write_json_crc(self.path, _broadcast_json(merged), keep_bak=not watch.used,
                                             sync_dir=watch.used)

    def delete(self) -> None:
        """Remove this client's offsets of the group and their directory, durably (the
        module's docstring: never a moment when only the ``.bak`` is left to be read)."""
        d = self.path.parent
        with exclusive(lock_beside(self.path)):
            fsutil.unlink_all(d, [backup_of(self.path).name], self._warn)
            failpoint("broadcast-delete-after-bak")
            fsutil.unlink_all(d, [self.path.name], self._warn)
        fsutil.remove_tree(d)   # (then the lock file, and any temp file a killed writer left)
        try:
            fsutil.fsync_dir(d.parent)
        except OSError as exc:
            self._warn(f"could not sync directory {d.parent} after removing {d.name} from it "
                       f"({exc.strerror or exc}): a power cut may bring it back")

    def _warn_once(self, message: str) -> None:
        # The file that load() fell back from is read again by the first persist(), which
        # mends it: one warning for the damage, not one per read.
        if message not in self._warned:
            self._warned.add(message)
            self._warn(message)

    def _read_file(self, watch: FallbackWatch) -> dict[QueueKey, int]:
        obj = fsutil.read_json_with_bak(self.path, default=None, validate=_parse_broadcast, warn=watch, crc=True)
        return {} if obj is None else _parse_broadcast(obj)


def file_problem(path: Path) -> str | None:
    """Why a broadcast offsets file (or its ``.bak``) cannot be read, or None (``store check``)."""
    return fsutil.json_problem(path, _parse_broadcast, crc=True)


def broadcast_offset_files(layout: Layout, group: str | None = None) -> list[tuple[str, str]]:
    """(client id, group) of every broadcast offsets file (of ``group`` only, if given),
    sorted; directories whose names are not valid ids are passed over."""
    root = layout.broadcast_offsets_root
    try:
        cids = os.listdir(root)
    except (FileNotFoundError, NotADirectoryError):
        return []
    out = []
    for cid in cids:
        if not CLIENT_ID_RE.match(cid) or cid in (".", ".."):
            continue
        try:
            groups = [group] if group is not None else os.listdir(layout.broadcast_client_dir(cid))
        except (FileNotFoundError, NotADirectoryError):
            continue
        out += [(cid, g) for g in groups if NAME_RE.match(g) and layout.broadcast_offsets(cid, g).exists()]
    return sorted(out)


def reset_lost(layout: Layout, oldest: Callable[[str, int], int], topics: Mapping[str, int],
               warn: Warn) -> list[str]:
    """``store recover``: a client whose file is unreadable and whose ``.bak`` is readable
    gets the file back from the ``.bak`` (what its consumers read meanwhile); one whose file
    and ``.bak`` are both unreadable gets, for every topic of ``topics`` (name -> queue
    count), each queue's oldest message (``oldest``): the damaged file no longer says which
    topics it read, and nothing may be skipped. One warning line per client; returns them."""
    said: list[str] = []
    for cid, group in broadcast_offset_files(layout):
        path = layout.broadcast_offsets(cid, group)
        with exclusive(lock_beside(path)):
            fell_back: list[str] = []
            try:
                table = BroadcastOffsetStore(layout, cid, group, warn=fell_back.append).load()
                if not fell_back:
                    continue
                what = f"{path.name} was unreadable; restored from its .bak"
            except CorruptionError:
                table = {(t, q): oldest(t, q) for t, n in topics.items() for q in range(n)}
                what = "offsets could not be recovered (offsets.json and its .bak unreadable); " \
                       "reset to the oldest message"
            fsutil.atomic_write_json_crc(path, _broadcast_json(table), keep_bak=False)
        said.append(f"broadcast client {cid} of group {group}: {what}")
    for line in said:
        warn(line)
    return said
