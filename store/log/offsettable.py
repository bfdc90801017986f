"""The clustering groups' offset table: ``config/consumerOffset.json``, its ``.bak``, and how
they are trusted and healed with the offsets journal (``offsetjournal.py``).

``consumerOffset.json`` is the broker's ``ConsumerOffsetManager`` table in standard JSON (queue
ids are string keys; fastjson's bare integer keys are not JSON, so they are not accepted)::

    {
      "offsetTable": {"<topic>@<group>": {"<queueId>": <offset>, ...}, ...},
      "resetEpoch":  {"<topic>@<group>": <n>, ...},
      "commitsApplied": <offset commits included: offsetcommits.py; absent when 0>,
      "journalEnd":  <position in consumerOffset.log after the last record this includes>,
      "crc":         <CRC-32 of the canonical content: fsutil.json_crc>
    }

``resetEpoch`` is ours: ``reset`` and ``delete_topic`` bump it, so a consumer that loaded the
table before a reset can learn that its in-memory offsets are stale instead of writing them
back over the reset. Topic and group names cannot contain ``@``, so the key splits cleanly.

The journal is normally ahead of the snapshot: a group member's commit is a journal record
alone (``offsetview.py``), and the snapshot is written again now and then, always after the
journal was synced up to the ``journalEnd`` it names (:func:`snapshot`).

Loading (:func:`load`): the snapshot when its crc checks, plus the journal's records after its
``journalEnd``; else the ``.bak`` (checked the same way) plus the journal after *its*
``journalEnd``; else the whole journal. Keys that appear in a damaged copy but in no
trusted source are *lost*: their groups are named (``store check``), refused with exit 5 by
reads of those groups only, and reset to the oldest message by ``store recover``.

A copy without a ``crc`` field is trusted only while no journal exists (a store of a version
before the journal, or a broker's file put in ``config/``): it is then the only record, and
the first write gives it a crc and starts the journal from it. Once a journal exists, the
journal is the log and the table a file derived from it, so a copy nobody vouches for never
wins over it, whatever its ``journalEnd`` or its age: a copy edited by hand (its crc taken
out) or written over by an older version is a damaged one — readers use the ``.bak`` and the
journal (one warning), ``store check`` names the copy (exit 1), and ``store recover``, or any
write of the table, writes it again from them. Offsets are changed with ``mqctl offsets
reset`` (a journal record), never by editing the file: the README documents no edit.

A trusted (crc) snapshot that disagrees with the journal up to the ``journalEnd`` it names
(the journal replaced by another copy, say) is what readers use, since they read the journal
only after ``journalEnd``; ``store check`` names it and ``store recover`` writes the journal
again from the snapshot, so that readers and the journal agree again.
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from store import fsutil
from store.errors import StoreIOError
from store.layout import Layout, backup_of
from store.log import offsetjournal as oj

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Any, TypeGuard

NO_OFFSET = -1
NO_CRC = "cannot be trusted (no crc field: edited by hand or written by an older version)"
TOPIC_GROUP_SEPARATOR = "@"
_KEY_TEXT = (rb'"((?:%RETRY%|%DLQ%)?[A-Za-z0-9_%|-]{1,127}' + TOPIC_GROUP_SEPARATOR.encode()
             + rb'[A-Za-z0-9_%|-]{1,127})"')  # (compiled when used: damage)


def is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def table_key(topic: str, group: str) -> str:
    return f"{topic}{TOPIC_GROUP_SEPARATOR}{group}"


def split_key(key: Any) -> tuple[str, str]:
    parts = key.split(TOPIC_GROUP_SEPARATOR) if isinstance(key, str) else []
    if len(parts) != 2 or not all(parts):
        raise ValueError(f"bad key {key!r}: expected '<topic>@<group>'")
    return parts[0], parts[1]


def parse_offset(value: Any) -> int:
    if not is_int(value) or value < NO_OFFSET:
        raise ValueError(f"bad offset {value!r}")
    return value


def _parse_queue_id(text: Any) -> int:
    if not isinstance(text, str) or not text.isdigit():
        raise ValueError(f"bad queue id {text!r}")
    return int(text)


def _json_object(obj: dict[str, Any], name: str) -> dict[str, Any]:
    # Absent sections are empty: a broker-written file has no resetEpoch.
    value = obj.get(name, {})
    if not isinstance(value, dict):
        raise ValueError(f"{name} is not an object")
    return value


@dataclass(eq=False, repr=False)   # (neither is used: start-up, store/__init__.py)
class ClusterTable:
    """The parsed offset table."""

    offsets: dict[str, dict[int, int]] = field(default_factory=dict)
    epochs: dict[str, int] = field(default_factory=dict)
    lost: set[str] = field(default_factory=set)   # keys whose offsets could not be recovered
    applied: int = 0   # the commit queue offset up to which offset commits are in (offsetcommits.py)
    # What changed since it was loaded (not stored): the journal record is built from these.
    touched: set[str] = field(default_factory=set, compare=False)
    dropped: set[str] = field(default_factory=set, compare=False)

    @classmethod
    def from_json(cls, obj: Any) -> ClusterTable:
        """Parse and validate; ``ValueError`` on any wrong shape."""
        if not isinstance(obj, dict):
            raise ValueError("top level is not an object")
        table = cls()
        for key, queues in _json_object(obj, "offsetTable").items():
            split_key(key)
            if not isinstance(queues, dict):
                raise ValueError(f"offsetTable[{key!r}] is not an object")
            table.offsets[key] = {_parse_queue_id(q): parse_offset(o) for q, o in queues.items()}
        for key, epoch in _json_object(obj, "resetEpoch").items():
            split_key(key)
            if not is_int(epoch) or epoch < 0:
                raise ValueError(f"resetEpoch[{key!r}] is not a count")
            table.epochs[key] = epoch
        applied = obj.get("commitsApplied", 0)
        if not is_int(applied) or applied < 0:
            raise ValueError("commitsApplied is not an offset")
        table.applied = applied
        lost = obj.get("lostOffsets", [])
        if not isinstance(lost, list):
            raise ValueError("lostOffsets is not a list")
        for key in lost:
            split_key(key)
            table.lost.add(key)
        return table

    def to_json(self) -> dict[str, Any]:
        offsets = {key: {str(q): o for q, o in queues.items()}
                   for key, queues in self.offsets.items() if queues}
        obj: dict[str, Any] = {"offsetTable": offsets, "resetEpoch": dict(self.epochs)}
        if self.lost:
            obj["lostOffsets"] = sorted(self.lost)
        if self.applied:
            obj["commitsApplied"] = self.applied
        return obj

    def change(self, lost_before: set[str], applied_before: int) -> dict[str, Any] | None:
        """The journal record of what changed since loading (None: nothing)."""
        record: dict[str, Any] = {}
        if self.applied != applied_before:
            record["applied"] = self.applied
        if self.dropped:
            record["drop"] = sorted(self.dropped)
        changed = {k: {str(q): o for q, o in self.offsets[k].items()} for k in sorted(self.touched)
                   if self.offsets.get(k)}
        if changed:
            record["set"] = changed
        epochs = {k: self.epochs[k] for k in sorted(self.touched) if k in self.epochs}
        if epochs:
            record["epoch"] = epochs
        if self.lost != lost_before:
            record["lost"] = sorted(self.lost)
        return record or None

    def drop(self, key: str) -> None:
        self.offsets.pop(key, None)
        self.dropped.add(key)
        self.touched.discard(key)

    def get(self, topic: str, group: str, queue_id: int) -> int:
        return self.offsets.get(table_key(topic, group), {}).get(queue_id, NO_OFFSET)

    def put(self, topic: str, group: str, queue_id: int, offset: int) -> None:
        key = table_key(topic, group)
        self.offsets.setdefault(key, {})[queue_id] = offset
        self.lost.discard(key)
        self.touched.add(key)

    def epoch(self, topic: str, group: str) -> int:
        return self.epochs.get(table_key(topic, group), 0)

    def bump_epoch(self, topic: str, group: str) -> int:
        key = table_key(topic, group)
        self.epochs[key] = self.epochs.get(key, 0) + 1
        self.touched.add(key)
        return self.epochs[key]

    def queues_of_group(self, group: str) -> Iterator[tuple[str, dict[int, int]]]:
        """(topic, queues) of every topic the group has offsets in."""
        for key, queues in self.offsets.items():
            topic, owner = split_key(key)
            if owner == group and queues:
                yield topic, queues


@dataclass(eq=False, repr=False)   # (neither is used: start-up, store/__init__.py)
class Loaded:
    """A table as :func:`load` found it."""

    table: ClusterTable
    journal: oj.Tail
    source: str = "snapshot"          # snapshot | bak | journal | lost (nothing to trust) | none
    lost: set[str] = field(default_factory=set)      # "<topic>@<group>" keys not recoverable
    problems: list[tuple[str, str]] = field(default_factory=list)   # (file, why) for check
    behind: bool = False              # the journal has records past the snapshot (commits since it)
    snapshot_end: int = 0             # the trusted copy's journalEnd
    unknown: bool = False             # damaged, no journal, and no group named: nothing to trust
    snapshot_bytes: int = 0           # the size of the copy read (bounds the journal's growth)
    damage: tuple[int, int] | None = None   # (load(deep=True)) the journal damaged in the middle: Journal.damage
    disagrees: bool = False           # (load(deep=True)) the snapshot is not what its journal replays to

    @property
    def repair(self) -> bool:
        """The next write must rewrite the snapshot even when nothing changed (a damaged copy),
        and the journal too when it is damaged in the middle."""
        return self.source not in ("snapshot", "none") or self.damage is not None or self.disagrees

    @property
    def damage_read(self) -> bool:
        """Whether readers meet the journal's damage (it ends the journal for them: the commits
        after it are not used); not when it lies below the trusted copy's ``journalEnd``, whose
        table holds them (the journal then no longer vouches for them should that copy be lost)."""
        return self.damage is not None and self.journal.base + self.damage[0] - oj.HEADER.size >= self.snapshot_end

    def lost_groups(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for key in sorted(self.lost):
            topic, group = split_key(key)
            out.setdefault(group, []).append(topic)
        return out


def _read_copy(path: Path) -> tuple[ClusterTable | None, int | None, str | None, bytes]:
    """(trusted table, its journalEnd, why not trusted, raw bytes) of one copy of the
    snapshot; a copy without a ``crc`` field has ``journalEnd`` -1, whatever it says (what
    it names is not vouched for: the caller trusts it only while no journal exists)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None, None, "missing", b""
    except OSError as exc:
        return None, None, f"unreadable ({exc.strerror})", b""
    try:
        obj = json.loads(raw) if raw.strip() else None
        if obj is None:
            return None, None, "empty", raw
        if isinstance(obj, dict) and fsutil.CRC_FIELD in obj:
            why = fsutil.crc_problem(obj)
            if why is not None:
                return None, None, why, raw
        table = ClusterTable.from_json(obj)
        je = obj.get("journalEnd") if fsutil.CRC_FIELD in obj else -1
        if not (is_int(je) and je >= -1):
            return None, None, "bad journalEnd", raw
    except ValueError as exc:
        return None, None, f"not valid ({exc})", raw
    return table, je, None, raw


