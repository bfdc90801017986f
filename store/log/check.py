"""``store check``: a read-only consistency check of every file (bbolt's ``tx_check``).

Never mutates anything. Verifies every commit-log record (magic, lengths, record CRC, body
CRC, its own offset; every segment but the last ends with its trailer), every consume-queue
entry (points at a valid record of the same topic, queue and offset, with that record's tag
code; no torn partial entry), every key-index file (header, sizes, every entry reachable from
its slot, and every record's keys findable: a damaged index makes ``msg query`` miss messages
silently), that the JSON metadata files parse, and that the topic files and the offset table
(crc, journal) can be trusted. Returns the problems found, each with the
file and byte offset.
"""
from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from store.log import checkpoint as ckpt
from store.log import format as F
from store.log import offsettable
from store.log.index import key_hash
from store.log.record import PROP_KEYS, PROP_UNIQ_KEY, RecordError, decode, entry_tags_code

_MAGIC = F.MAGIC_V1.to_bytes(4, "big")

if TYPE_CHECKING:
    from store.log.engine import Engine


@dataclass(frozen=True)
class Problem:
    file: str
    offset: int
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "offset": self.offset, "reason": self.reason}


@dataclass
class CheckReport:
    records: int = 0
    cq_entries: int = 0
    bytes_checked: int = 0
    problems: list[Problem] = field(default_factory=list)


# Per valid record, by commit-log offset: (topic, queue id, queue offset, size, tag code).
Valid = dict[int, tuple[str, int, int, int, int]]


def check_store(engine: "Engine", progress: Callable[[int], None] | None = None) -> CheckReport:
    rep = CheckReport()
    problems = rep.problems
    valid: Valid = {}
    claims: dict[tuple[str, int], tuple[int, int]] = {}
    keyed: list[tuple[int, int, str]] = []
    cp0 = ckpt.read(engine.layout.checkpoint)
    # Records past the checkpoint belong to a batch a killed writer left (a read-only store
    # cannot be recovered at open): the next writable open dispatches them, they are not lost.
    _check_log(engine, rep, valid, progress, claims, cp0.written_end if cp0 is not None else None, keyed)
    _check_queues(engine, rep, valid)
    _check_queue_ends(engine, problems, claims)
    _check_index(engine, problems, keyed)
    _check_json(engine, problems)
    problems += [Problem(f, 0, why) for f, why in engine.topic_table.problems() + offsettable.verify(engine.layout)]
    cp = ckpt.read(engine.layout.checkpoint)
    if engine.layout.checkpoint.exists() and cp is None:
        problems.append(Problem(str(engine.layout.checkpoint), 0, "checkpoint unreadable (bad CRC or size)"))
    return rep


def _check_log(engine: "Engine", rep: CheckReport, valid: Valid, progress: Callable[[int], None] | None,
               claims: dict[tuple[str, int], tuple[int, int]] | None = None,
               pending_from: int | None = None, keyed: list[tuple[int, int, str]] | None = None) -> None:
    """Every record; ``claims`` gets, per (topic, queue), the highest queue offset a record
    dispatched to that queue claims, with that record's offset; ``keyed`` gets each index key
    a record must be found by, as ``(keyHash, offset, key)``."""
    log = engine.commitlog
    topics = engine.topics()
    problems = rep.problems
    segs = log.segments()
    for i, base in enumerate(segs):
        path = log.segment_path(base)
        data = path.read_bytes()
        rep.bytes_checked += len(data)
        if progress is not None:
            progress(len(data))
        if i + 1 < len(segs) and segs[i + 1] != base + log.segment_size:
            problems.append(Problem(str(path), 0, f"next segment is {segs[i + 1]}, expected {base + log.segment_size}"))
        pos = 0
        trailer = False
        while pos < len(data):
            try:
                m = decode(data, pos, len(data))
                if m.commitlog_offset != base + pos:
                    raise RecordError(f"record claims offset {m.commitlog_offset}")
            except RecordError as exc:
                if exc.reason == "blank trailer":
                    trailer = True
                    break
                problems.append(Problem(str(path), pos, exc.reason))
                nxt = _next_start(data, pos, base)
                if nxt is None:
                    break
                pos = nxt
                continue
            tcode = entry_tags_code(m.topic, m.properties)
            valid[base + pos] = (m.topic, m.queue_id, m.queue_offset, m.size, tcode)
            if keyed is not None and (m.sysflag & F.TX_MASK) != F.TX_ROLLBACK and (
                    pending_from is None or base + pos < pending_from):
                uk = m.properties.get(PROP_UNIQ_KEY)
                keys = [f"#{uk}"] if uk else []
                keys += [f"{m.topic}#{k}" for k in (m.properties.get(PROP_KEYS) or "").split(" ") if k]
                keyed += [(key_hash(k), base + pos, k) for k in keys]
            if (claims is not None and (m.sysflag & F.TX_MASK) in (F.TX_NOT, F.TX_COMMIT)
                    and (pending_from is None or base + pos < pending_from)):
                cfg = topics.get(m.topic)
                if cfg is not None and base + pos >= cfg.created_offset and m.queue_id < cfg.queues:
                    key = (m.topic, m.queue_id)
                    if m.queue_offset >= claims.get(key, (-1, 0))[0]:
                        claims[key] = (m.queue_offset, base + pos)
            rep.records += 1
            pos += m.size
        if i + 1 < len(segs) and not trailer:
            problems.append(Problem(str(path), len(data), "segment ends without its end-of-segment trailer "
                                    "(its tail was lost; run mqctl store recover)"))


