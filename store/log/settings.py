"""``store.json``: the settings fixed when a store is created, their JSON form, and the file
with its ``.bak`` (written at creation, put back from the ``.bak``, or rebuilt from the store's
files by ``store recover`` when both are lost: :func:`load`)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from store.fsutil import atomic_write_json, read_json_with_bak
from store.layout import Layout, backup_of
from store.log import format as F

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Any, Callable

DEFAULT_QUEUES = 8
# The readers' sanity bound on a record's size is built from the format's 4 MiB, so a store
# may lower its message limit but not raise it past that.
LARGEST_MESSAGE_SIZE = F.MAX_MESSAGE_SIZE
# A segment must hold the largest record: its body plus at most 64 KiB of header, topic and
# properties.
SEGMENT_SPARE = 64 * 1024
# The end-of-segment trailer keeps the bytes left in an int32.
MAX_SEGMENT_SIZE = 2**31 - 1
MIN_SEGMENT_SIZE = 4096


@dataclass(frozen=True)
class StoreSettings:
    """``store.json``: fixed when the store is created."""

    max_message_size: int = F.MAX_MESSAGE_SIZE
    auto_create_topics: bool = True
    default_queues: int = DEFAULT_QUEUES
    commitlog_segment_size: int = F.COMMITLOG_SEGMENT_SIZE
    cq_segment_entries: int = F.CQ_SEGMENT_ENTRIES

    def validate(self, strict: bool = True, named: str = "commitlog_segment_size") -> None:
        """Refuse settings a store cannot work with (UsageError naming the limit; the segment
        size as the caller spells it, ``named``: ``--segment-size`` for ``mqctl init``).

        ``strict`` (what ``mqctl init`` asks) also requires room in a segment for the largest
        record a maximum-size body can make (:data:`SEGMENT_SPARE` more). Without it (what
        the engine requires of every new store, small test stores included) a segment need
        only hold :data:`MIN_SEGMENT_SIZE`; a record that then does not fit is refused when
        it is put."""
        from store.errors import UsageError
        if not 1 <= self.max_message_size <= LARGEST_MESSAGE_SIZE:
            raise UsageError(f"the maximum message size must be 1..{LARGEST_MESSAGE_SIZE} bytes (4 MiB), "
                             f"got {self.max_message_size}")
        if strict:
            least, rule = self.max_message_size + SEGMENT_SPARE, "the maximum message size + 64 KiB = "
        else:
            least, rule = MIN_SEGMENT_SIZE, ""
        if not least <= self.commitlog_segment_size <= MAX_SEGMENT_SIZE:
            raise UsageError(f"the segment size ({named}) must be at least {rule}{least} bytes, "
                             f"and at most {MAX_SEGMENT_SIZE}; got {self.commitlog_segment_size}")
        if not 1 <= self.default_queues <= 1024:
            raise UsageError(f"the default queue count must be 1..1024, got {self.default_queues}")

    def to_json(self) -> dict[str, Any]:
        return {"formatVersion": F.STORE_FORMAT_VERSION, "maxMessageSize": self.max_message_size,
                "autoCreateTopics": self.auto_create_topics, "defaultQueues": self.default_queues,
                "commitlogSegmentSize": self.commitlog_segment_size,
                "cqSegmentEntries": self.cq_segment_entries}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> "StoreSettings":
        if int(obj.get("formatVersion", 0)) != F.STORE_FORMAT_VERSION:
            raise ValueError(f"unsupported store format version {obj.get('formatVersion')!r}")
        return cls(max_message_size=int(obj["maxMessageSize"]),
                   auto_create_topics=bool(obj.get("autoCreateTopics", True)),
                   default_queues=int(obj.get("defaultQueues", DEFAULT_QUEUES)),
                   commitlog_segment_size=int(obj["commitlogSegmentSize"]),
                   cq_segment_entries=int(obj["cqSegmentEntries"]))


# -- the file: store.json and its .bak ---------------------------------------------------------

def restore_from_bak(layout: Layout, warn: Callable[[str], None], write: bool) -> bool:
    """``store.json`` is missing or not JSON and its ``.bak`` readable: put it back (True).
    ``write`` False (``store check``, ``top``: an open that changes nothing): only read it."""
    from store.errors import StoreError
    bak = backup_of(layout.store_json)
    try:
        obj = read_json_with_bak(bak)
        if obj is None:
            return False
        StoreSettings.from_json(obj)
    except (StoreError, ValueError, KeyError, TypeError):
        return False
    if not write:
        return True
    state = "unreadable" if layout.store_json.exists() else "missing"
    warn(f"{layout.store_json} is {state}; restored from {bak.name}")
    try:
        atomic_write_json(layout.store_json, obj, keep_bak=False)
    except StoreError:
        pass   # a store this process cannot write: read from the .bak
    return True


def write_new(layout: Layout, settings: StoreSettings) -> None:
    """Write ``store.json`` (once, at creation; or rebuilt by :func:`load`) and its ``.bak``
    (durable by store.json's directory fsync: the fallback a damaged one names)."""
    atomic_write_json(backup_of(layout.store_json), settings.to_json(), keep_bak=False, sync_dir=False)
    atomic_write_json(layout.store_json, settings.to_json(), keep_bak=False)


def load(layout: Layout, warn: Callable[[str], None], rebuild: bool = False) -> StoreSettings:
    """The settings of ``store.json`` (its ``.bak`` when it is unreadable). Both unreadable:
    ``CorruptionError`` naming ``mqctl store recover``, unless ``rebuild`` (that command) —
    then rebuilt from what the store shows (:func:`inferred`), each guess said in ``warn``."""
    from store.errors import CorruptionError, DataError
    try:
        obj = read_json_with_bak(layout.store_json, warn=warn)
    except CorruptionError as exc:
        if not rebuild:
            raise CorruptionError(exc.path, exc.offset, f"{exc.reason}; run mqctl store recover (it rebuilds "
                                  f"{layout.store_json.name} from the commit log's segments)") from exc
        settings, notes = inferred(layout)
        write_new(layout, settings)
        warn(f"{layout.store_json} and {backup_of(layout.store_json).name} were unreadable: rebuilt from the store's "
             f"files; " + "; ".join(notes))
        return settings
    try:
        return StoreSettings.from_json(obj)
    except (ValueError, KeyError, TypeError) as exc:
        raise DataError(f"{layout.store_json}: {exc}") from exc


def inferred(layout: Layout) -> tuple[StoreSettings, list[str]]:
    """Settings for a store whose ``store.json`` is lost, from its files: the commit log's
    and the consume queues' segment sizes from their segments' names (bases are multiples of
    it; two segments in a row tell it exactly), else the default where it agrees with every
    name and size found (``CorruptionError`` saying what to do where it does not); the other
    settings at their defaults. Returns them with one note per setting, saying how it was
    found."""
    from store.errors import CorruptionError
    from store.fsutil import segment_bases
    d = StoreSettings()
    log = [(b, _size(layout.commitlog_dir, b)) for b in segment_bases(layout.commitlog_dir)]
    queues = [[(b, _size(q, b)) for b in segment_bases(q)]
              for t in _subdirs(layout.consumequeue_dir) for q in _subdirs(t)]
    seg = _unit([log], d.commitlog_segment_size)
    cq = _unit(queues, d.cq_segment_entries * F.CQ_ENTRY_SIZE)
    for what, got, path in (("commit-log segment size", seg, layout.commitlog_dir),
                            ("consume-queue segment size", cq, layout.consumequeue_dir)):
        if got is None:
            raise CorruptionError(str(layout.store_json), 0, f"unreadable, and so is its .bak, and the {what} cannot "
                                  f"be told from the segments in {path} (their names disagree, or the default does "
                                  f"not fit them): put back a copy of store.json, or write one as mqctl init would "
                                  f"with that store's settings")
    assert seg is not None and cq is not None
    # (the largest message a segment holds, as mqctl init requires, where it is below the default)
    largest = min(d.max_message_size, max(seg[0] - SEGMENT_SPARE, 1))
    settings = StoreSettings(max_message_size=largest, commitlog_segment_size=seg[0],
                             cq_segment_entries=cq[0] // F.CQ_ENTRY_SIZE)
    notes = [f"commitlog segment size {seg[0]} ({seg[1]})",
             f"consume-queue segments of {settings.cq_segment_entries} entries ({cq[1]})",
             f"maximum message size {largest} "
             f"({'the default' if largest == d.max_message_size else 'what a segment holds'})",
             f"default queues {d.default_queues} and topic auto-creation {'on' if d.auto_create_topics else 'off'} "
             f"(the defaults: they cannot be told)"]
    return settings, notes


def _unit(dirs: list[list[tuple[int, int]]], default: int) -> tuple[int, str] | None:
    """The segment size of directories of segments ``(base, size)``: the step between two
    segments in a row where one directory has them (the same in all), else ``default`` when
    every base is a multiple of it and no segment is bigger; None when neither holds."""
    steps = {b2 - b1 for segs in dirs for (b1, _), (b2, _) in zip(segs, segs[1:])}
    if len(steps) > 1:
        return None
    if steps:
        step = steps.pop()
        ok = step > 0 and all(b % step == 0 and s <= step for segs in dirs for b, s in segs)
        return (step, "from the segments' names") if ok else None
    ok = all(b % default == 0 and s <= default for segs in dirs for b, s in segs)
    return (default, "the default: it fits every segment found") if ok else None


def _size(directory: Path, base: int) -> int:
    try:
        return os.stat(directory / F.segment_name(base)).st_size
    except OSError:
        return 0


def _subdirs(directory: Path) -> list[Path]:
    try:
        return [directory / n for n in sorted(os.listdir(directory)) if (directory / n).is_dir()]
    except OSError:
        return []