def load(layout: Layout, deep: bool = False) -> Loaded:
    """The table from the snapshot, its ``.bak`` and the journal (see the module docstring);
    ``deep`` (recovery): the whole journal read for damage in its middle too."""
    loaded = _load(layout)
    if deep:
        # (the journal was synced up to the trusted copy's journalEnd before it was written)
        loaded.damage = oj.Journal(layout.consumer_offset_log).damage(synced=loaded.snapshot_end)
        loaded.disagrees = _disagrees(layout, loaded)
    return loaded


def _disagrees(layout: Layout, loaded: Loaded) -> bool:
    """A trusted snapshot, with no journal records past it, that is not what the whole journal
    replays to (readers use the snapshot: they read the journal only past its ``journalEnd``)."""
    tail = loaded.journal
    if loaded.source != "snapshot" or not tail.exists or not tail.header or loaded.behind \
            or tail.end < loaded.snapshot_end:
        return False
    whole = oj.Journal(layout.consumer_offset_log).read(None)
    return whole.end == tail.end and _replay({}, whole.records).to_json() != loaded.table.to_json()


def _load(layout: Layout) -> Loaded:
    path = layout.consumer_offset_json
    journal = oj.Journal(layout.consumer_offset_log)
    problems: list[tuple[str, str]] = []
    damaged_text = b""
    for source, copy in (("snapshot", path), ("bak", backup_of(path))):
        table, je, why, raw = _read_copy(copy)
        if table is not None and je == -1 and layout.consumer_offset_log.exists():
            table, why = None, NO_CRC   # written by hand, or by an older version meanwhile
        if table is None or je is None:
            damaged_text += raw
            if why != "missing" or source == "snapshot":
                problems.append((str(copy), f"offset table {why}"))
            continue
        tail = journal.read(je) if je >= 0 else oj.Tail([], 0, 0, exists=False)
        if tail.records:
            table = _replay(table.to_json(), tail.records)
        lost = _lost(damaged_text, table)
        if lost:
            problems.append(_lost_problem(path, lost))
        return Loaded(table, tail, source, lost, problems,
                      behind=bool(tail.records), snapshot_end=max(je, 0), snapshot_bytes=len(raw))
    tail = journal.read(None)
    if not tail.exists and all(why.endswith("missing") for _f, why in problems):
        return Loaded(ClusterTable(), tail, "none")   # a new store, or the config deleted by hand
    if tail.records:   # (its first record holds the whole table: the journal vouches for it)
        table = _replay({}, tail.records)
        lost = _lost(damaged_text, table)
        if tail.torn:
            # (imported only on damage, as below: not at a consume's start-up)
            from store.log import offsetgroups as og
            problems.append((str(layout.consumer_offset_log), "offsets journal damaged (ends early)"))
            # (the records it lost may be all a group the store showed had: none of it is left)
            lost |= {k for t, g in og.pairs_on_disk(layout) if (k := table_key(t, g)) not in table.offsets
                     and k not in table.epochs}
        if lost:
            problems.append(_lost_problem(path, lost))
        return Loaded(table, tail, "journal", lost, problems)
    # Damaged copies (junk, not absence) and no journal to vouch for any group (none, or not
    # even its first record readable; an older version's store has none): the groups the
    # store still shows are lost, with the topics their queue locks name, and refused until
    # ``store recover`` resets them to the oldest message. A group it shows with no topic
    # leaves the whole table unknown: every group refused, as when no group is shown at all.
    from store.log import offsetgroups as og
    problems.append((str(layout.consumer_offset_log), "offsets journal missing" if not tail.exists else
                     "offsets journal unreadable (not even its first record: it vouches for no offset)"))
    lost = _lost(damaged_text, ClusterTable()) | {table_key(t, g) for t, g in og.pairs_on_disk(layout)}
    if lost:
        problems.append(_lost_problem(path, lost))
    unpinned = og.unpinned_groups(layout, {split_key(k)[1] for k in lost})
    if unpinned or not lost:
        problems.append((str(path), (f"the committed offsets of {og.name_groups(unpinned)} are in no readable copy, "
                                     f"nor the topics they were in: " if unpinned else
                                     "no group's committed offsets can be read: ")
                         + "mqctl store recover starts them again per their consumers' --from"))
    # (header False: the next write starts the journal again instead of appending to junk)
    return Loaded(ClusterTable(), oj.Tail([], tail.base, tail.end, torn=True, exists=tail.exists, header=False),
                  "lost", lost, problems, unknown=bool(unpinned) or not lost)