_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


def _looks_like_start(data: bytes, cand: int, base: int) -> bool:
    """A record header begins at ``cand``: its magic, and its own offset in PHYSICALOFFSET
    (12 bytes that body data does not reproduce by chance), whatever the rest holds."""
    if cand < 0 or cand + F.OFF_PHYSICAL_OFFSET + 8 > len(data):
        return False
    return (data[cand + 4:cand + 8] == _MAGIC
            and _I64.unpack_from(data, cand + F.OFF_PHYSICAL_OFFSET)[0] == base + cand)


def _next_start(data: bytes, pos: int, base: int) -> int | None:
    """Where to resume after the damaged record at ``pos``, so that each damaged record is
    reported at its own offset: the next record start after ``pos`` — a valid record, or one
    whose header is intact (magic and offset) though its body or properties are damaged — or,
    when the damaged record's own header is intact and ends before that, its end (the record
    after it has a damaged header: it is reported too)."""
    cand = _next_record(data, pos, base)
    i = data.find(_MAGIC, pos + 5)
    while i >= 0 and (cand is None or i - 4 < cand):
        if _looks_like_start(data, i - 4, base):
            cand = i - 4
            break
        i = data.find(_MAGIC, i + 1)
    if _looks_like_start(data, pos, base):
        total: int = _I32.unpack_from(data, pos)[0]
        if F.RECORD_FIXED_SIZE <= total and pos + total < len(data) and (cand is None or pos + total < cand):
            return pos + total
    return cand


def _next_record(data: bytes, pos: int, base: int) -> int | None:
    magic = F.MAGIC_V1.to_bytes(4, "big")
    start = pos + 1
    while True:
        i = data.find(magic, start + 4)
        if i < 0:
            return None
        cand = i - 4
        try:
            m = decode(data, cand, len(data))
            if m.commitlog_offset == base + cand:
                return cand
        except RecordError:
            pass
        start = cand + 1


