"""mqctl's store: a RocketMQ-style commit log, consume queues and key index in a directory.

Usable as a library without the CLI::

    from store import Store, Draft
    with Store.open("~/.mqctl/store", create=True) as s:
        s.put([Draft(topic="orders", body=b"hello")])
        for m in s.iter_queue("orders", 0, 0):
            print(m.body)

Heavy modules (offsets, locks, transactions, Spark) are imported by their users, not here.
"""
from .broker import PullResult, PutResult, Store, StoreSettings, open_store
from .errors import StoreError
from .record import Draft, Message

__all__ = ["Store", "StoreSettings", "open_store", "Draft", "Message", "PutResult", "PullResult", "StoreError"]