def epochs(layout: Layout) -> dict[str, int] | None:
    """The reset epochs (``<topic>@<group>`` -> n) that :func:`load` would give, read without
    decoding the group members' commits: the snapshot, and of the journal's records after its
    ``journalEnd`` only those not in a commit's form (``offsetjournal.sets_only``), the only ones
    that can move an epoch: a member looking for a reset after another wrote the snapshot
    decoded hundreds of commits there (a second of a busy group's). None when the table is not
    in a state read so: the snapshot not trusted (its ``.bak`` or the journal is then used),
    offsets named lost, a record that does not parse; the caller then loads the table whole."""
    table, je, _why, _raw = _read_copy(layout.consumer_offset_json)
    if table is None or je is None or je < 0 or table.lost:
        return None
    state: dict[str, Any] = {"resetEpoch": dict(table.epochs)}
    for payload, _end in oj.Journal(layout.consumer_offset_log).read(je, raw=True).frames:
        if oj.sets_only(payload):
            continue
        record = oj.decode(payload)
        if record is None:
            break   # (the journal ends here for readers: load stops at the same record)
        oj.apply(record, state)
    if state.get("lostOffsets"):
        return None
    try:
        return ClusterTable.from_json(state).epochs
    except ValueError:
        return None


def _lost_problem(path: Path, lost: set[str]) -> tuple[str, str]:
    groups = sorted({split_key(k)[1] for k in lost})
    return (str(path), "offsets that cannot be recovered of group(s) " + ", ".join(groups)
            + " (mqctl store recover resets them to the oldest message)")


