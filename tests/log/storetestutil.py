"""Helpers for the storage engine's unit tests (tests/log/): opening a store with settings,
drafts, reading a topic back through its consume queues (and through both bulk reads, with the
C check loop or without it), and the reference hash for sharding-key routing. Running ``mqctl`` on a store is ``tests/procs.py``'s (``mqctl``)."""
from __future__ import annotations

from pathlib import Path

import pytest

from store.errors import StoreError
from store.log import columns, consumequeue
from store.log.messagestore import Store
from store.log.record import Draft
from store.log.results import BodiesResult
from store.log.settings import StoreSettings


def open_store(root: Path, warnings: list[str] | None = None, **settings) -> Store:
    """Open (creating) a store; ``settings`` go to StoreSettings on first creation."""
    warn = warnings.append if warnings is not None else (lambda m: None)
    return Store.open(root, create=True, settings=StoreSettings(**settings) if settings else None, warn=warn)


def draft(topic: str, body: bytes | str, **kw) -> Draft:
    return Draft(topic, body.encode() if isinstance(body, str) else body, **kw)


def all_messages(s: Store, topic: str) -> list:
    """Every message of every queue of ``topic``, through the consume queues."""
    out = []
    for q in s.queue_ids(topic):
        out.extend(s.iter_queue(topic, q, 0))
    return out


def jhash(s: str) -> int:
    """Java's String.hashCode, written out independently of store.log.record.java_hash (the
    tests' reference for sharding-key routing)."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i:i + 2], "big")) % 2**32
    return h - 2**32 if h >= 2**31 else h


def without_c_loop(mp: pytest.MonkeyPatch) -> None:
    """Bulk reads with the Python loop alone (no store/log/nativecheck.c), as an install
    without a compiler reads: and numpy's array check for big backlogs."""
    mp.setattr(columns, "_native", None)
    mp.setattr(columns, "NATIVE", False)
    mp.setattr(consumequeue, "take_entries", consumequeue.cut_entries)


def read_queues(s: Store, topic: str, queues: int, max_bytes: int, *, c_loop: bool, monkeypatch: pytest.MonkeyPatch,
                count: int = 1000) -> list[object]:
    """Every queue of ``topic`` through both bulk reads (bodies, as bytes and as views, and
    whole records), pull by pull, as a list to compare between the C loop and the Python loop
    (``c_loop``). A read that raises (an entry with no record anywhere) is one row, its error."""
    with monkeypatch.context() as m:
        if not c_loop:
            without_c_loop(m)
        out: list[object] = []
        for q in range(queues):
            for views in (False, True, None):   # (None: whole records)
                off, pulls = 0, 0
                while pulls < 200:
                    try:
                        if views is None:
                            c = s.pull_records(topic, q, off, count, max_bytes)
                            row: tuple[object, ...] = ("records", q, c.offsets, c.bodies, c.born, c.stored, c.props,
                                                       c.phys, c.reconsume, c.damaged, c.next_offset)
                        else:
                            c = s.pull_bodies(topic, q, off, count, max_bytes, views=views)
                            row = ("bodies", q, views, c.offsets, [bytes(b) for b in c.bodies], c.damaged,
                                   c.next_offset)
                    except StoreError as exc:
                        out.append(("error", q, off, type(exc).__name__, str(exc)))
                        break
                    out.append(row)
                    if c.next_offset == off:
                        break
                    off, pulls = c.next_offset, pulls + 1
        return out


def damage_named(row: object) -> bool:
    """Whether a row of :func:`read_queues` names damage (or is an error)."""
    assert isinstance(row, tuple)
    return row[0] == "error" or bool(row[5 if row[0] == "bodies" else 9])


def loops_agree_on(s: Store, data: bytes, queues: int, monkeypatch: pytest.MonkeyPatch, label: str) -> bool:
    """Segment 0 of ``s`` written anew as ``data`` (damaged, cut), every queue of topic T read
    by both loops (:func:`read_queues`): the C loop must read what the Python loop reads.
    Whether the reads named damage."""
    s.commitlog.segment_path(0).write_bytes(data)
    s.commitlog.close()   # (its descriptors: the file was written anew)
    want = read_queues(s, "T", queues, 4 << 20, c_loop=False, monkeypatch=monkeypatch)
    assert read_queues(s, "T", queues, 4 << 20, c_loop=True, monkeypatch=monkeypatch) == want, label
    return any(map(damage_named, want))


def bytes_read() -> int:
    """What this process has read with read(2) and its kind so far (/proc: ``rchar``)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


def one_queue_of_many(s: Store, queues: int, body: bytes, count: int) -> tuple[BodiesResult, int, int]:
    """Topic B of ``queues`` queues, ``count`` bodies stored in each, round robin (so each
    queue's records lie among the others'); queue 5's first ``count`` pulled at once: the
    pull, its records' own bytes, and what the pull read with read(2)."""
    s.create_topic("B", queues)
    s.put_bodies("B", [body] * (queues * count))
    own = sum(size for _phys, size, _tags in s.queue("B", 5).read_entries(0, count))
    before = bytes_read()
    got = s.pull_bodies("B", 5, 0, count)
    return got, own, bytes_read() - before
