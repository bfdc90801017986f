"""Where the commit log begins as retention left it: ``config/commitlogStart.json``.

Only retention removes commit-log segments (the oldest, ``retention.py``). So that a segment
that went otherwise (deleted by hand, lost) is not taken for one of retention's, the offset
below which retention removed every segment is recorded, before they go (fsynced, the rename
too: after a power cut the record is never behind the segments gone)::

    {"start": <commit-log offset>, "crc": <CRC-32 of the canonical content: fsutil.json_crc>}

Written when a store is made (``start`` 0), by retention before it removes segments (never
moving back), and by ``store recover`` when it accepts the loss of segments that went
otherwise (with a warning). A log whose first segment begins past ``start`` lost the segments
between, and the messages they held: readers start past them as after retention, ``store
check`` reports it (:func:`missing`). A store made by an earlier version has no record until
its first ``store recover`` or the first ``store clean`` that removes a segment: until then
where its log begins is not judged.
"""
from __future__ import annotations

import json
from collections.abc import Callable

from store.fsutil import atomic_write_json_crc, crc_problem
from store.layout import Layout, segment_file

START = "start"


def read(layout: Layout) -> int | str | None:
    """The recorded start; None when there is no record; why, when it cannot be read."""
    try:
        obj = json.loads(layout.commitlog_start_json.read_bytes())
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"unreadable: {exc.strerror or exc}"
    except ValueError as exc:
        return f"not valid JSON: {exc}"
    why = crc_problem(obj)
    if why is not None:
        return why
    start = obj.get(START)
    ok = isinstance(start, int) and not isinstance(start, bool) and start >= 0
    return start if ok else f"bad {START} {start!r}"


def record(layout: Layout, start: int, sync_dir: bool = True) -> None:
    """Record that the log begins at ``start`` (never moving the record back): before
    retention removes the segments below it. ``sync_dir`` False: a new store's, whose name
    a power cut may lose (the log's start then goes unjudged; its content is synced all the
    same: never an empty file in its place)."""
    now = read(layout)
    if isinstance(now, int) and now >= start:
        return
    atomic_write_json_crc(layout.commitlog_start_json, {START: start}, keep_bak=False, sync_dir=sync_dir)


def missing(layout: Layout, log_start: int) -> tuple[str, int, str] | None:
    """What ``store check`` reports (file, byte offset, why) of a log that begins at
    ``log_start`` (measured before the record is read: retention records before it removes):
    segments below it that went otherwise (named by the first), or a record it cannot read."""
    start = read(layout)
    if isinstance(start, str):
        return (str(layout.commitlog_start_json), 0, f"record of where the commit log begins {start} "
                                                     f"(mqctl store recover writes it again)")
    if start is None or log_start <= start:
        return None
    return (str(segment_file(layout.commitlog_dir, start)), 0,
            f"missing: the commit log begins at offset {log_start}, but retention removed no segment past "
            f"offset {start}: the segments between ({log_start - start} bytes) went otherwise (deleted by hand, "
            f"or lost), and the messages they held with them (readers start past them); mqctl store recover "
            f"accepts the loss")


def accept(layout: Layout, log_start: int, warn: Callable[[str], None]) -> None:
    """``store recover``: the log begins where it does now. Segments gone otherwise are a loss
    it accepts (said with ``warn``), as is a record it cannot read (written again)."""
    start = read(layout)
    if isinstance(start, int) and log_start <= start:
        return
    if isinstance(start, int):
        warn(f"commit-log segments below offset {log_start} were gone, not removed by retention (deleted by "
             f"hand, or lost): the messages of their {log_start - start} bytes are lost; the log begins there now")
    elif start is not None:
        warn(f"{layout.commitlog_start_json}: {start}; written again (the log begins at offset {log_start})")
    atomic_write_json_crc(layout.commitlog_start_json, {START: log_start}, keep_bak=False)
