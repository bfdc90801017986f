"""One store handle used from two threads at once: a reader's repair of a queue found cut
short and a send to that queue take turns. The flock of the write lock belongs to the open
file description, so both threads of one handle "hold" it; the thread lock held with it
(``writelock.py``) is what makes the second wait.

Deterministic: the repair is paused under the lock until the send has either got into its
batch (the defect) or is seen waiting for its turn (the instrumented thread lock)."""
from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from store.log import queueends, writebatch
from store.log.messagestore import Store
from store.log.record import Draft
from store.log.settings import StoreSettings

HANG_GUARD_S = 120   # (only against a hang: every wait below ends on an event)


class _SeenTurn:
    """A re-entrant lock that says when a thread had to wait for it."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self.waited = threading.Event()
        self.on_wait = lambda: None

    def acquire(self) -> bool:
        if not self._lock.acquire(blocking=False):
            self.waited.set()
            self.on_wait()
            self._lock.acquire()
        return True

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def test_a_send_waits_for_a_repair_by_another_thread_of_the_same_handle(tmp_path: Path, monkeypatch:
                                                                          pytest.MonkeyPatch) -> None:
    root = tmp_path / "s"
    settings = StoreSettings(max_message_size=1024, cq_segment_entries=20)
    w = Store.open(root, create=True, settings=settings, warn=lambda _m: None)
    w.put([Draft("T", b"m%03d" % i, queue_id=0) for i in range(30)])
    qdir = w.layout.queue_dir("T", 0)
    w.close()
    os.truncate(qdir / f"{20 * 20:020d}", 3 * 20)    # offsets 23-29 cut from the queue by hand

    warnings: list[str] = []
    h = Store.open(root, warn=warnings.append)
    turn = _SeenTurn()
    monkeypatch.setattr(h.engine.write_lock, "_turn", turn, raising=False)
    progress = threading.Event()            # the send got into its batch, or waits its turn
    turn.on_wait = progress.set
    in_repair = threading.Event()
    send_in_batch = threading.Event()
    seen: dict[str, bool] = {}

    real_repair = queueends._repair_locked

    def paused_repair(*args: object) -> None:
        in_repair.set()
        assert progress.wait(HANG_GUARD_S)
        seen["send in its batch during the repair"] = send_in_batch.is_set()
        real_repair(*args)   # type: ignore[arg-type]

    real_batch_init = writebatch.WriteBatch.__init__

    def batch_init(self: writebatch.WriteBatch, *args: object, **kw: object) -> None:
        send_in_batch.set()
        progress.set()
        real_batch_init(self, *args, **kw)   # type: ignore[arg-type]

    monkeypatch.setattr(queueends, "_repair_locked", paused_repair)
    monkeypatch.setattr(writebatch.WriteBatch, "__init__", batch_init)
    errors: list[BaseException] = []

    def run(job: object) -> None:
        try:
            job()   # type: ignore[operator]
        except BaseException as exc:   # (reported below, in the test's thread)
            errors.append(exc)

    reader = threading.Thread(target=run, args=(lambda: h.max_offset("T", 0),))
    reader.start()
    assert in_repair.wait(HANG_GUARD_S)
    sender = threading.Thread(target=run, args=(lambda: h.put([Draft("T", b"new", queue_id=0)]),))
    sender.start()
    reader.join(HANG_GUARD_S)
    sender.join(HANG_GUARD_S)
    assert not reader.is_alive() and not sender.is_alive()
    assert errors == []
    assert seen == {"send in its batch during the repair": False}
    assert turn.waited.is_set()
    assert any("consume queue T/0" in m for m in warnings), warnings
    # the repair put offsets 23-29 back, and the send came after them: nothing lost, no
    # queue offset given twice
    got = [m.body for m in h.iter_queue("T", 0, 0)]
    h.close()
    assert got == [b"m%03d" % i for i in range(30)] + [b"new"]
