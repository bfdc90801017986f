"""Damage the user has been told about: the commit-log ranges that ``mqctl store recover``
found damaged and could not repair (a record's bytes are gone; its message is lost).

A damaged record in the middle of the log is never repaired: nothing else holds its bytes.
Recovery steps over it and readers skip it, but without this file ``store check`` would
report it — and exit 1 — for ever, so a script or a monitor running ``store check`` could not
tell an old, accepted loss from new damage. ``store recover`` is the acknowledgement (as
``zpool clear`` is for ZFS's error log): it records what it found here, and ``store check``
then lists that damage as known (exit 0, a line saying so) while any damage *not* listed —
a new record, another offset — still fails it. A problem of a consume-queue entry pointing
into a known range is the same loss seen from the queue, and known too.

Only this module reads and writes the file; ``recovery.py`` hands it each full recovery's
findings, ``check.py`` asks it. Each full ``store recover`` replaces the whole list with what
its scan found, so a range whose segment retention removed drops out, and a range that was
already listed keeps the time it was first reported.

Format (``config/knownDamage.json``; standard JSON written with
:func:`fsutil.atomic_write_json_crc`: temp file, fsync, rename; ``crc`` as every checksummed
metadata file)::

    {"version": 1,
     "ranges": [{"start": <log offset>, "end": <log offset, exclusive>,
                 "reason": "<why the scan refused the record at start>",
                 "reportedAt": <ms since the epoch: the first recover that found it>}, ...],
     "crc": <CRC-32 of the canonical JSON without crc>}

``ranges`` are sorted by ``start`` and do not overlap (``end`` is where the next valid record
starts). A file that is missing means nothing is known; one that cannot be trusted (bad JSON,
a crc mismatch) is itself reported by ``store check``, and the damage it listed counts as
new again — failing safe — until the next ``store recover`` writes it again.
"""
from __future__ import annotations

import bisect
import json
import os
from dataclasses import dataclass
from typing import Any

from store.fsutil import atomic_write_json_crc, crc_problem, fsync_dir
from store.layout import Layout

VERSION = 1


@dataclass(frozen=True)
class KnownRange:
    """Commit-log bytes ``[start, end)`` that a ``store recover`` reported damaged."""

    start: int
    end: int
    reason: str
    reported_at: int

    def to_json(self) -> dict[str, Any]:
        return {"start": self.start, "end": self.end, "reason": self.reason, "reportedAt": self.reported_at}


@dataclass(frozen=True)
class KnownDamage:
    """What the file lists, and why it could not be read (``problem``: then nothing is known)."""

    ranges: tuple[KnownRange, ...] = ()
    problem: str | None = None

    def find(self, log_offset: int | None) -> KnownRange | None:
        """The known range holding ``log_offset``, if any."""
        if log_offset is None or not self.ranges:
            return None
        i = bisect.bisect_right([r.start for r in self.ranges], log_offset) - 1
        return self.ranges[i] if i >= 0 and log_offset < self.ranges[i].end else None


def _parse(obj: Any) -> tuple[KnownRange, ...]:
    why = crc_problem(obj)
    if why is not None:
        raise ValueError(why)
    if obj.get("version") != VERSION:
        raise ValueError(f"unknown version {obj.get('version')!r}")
    ranges = [KnownRange(int(r["start"]), int(r["end"]), str(r["reason"]), int(r["reportedAt"]))
              for r in obj["ranges"]]
    return tuple(sorted(ranges, key=lambda r: r.start))


def load(layout: Layout) -> KnownDamage:
    """The known damage; never raises for a bad file (it is reported, not trusted)."""
    path = layout.known_damage_json
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return KnownDamage()
    except OSError as exc:
        return KnownDamage(problem=f"unreadable ({exc.strerror})")
    try:
        return KnownDamage(_parse(json.loads(raw)))
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        return KnownDamage(problem=f"cannot be trusted ({exc}): the damage it listed is reported as new; "
                                   f"mqctl store recover writes it again")


def record(layout: Layout, found: list[tuple[int, int, str]], now_ms: int) -> None:
    """Replace the list with ``found`` (``(start, end, reason)`` of each damaged range a full
    recovery stepped over); a range already listed keeps its first ``reportedAt``. Nothing
    found: the file goes."""
    path = layout.known_damage_json
    if not found:
        try:
            os.unlink(path)
        except FileNotFoundError:
            return
        fsync_dir(path.parent)
        return
    before = load(layout)
    first = {r.start: r.reported_at for r in before.ranges}
    ranges = [KnownRange(s, e, why, first.get(s, now_ms)) for s, e, why in sorted(found)]
    atomic_write_json_crc(path, {"version": VERSION, "ranges": [r.to_json() for r in ranges]}, keep_bak=False)
