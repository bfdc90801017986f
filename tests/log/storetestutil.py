"""Helpers for the storage engine's unit tests (tests/log/)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from store.log.broker import Store, StoreSettings
from store.log.record import Draft

REPO = Path(__file__).resolve().parents[2]
MQCTL = [sys.executable, "-m", "mqctl"]


def open_store(root: Path, warnings: list[str] | None = None, **settings) -> Store:
    """Open (creating) a store; ``settings`` go to StoreSettings on first creation."""
    warn = warnings.append if warnings is not None else (lambda m: None)
    return Store.open(root, create=True, settings=StoreSettings(**settings) if settings else None, warn=warn)


def draft(topic: str, body: bytes | str, **kw) -> Draft:
    return Draft(topic, body.encode() if isinstance(body, str) else body, **kw)


def mqctl(root: Path, *args: str, input: bytes | None = None, check: bool = False,
          timeout: float = 60) -> subprocess.CompletedProcess:
    """Run the real CLI against ``root`` (bytes in, bytes out)."""
    env = dict(os.environ, MQCTL_STORE=str(root), NO_COLOR="1")
    env.pop("MQCTL_FAILPOINTS", None)
    p = subprocess.run(MQCTL + list(args), input=input, capture_output=True, env=env, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"mqctl {' '.join(args)} -> {p.returncode}: {p.stderr.decode()}")
    return p


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
