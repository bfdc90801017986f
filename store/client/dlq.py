"""The DLQ resend record: which dead letters of each group ``mqctl dlq resend`` already resent.

``config/dlqResend.json`` (written with ``fsutil.atomic_write_json``, ``.bak`` kept)::

    {"offsetTable": {"<group>": <DLQ offset below which everything was resent>},
     "resent":      {"<group>": [<DLQ offsets at or above it resent one by one>]}}

the shape of the scheduler's ``delayOffset.json``: a resend of everything moves the offset to
the DLQ's end; a resend by ``--msg-id`` adds the offsets to ``resent`` (and folds them into the
offset when they become contiguous). A second ``resend`` therefore skips what was resent
(``--force`` resends anyway). Each chunk is written under the store's write lock: read the
record, append the copies, save the record, so two concurrent resends never both resend a
message. A crash between the append and the save resends that chunk again next time
(at-least-once, as everywhere in the store).
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from store.fsutil import atomic_write_json, read_json_with_bak

if TYPE_CHECKING:
    from store.log.broker import Store

RESEND_FILE = "dlqResend.json"


def record_path(store: "Store") -> Path:
    return store.layout.config_dir / RESEND_FILE


def _validate(obj: Any) -> None:
    if not isinstance(obj, dict):
        raise ValueError("top level is not an object")
    for g, off in (obj.get("offsetTable") or {}).items():
        if not isinstance(off, int) or off < 0:
            raise ValueError(f"offsetTable[{g!r}] is not an offset")
    for g, offs in (obj.get("resent") or {}).items():
        if not isinstance(offs, list) or not all(isinstance(o, int) for o in offs):
            raise ValueError(f"resent[{g!r}] is not a list of offsets")


def load_record(store: "Store") -> dict[str, Any]:
    """The record (empty tables when there is none yet)."""
    obj = read_json_with_bak(record_path(store), default=None, validate=_validate, warn=store.warn) or {}
    return {"offsetTable": dict(obj.get("offsetTable") or {}), "resent": dict(obj.get("resent") or {})}


def resent_offsets(record: dict[str, Any], group: str) -> tuple[int, set[int]]:
    """(the DLQ offset below which everything was resent, the offsets at or above it resent)."""
    return record["offsetTable"].get(group, 0), set(record["resent"].get(group, []))


def mark_resent(record: dict[str, Any], group: str, offsets: list[int], end: int | None) -> None:
    """Add ``offsets`` (and, with ``end``, everything below it) to ``group``'s resent set,
    folding contiguous offsets into the base offset."""
    base, done = resent_offsets(record, group)
    done.update(offsets)
    if end is not None:
        base = max(base, end)
    while base in done:
        base += 1
    record["offsetTable"][group] = base
    rest = sorted(o for o in done if o >= base)
    if rest:
        record["resent"][group] = rest
    else:
        record["resent"].pop(group, None)


def save_record(store: "Store", record: dict[str, Any]) -> None:
    """Write the record (caller holds the store's write lock: read, append, save)."""
    atomic_write_json(record_path(store), record)


def is_resent(record: dict[str, Any], group: str, offset: int) -> bool:
    base, done = resent_offsets(record, group)
    return offset < base or offset in done
