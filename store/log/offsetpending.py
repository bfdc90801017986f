"""Pending offset commits: ``config/consumerOffset.pending/<name>.json``, what a group member
is about to commit to the offset table, so that a member writing the table commits it too.

Every member of every group commits into the one offset table under one lock, and each write
is an fsync: sixteen members draining a backlog spent most of their time waiting for each
other's writes, one at a time. Commits of concurrent consumption only move offsets forward
(``increase_only``), so whoever writes the table may write everyone's: a member publishes its
offsets here before it takes the table's lock, and a member that writes the table merges every
published file into that write and removes it. A member that then gets the lock finds its
offsets in the table and writes nothing; one still waiting for the lock stops waiting when
the table's snapshot (fsynced before it is renamed into place) holds them.

A publication is a hint, never the commit: a member counts its offsets committed only when it
has seen them in the snapshot or written them itself under the lock, and it writes them when
they are not there (its file was lost, overwritten by its next one, or taken by a writer that
died before writing).
So the files are written without fsync (a power cut may leave one empty: it is skipped), a
file that cannot be read is removed by the next writer, and the merge respects what the
member's own commit would: an offset never moves back, and a topic whose reset epoch moved
since the member loaded it (``offsets reset``, ``topic delete``) is skipped. A queue the
table has no offset of is left to its member (see :func:`merge`). Orderly
consumption's commits (which may move back) are never published.

Format (compact JSON; ``<name>`` is a digest of group and client id, which together may be
longer than a file name)::

    {"group": "<group>", "clientId": "<clientId>",
     "offsets": {"<topic>": {"<queueId>": <offset>, ...}, ...},
     "resetEpoch": {"<topic>": <n>, ...}}
"""
from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from store.fsutil import ensure_dir, open_private
from store.heldlocks import pid_alive
from store.layout import Layout
from store.log.offsettable import NO_OFFSET, ClusterTable, is_int
from store.names import validate_any_topic, validate_group

QueueKey = tuple[str, int]


@dataclass(frozen=True)
class Pending:
    """One published file: a member's offsets and the reset epochs it computed them under."""

    path: Path
    group: str
    offsets: dict[QueueKey, int]
    epochs: dict[str, int]


# hashlib's own blake2s (the same function), without the OpenSSL bindings that importing
# hashlib loads first: ~2 ms of every consumer's start-up, for a file name
try:
    from _blake2 import blake2s
except ImportError:   # an interpreter built without it
    from hashlib import blake2s


def path_of(layout: Layout, group: str, client_id: str) -> Path:
    digest = blake2s(f"{group}\0{client_id}".encode(), digest_size=12).hexdigest()
    return layout.consumer_offset_pending(digest)


def publish(layout: Layout, group: str, client_id: str, offsets: Mapping[QueueKey, int],
            epochs: Mapping[str, int]) -> Path | None:
    """Publish ``offsets`` (replacing the member's previous file); None when it could not be
    written (the commit goes on without it: a publication only saves writes)."""
    table: dict[str, dict[str, int]] = {}
    for (topic, queue_id), offset in offsets.items():
        table.setdefault(topic, {})[str(queue_id)] = offset
    data = json.dumps({"group": group, "clientId": client_id, "offsets": table,
                       "resetEpoch": {t: epochs.get(t, 0) for t in table}},
                      separators=(",", ":")).encode()
    path = path_of(layout, group, client_id)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        try:
            fd = open_private(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        except FileNotFoundError:
            ensure_dir(path.parent, durable=False)
            fd = open_private(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            os.write(fd, data)   # (a few hundred bytes: one write)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError:
        return None
    return path


def withdraw(path: Path) -> None:
    """Remove a publication (already gone: another member merged it)."""
    try:
        os.unlink(path)
    except OSError:
        pass


def discard_all(layout: Layout) -> int:
    """Remove every publication; how many there were. Recovery does, before it moves offsets
    back to shortened queues: a publication written before a power cut may hold offsets of
    messages the cut took, and a later write would merge them past the queue's new end."""
    try:
        entries = list(os.scandir(layout.consumer_offset_pending_dir))
    except OSError:
        return 0
    for entry in entries:
        withdraw(Path(entry.path))
    return len(entries)


def read_all(layout: Layout) -> tuple[list[Pending], list[Path]]:
    """Every published file (under the table's lock), and those that cannot be read."""
    found: list[Pending] = []
    bad: list[Path] = []
    try:
        every = list(os.scandir(layout.consumer_offset_pending_dir))
    except OSError:
        return found, bad
    entries = [e for e in every if e.name.endswith(".json") and not e.name.startswith(".")]
    for e in every:   # a member killed between its write and rename left ``.<name>.<pid>.tmp``
        pid = e.name.rsplit(".", 2)[-2] if e.name.startswith(".") and e.name.endswith(".tmp") else ""
        if pid.isdigit() and not pid_alive(int(pid)):
            withdraw(Path(e.path))
    for entry in entries:
        path = Path(entry.path)
        try:
            with open(path, "rb") as f:
                found.append(_parse(path, json.loads(f.read())))
        except FileNotFoundError:
            continue   # merged and removed meanwhile
        except (OSError, ValueError):
            bad.append(path)
    return found, bad


def _parse(path: Path, obj: Any) -> Pending:
    """A publication's content, checked; ``ValueError`` on any wrong shape."""
    if not isinstance(obj, dict) or not isinstance(obj.get("offsets"), dict) \
            or not isinstance(obj.get("resetEpoch"), dict) or not isinstance(obj.get("group"), str):
        raise ValueError("not a pending commit")
    try:
        group = validate_group(obj["group"])
        offsets: dict[QueueKey, int] = {}
        for topic, queues in obj["offsets"].items():
            validate_any_topic(topic)
            if not isinstance(queues, dict):
                raise ValueError(f"bad queues of {topic!r}")
            for q, offset in queues.items():
                if not q.isdigit() or not is_int(offset) or offset < 0:
                    raise ValueError(f"bad offset {offset!r} of queue {q!r}")
                offsets[(topic, int(q))] = offset
        epochs = {t: n for t, n in obj["resetEpoch"].items() if isinstance(t, str) and is_int(n)}
    except Exception as exc:   # the names' checks raise UsageError
        raise ValueError(str(exc)) from exc
    return Pending(path, group, offsets, epochs)


def merge(table: ClusterTable, pending: Pending) -> bool:
    """Apply one publication as its member's own commit would (forward only, within the reset
    epochs it names), to queues the table has an offset of; whether the table changed."""
    changed = False
    for (topic, queue_id), offset in sorted(pending.offsets.items()):
        if table.epoch(topic, pending.group) != pending.epochs.get(topic, 0):
            continue
        old = table.get(topic, pending.group, queue_id)
        # Only an offset the table has moves: a queue's first commit (its start) is written
        # by its member. A dead member's start may name a topic deleted since, which had no
        # offsets of the group to drop, so no epoch moved: it would land in the topic made anew.
        if old != NO_OFFSET and offset > old:
            table.put(topic, pending.group, queue_id, offset)
            changed = True
    return changed