def _replay(state: dict[str, Any], records: list[dict[str, Any]]) -> ClusterTable:
    for record in records:
        oj.apply(record, state)
    return ClusterTable.from_json(state)


def _lost(damaged_text: bytes, table: ClusterTable) -> set[str]:
    """Keys named in a damaged copy that no trusted source has, and those it lost before. A
    key a trusted source knows by its reset epoch alone (its offsets were reset or deleted
    since) is not lost: the damaged copy only remembers it from before."""
    out = set(table.lost)
    for m in re.finditer(_KEY_TEXT, damaged_text):
        key = m.group(1).decode()
        if key not in table.offsets and key not in table.epochs:
            out.add(key)
    return out


def save(layout: Layout, table: dict[str, Any], journal_end: int, *, keep_bak: bool, sync_dir: bool) -> None:
    """Write the snapshot (``table`` in its JSON shape; content fsynced before the rename)."""
    obj = {**table, "journalEnd": journal_end}
    fsutil.atomic_write_json_crc(layout.consumer_offset_json, obj, keep_bak=keep_bak, sync_dir=sync_dir)


def snapshot(layout: Layout, table: dict[str, Any], end: int, base: int, table_bytes: int, *,
             synced: bool = False, keep_bak: bool = True, sync_dir: bool = False) -> int:
    """Write the snapshot of ``table``, which the journal holds up to ``end``, under the
    table's lock: the journal compacted when it outgrew the table, else fdatasynced (unless
    ``synced``), so that no snapshot names a ``journalEnd`` past what the journal has on disk.
    Returns the end named."""
    journal = oj.Journal(layout.consumer_offset_log)
    if journal.needs_compaction(end, base, table_bytes):
        end = journal.rewrite(table, end)
    elif not synced:
        journal.sync()
    save(layout, table, end, keep_bak=keep_bak, sync_dir=sync_dir)
    return end


