"""``store.json``: the settings fixed when a store is created, their JSON form, and the file
with its ``.bak`` (written at creation, put back from the ``.bak``, or rebuilt from the store's
files by ``store recover`` when both are lost: :func:`load`)."""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from store.fsutil import atomic_write_json, atomic_write_json_crc, crc_mismatch, read_json_with_bak
from store.layout import Layout, backup_of, segment_file
from store.log import filestat
from store.log import format as F

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Any, Callable

    from store.log.commitlog import CommitLog

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
        if not 1 <= self.default_queues <= F.MAX_QUEUES:
            raise UsageError(f"the default queue count must be 1..{F.MAX_QUEUES}, got {self.default_queues}")

    def to_json(self) -> dict[str, Any]:
        return {"formatVersion": F.STORE_FORMAT_VERSION, "maxMessageSize": self.max_message_size,
                "autoCreateTopics": self.auto_create_topics, "defaultQueues": self.default_queues,
                "commitlogSegmentSize": self.commitlog_segment_size,
                "cqSegmentEntries": self.cq_segment_entries}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> StoreSettings:
        """The settings of a parsed ``store.json`` (ValueError, KeyError or TypeError when
        they are not: a wrong ``crc``, a missing field, a size no store can have)."""
        if not isinstance(obj, dict):
            raise TypeError("not a JSON object")
        why = crc_mismatch(obj)   # (a store.json of an earlier version has none: read as it is)
        if why is not None:
            raise ValueError(why)
        if int(obj.get("formatVersion", 0)) != F.STORE_FORMAT_VERSION:
            raise ValueError(f"unsupported store format version {obj.get('formatVersion')!r}")
        s = cls(max_message_size=int(obj["maxMessageSize"]),
                auto_create_topics=bool(obj.get("autoCreateTopics", True)),
                default_queues=int(obj.get("defaultQueues", DEFAULT_QUEUES)),
                commitlog_segment_size=int(obj["commitlogSegmentSize"]),
                cq_segment_entries=int(obj["cqSegmentEntries"]))
        # (the ranges every store has: a size out of them would make readers divide by zero,
        # or misplace every record, rather than say what is wrong)
        for name, value, hi in (("maxMessageSize", s.max_message_size, LARGEST_MESSAGE_SIZE),
                                ("defaultQueues", s.default_queues, F.MAX_QUEUES),
                                ("commitlogSegmentSize", s.commitlog_segment_size, MAX_SEGMENT_SIZE),
                                ("cqSegmentEntries", s.cq_segment_entries, MAX_SEGMENT_SIZE // F.CQ_ENTRY_SIZE)):
            if not 1 <= value <= hi:
                raise ValueError(f"{name} {value} is out of range (1..{hi})")
        return s


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


def put_back(layout: Layout, warn: Callable[[str], None]) -> None:
    """``store recover``: a ``store.json`` that is missing or cannot be read is put back from
    its ``.bak``, and a ``.bak`` that cannot be read is written again from ``store.json``."""
    main, bak = layout.store_json, backup_of(layout.store_json)
    if not main.exists() or problem(main) is not None:
        restore_from_bak(layout, warn, write=True)
    elif problem(bak) is not None:
        atomic_write_json_crc(bak, _parse(main).to_json(), keep_bak=False)
        warn(f"{bak} was unreadable; written again from {main.name}")


def write_new(layout: Layout, settings: StoreSettings) -> None:
    """Write ``store.json`` (once, at creation; or rebuilt by :func:`load`) and its ``.bak``
    (durable by store.json's directory fsync: the fallback a damaged one names)."""
    atomic_write_json_crc(backup_of(layout.store_json), settings.to_json(), keep_bak=False, sync_dir=False)
    atomic_write_json_crc(layout.store_json, settings.to_json(), keep_bak=False)


def load(layout: Layout, warn: Callable[[str], None], rebuild: bool = False) -> StoreSettings:
    """The settings of ``store.json`` (its ``.bak`` when it is unreadable). Both unreadable:
    ``CorruptionError`` naming ``mqctl store recover``, unless ``rebuild`` (that command) —
    then rebuilt from what the store shows (:func:`inferred`), each guess said in ``warn``."""
    from store.errors import CorruptionError, DataError
    got: list[StoreSettings] = []   # (what the copy read made: parsed once)
    try:
        obj = read_json_with_bak(layout.store_json, validate=lambda o: got.append(StoreSettings.from_json(o)),
                                 warn=warn)
    except CorruptionError as exc:
        if not rebuild:
            raise CorruptionError(exc.path, exc.offset, f"{exc.reason}; run mqctl store recover (it rebuilds "
                                  f"{layout.store_json.name} from the commit log's segments)") from exc
        settings, notes = inferred(layout)
        write_new(layout, settings)
        warn(f"{layout.store_json} and {backup_of(layout.store_json).name} were unreadable: rebuilt from the store's "
             f"files; " + "; ".join(notes))
        return settings
    if got:
        return got[-1]
    raise DataError(f"{layout.store_json}: missing, and so is its .bak (got {obj!r})")


def problem(path: Path) -> str | None:
    """Why ``path`` (``store.json`` or its ``.bak``) cannot be read as settings (not JSON, a
    wrong ``crc``, a missing field or a size out of range); None when it can or is missing."""
    import json
    try:
        _parse(path)
    except FileNotFoundError:
        return None
    except json.JSONDecodeError as exc:
        return f"not valid JSON: {exc}"
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"unreadable: {exc}"
    return None


def log_problem(settings: StoreSettings, log: CommitLog) -> str | None:
    """Why the commit log's segments contradict ``settings``' segment size, or None. Segment
    bases are multiples of the true size and no segment is bigger than it, so a size that
    does not divide every base, or that a segment outgrows, is not the store's (a flipped bit
    in a ``store.json`` of an earlier version, which has no ``crc``, or a copy of another
    store's): readers would look for records at the wrong offsets and take the log for
    damaged, and a writer would start its next segment at a wrong name. Cheap enough for
    every open: the log's listing (which the open reads anyway) and a ``stat`` of its last two
    segments; a crash never leaves a store that fails it (segments are only ever created at
    multiples of the size, and filled to it at most)."""
    size = log.segment_size
    bases = log.segments()
    for b in bases:
        if b % size:
            return (f"commitlogSegmentSize is {size}, but the commit-log segment {F.segment_name(b)} starts at "
                    f"offset {b}, not a multiple of it{_told(log)}")
    # Segments named one size apart say the size themselves: bytes a segment holds past it
    # are then no record's (no reader reads past a segment's size), not the settings' fault.
    spaced = len(bases) > 1 and all(b2 - b1 == size for b1, b2 in zip(bases, bases[1:]))
    for b in bases[-2:]:
        n = _size(log.dir, b)
        if n > size and not spaced:
            return (f"commitlogSegmentSize is {size}, but the commit-log segment {F.segment_name(b)} holds {n} "
                    f"bytes{_told(log)}")
    return None


def queue_problem(settings: StoreSettings, qdir: Path, bases: list[int]) -> str | None:
    """Why the consume queue in ``qdir`` (segments ``bases``) contradicts ``settings``'
    consume-queue segment size (:func:`log_problem`'s rule for its segments), or None.
    Asked once per queue and handle, at its first look (``queueends.py``: the queue's listing
    is read then anyway), and by ``store recover`` of every queue."""
    size = settings.cq_segment_entries * F.CQ_ENTRY_SIZE
    bad = next((b for b in bases if b % size), None)
    if bad is None:
        bad = next((b for b in bases[-2:] if _size(qdir, b) > size), None)
    if bad is None:
        return None
    got = _unit([[(b, _size(qdir, b)) for b in bases]], F.CQ_SEGMENT_ENTRIES * F.CQ_ENTRY_SIZE)
    if got is None or got[0] % F.CQ_ENTRY_SIZE:
        # The names tell no size either: the queue's own damage (a segment renamed or lost),
        # which its repair rebuilds from the log (``queueends.py``), not the settings'.
        return None
    return (f"cqSegmentEntries is {settings.cq_segment_entries}, but the consume-queue segment "
            f"{segment_file(qdir, bad)} does not fit it (the segments' names say {got[0] // F.CQ_ENTRY_SIZE})")


def queue_disagrees(layout: Layout, settings: StoreSettings, qdir: Path, bases: list[int]) -> None:
    """``CorruptionError`` naming ``store.json`` and ``mqctl store recover`` when the queue
    in ``qdir`` contradicts ``settings`` (:func:`queue_problem`): its entries would be read
    at the wrong places."""
    why = queue_problem(settings, qdir, bases)
    if why is not None:
        from store.errors import CorruptionError
        raise CorruptionError(str(layout.store_json), 0, f"{why}: its settings do not fit the store's files, which "
                                                         f"would be misread; run mqctl store recover (it corrects "
                                                         f"{layout.store_json.name} from the segments' names)")


def _queues_problem(layout: Layout, settings: StoreSettings) -> str | None:
    """:func:`queue_problem` of every consume queue of the store (``store recover``)."""
    from store.fsutil import segment_bases
    for q in _queue_paths(layout):
        why = queue_problem(settings, q, segment_bases(q))
        if why is not None:
            return why
    return None


def _told(log: CommitLog) -> str:
    """What the segments' names say the segment size is (for a message), or nothing."""
    got = _unit([[(b, _size(log.dir, b)) for b in log.segments()]], F.COMMITLOG_SEGMENT_SIZE)
    return f" (the segments' names say {got[0]})" if got is not None else ""


def agreeing(layout: Layout, settings: StoreSettings, log: CommitLog, warn: Callable[[str], None],
             rebuild: bool = False) -> StoreSettings:
    """``settings`` (read from ``store.json``, ``log`` opened with them) when the commit log's
    segments agree with them (:func:`log_problem`), else settings that do: the ``.bak``'s
    when they do (warned; ``rebuild`` puts the file back from it), else ``CorruptionError``
    naming ``store.json``, what disagrees and ``mqctl store recover`` — which (``rebuild``)
    corrects the segment size from the segments' names and keeps the other settings, or
    refuses where the names cannot tell it. Never a guess that makes readers skip records."""
    from store.errors import CorruptionError
    from store.log.commitlog import CommitLog
    why = log_problem(settings, log) or (_queues_problem(layout, settings) if rebuild else None)
    if why is None:
        return settings
    path, bak_path = layout.store_json, backup_of(layout.store_json)
    bak = _read(bak_path)
    if bak is not None and bak != settings:
        if (log_problem(bak, CommitLog(log.dir, bak.commitlog_segment_size)) is None
                and (not rebuild or _queues_problem(layout, bak) is None)):
            if rebuild:
                atomic_write_json_crc(path, bak.to_json(), keep_bak=False)
                warn(f"{path}: {why}; put back from {bak_path.name}, which agrees with the segments")
            else:
                warn(f"{path}: {why}; using {bak_path.name}, which agrees with the segments "
                     f"(mqctl store recover puts it back)")
            return bak
    if not rebuild:
        raise CorruptionError(str(path), 0, f"{why}: its settings do not fit the store's files, which would be "
                                            f"misread; run mqctl store recover (it corrects {path.name} from the "
                                            f"commit log's segment names)")
    fixed, said = settings, []
    if log_problem(settings, log) is not None:
        got = _unit([[(b, _size(log.dir, b)) for b in log.segments()]], F.COMMITLOG_SEGMENT_SIZE)
        if got is None:
            raise CorruptionError(str(path), 0, f"{why}, and the commit-log segment size cannot be told from the "
                                                f"segments in {log.dir} (their names disagree, or the default does "
                                                f"not fit them): put back a copy of {path.name}, or rename the "
                                                f"segment that is out of line")
        fixed = replace(fixed, commitlog_segment_size=got[0])
        said.append(f"commitlogSegmentSize {got[0]} ({got[1]})")
    if _queues_problem(layout, fixed) is not None:
        from store.fsutil import segment_bases
        cq = _unit([[(b, _size(q, b)) for b in segment_bases(q)] for q in _queue_paths(layout)],
                   F.CQ_SEGMENT_ENTRIES * F.CQ_ENTRY_SIZE)
        if cq is None or cq[0] % F.CQ_ENTRY_SIZE:
            raise CorruptionError(str(path), 0, f"{why}, and the consume-queue segment size cannot be told from the "
                                                f"segments in {layout.consumequeue_dir}: put back a copy of "
                                                f"{path.name}")
        fixed = replace(fixed, cq_segment_entries=cq[0] // F.CQ_ENTRY_SIZE)
        said.append(f"cqSegmentEntries {fixed.cq_segment_entries} ({cq[1]})")
    write_new(layout, fixed)
    warn(f"{path}: {why}: corrected to {' and '.join(said)}; its other settings kept")
    return fixed


def _parse(path: Path) -> StoreSettings:
    import json
    return StoreSettings.from_json(json.loads(path.read_bytes()))


def _read(path: Path) -> StoreSettings | None:
    """The settings in ``path``, or None when it cannot be read as settings."""
    try:
        return _parse(path)
    except (OSError, ValueError, KeyError, TypeError):
        return None


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
    queues = [[(b, _size(q, b)) for b in segment_bases(q)] for q in _queue_paths(layout)]
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
    # (untimed: on Linux >= 6.13 a look asking for times makes a sync writer's next
    # fdatasync of that segment commit the journal: filestat.py)
    try:
        return filestat.untimed(segment_file(directory, base))[1]
    except OSError:
        return 0


def _queue_paths(layout: Layout) -> list[Path]:
    from store.log.consumequeue import queue_dirs
    return [layout.queue_dir(topic, qid) for topic, qid in queue_dirs(layout)]
