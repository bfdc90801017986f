"""mqctl's store: a RocketMQ-style commit log, consume queues and key index in a directory.

Usable as a library without the CLI::

    from store import Store, Draft
    with Store.open("~/.mqctl/store", create=True) as s:
        s.put([Draft(topic="orders", body=b"hello")])
        for m in s.iter_queue("orders", 0, 0):
            print(m.body)

Names are resolved lazily so that importing a small module (``store.errors``) does not pay for
the engine; heavy modules (offsets, locks, transactions, Spark) are imported by their users.
"""
from __future__ import annotations

from typing import Any

_EXPORTS = {
    "Store": "broker", "StoreSettings": "broker", "open_store": "broker", "PutResult": "broker",
    "PullResult": "broker", "BatchResult": "broker", "Draft": "record", "Message": "record",
    "StoreError": "errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module 'store' has no attribute {name!r}")
    import importlib
    return getattr(importlib.import_module(f".{mod}", __name__), name)