def _check_queues(engine: "Engine", rep: CheckReport, valid: Valid) -> None:
    problems = rep.problems
    root = engine.layout.consumequeue_dir
    cl_min = engine.commitlog.min_offset()
    topics = engine.topics()
    for topic in sorted(os.listdir(root)) if root.exists() else []:
        if topic not in topics:
            problems.append(Problem(str(root / topic), 0, "consume queue of a topic that is not in topics.json"))
            continue
        for qname in sorted(os.listdir(root / topic)):
            if not (qname.isascii() and qname.isdigit()):
                continue
            qid = int(qname)
            q = engine.queues.queue(topic, qid)
            for sbase in q.segments():
                path = q.segment_path(sbase)
                data = path.read_bytes()
                if len(data) % F.CQ_ENTRY_SIZE:
                    problems.append(Problem(str(path), len(data) - len(data) % F.CQ_ENTRY_SIZE,
                                            "partial (torn) consume-queue entry"))
                whole = data[: len(data) - len(data) % F.CQ_ENTRY_SIZE]
                for j, (phys, size, _tags) in enumerate(F.CQ_ENTRY.iter_unpack(whole)):
                    rep.cq_entries += 1
                    qoff = (sbase + j * F.CQ_ENTRY_SIZE) // F.CQ_ENTRY_SIZE
                    if phys < cl_min and phys >= 0 and size > 0:
                        continue  # record removed by retention
                    rec = valid.get(phys)
                    if rec is None:
                        problems.append(Problem(str(path), j * F.CQ_ENTRY_SIZE,
                                                f"entry {qoff} points at commit-log offset {phys}, "
                                                f"where no valid record starts"))
                    elif rec[:4] != (topic, qid, qoff, size):
                        problems.append(Problem(str(path), j * F.CQ_ENTRY_SIZE,
                                                f"entry {qoff} points at a record of {rec[0]}/{rec[1]}@{rec[2]}"))
                    elif rec[4] != _tags:
                        problems.append(Problem(str(path), j * F.CQ_ENTRY_SIZE + 12,
                                                f"entry {qoff} has tag code {_tags}, but its record's is {rec[4]} "
                                                f"(a tag filter would pass it over; run mqctl store recover)"))


def _check_queue_ends(engine: "Engine", problems: list[Problem],
                      claims: dict[tuple[str, int], tuple[int, int]]) -> None:
    """A consume queue that ends before the last offset its records claim lost entries (its
    files were cut or deleted): readers would never see those messages, and the next writer
    would give their queue offsets to new messages. ``store recover`` rebuilds it."""
    for (topic, qid), (qoff, phys) in sorted(claims.items()):
        end = engine.queues.queue(topic, qid).max_offset()
        if end <= qoff:
            problems.append(Problem(str(engine.layout.queue_dir(topic, qid)), end * F.CQ_ENTRY_SIZE,
                                    f"consume queue {topic}/{qid} ends at offset {end}, but the record at "
                                    f"commit-log offset {phys} is {topic}/{qid}@{qoff} (entries lost: "
                                    f"run mqctl store recover)"))


def _check_index(engine: "Engine", problems: list[Problem], keyed: list[tuple[int, int, str]]) -> None:
    idx = engine.index
    files = idx.files()
    log_end = engine.commitlog.end()
    reachable: set[int] = set()
    trusted_from = None
    for base in files:
        path = idx.path(base)
        why = idx.problem(base, thorough=True)
        if why is not None:
            problems.append(Problem(str(path), 0, f"key index {why} (run mqctl store recover)"))
            continue
        _b, _e, _bphys, ephys, _slots, count = idx.header(base)
        if count > 1 and ephys >= log_end:   # read after the header: a writer moves the
            # header only after its records are in the log
            problems.append(Problem(str(path), 24, f"header says records up to offset {ephys} are indexed, "
                                                   f"past the end of the commit log (new keys would not be)"))
            continue
        reachable |= idx.pairs(base)
        trusted_from = base if trusted_from is None else trusted_from
    if trusted_from is None and not files:
        trusted_from = 0
    if trusted_from is None:
        return
    missing = [(h, phys, key) for h, phys, key in keyed if phys >= trusted_from and (h << 64) | phys not in reachable]
    if missing:
        h, phys, key = missing[0]
        problems.append(Problem(str(idx.dir), 0, f"{len(missing)} key(s) of records are not found in the key index, "
                                                 f"e.g. {key!r} of the record at commit-log offset {phys} "
                                                 f"(msg query would miss them; run mqctl store recover)"))


def _check_json(engine: "Engine", problems: list[Problem]) -> None:
    lay = engine.layout
    paths = [lay.store_json, lay.topics_json, lay.consumer_offset_json, lay.delay_offset_json]
    offsets_root = lay.root / "offsets"
    if offsets_root.exists():
        paths += sorted(offsets_root.glob("*/*/offsets.json"))
    for p in paths:
        if p.exists():
            try:
                json.loads(p.read_bytes())
            except ValueError as exc:
                bak = p.with_name(p.name + ".bak")
                note = f" ({bak.name} is used instead)" if bak.exists() else ""
                problems.append(Problem(str(p), 0, f"not valid JSON: {exc}{note}"))