def write(layout: Layout, loaded: Loaded, lost_before: set[str], applied_before: int, *,
          sync: bool) -> StoreIOError | None:
    """Publish ``loaded.table`` under the table's lock: the journal record of what changed
    first, then the snapshot. ``sync``: a reset or deletion (see ``offsetjournal``). Returns
    the error of a snapshot that could not be written (a full disk) after its record was: the
    change is made (every reader applies the journal), the snapshot put off."""
    journal = oj.Journal(layout.consumer_offset_log)
    tail = loaded.journal
    new = loaded.table.to_json()
    if loaded.source == "none" and not tail.exists and not layout.consumer_offset_json.exists():
        # A new table: an empty snapshot first, so that no reader ever finds the journal
        # without one (and takes the new table for a damaged one)
        save(layout, ClusterTable().to_json(), 0, keep_bak=False, sync_dir=False)
    keep_bak, sync_dir = loaded.source == "snapshot", sync or loaded.repair
    if not tail.exists or not tail.header or tail.end < loaded.snapshot_end or loaded.damage is not None \
            or loaded.disagrees:
        # No journal, an unreadable one, one that lost records the snapshot has (damage: the
        # journal is synced before every snapshot), one damaged in the middle (the table then
        # has none of the records after the damage), or one that replays to another table than
        # the snapshot readers use: it starts again from the whole table.
        # Positions never go back, so an old ``.bak`` (or a member's view) cannot name one
        # inside the new journal.
        end = journal.rewrite(new, max(tail.end, loaded.snapshot_end, loaded.damage[1] if loaded.damage else 0))
        save(layout, new, end, keep_bak=keep_bak, sync_dir=sync_dir)
        return None
    record = loaded.table.change(lost_before, applied_before)
    end = tail.end
    if record is not None:
        end = journal.append(record, tail.end, sync=sync)
    try:
        snapshot(layout, new, end, tail.base, loaded.snapshot_bytes, synced=sync and record is not None,
                 keep_bak=keep_bak, sync_dir=sync_dir)
    except StoreIOError as exc:
        if record is None or not sync:   # (only a synced record is a change made)
            raise
        return exc
    return None


def verify(layout: Layout) -> list[tuple[str, int, str]]:
    """Problems ``store check`` reports (reads only), as (file, byte offset, why): damaged
    copies, lost groups, a journal that ends early or is damaged in the middle, and a snapshot
    that disagrees with the journal it names."""
    loaded = load(layout, deep=True)
    problems = [(f, 0, why) for f, why in loaded.problems]
    if loaded.damage is not None:
        log = str(layout.consumer_offset_log)
        problems = [p for p in problems if p[0] != log]   # (its "ends early", said better here)
        effect = ("readers stop there: commits after it are not used, their messages delivered again"
                  if loaded.damage_read else "below the offset table's journalEnd: the table holds its commits, "
                  "but the journal no longer vouches for them")
        problems.append((log, loaded.damage[0], f"offsets journal damaged: a record fails its check and valid "
                         f"ones follow ({effect}); mqctl store recover rewrites it from the offset table"))
    if loaded.disagrees:
        problems.append((str(layout.consumer_offset_json), 0, "offset table disagrees with the offsets journal it "
                         "names (the table is used; mqctl store recover writes the journal again from it)"))
    return problems
