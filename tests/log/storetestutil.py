"""Helpers for the storage engine's unit tests (tests/log/): opening a store with settings,
drafts, reading a topic back through its consume queues, and the reference hash for
sharding-key routing. Running ``mqctl`` on a store is ``tests/procs.py``'s (``mqctl``)."""
from __future__ import annotations

from pathlib import Path

from store.log.messagestore import Store
from store.log.record import Draft
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
