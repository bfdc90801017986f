"""A close wakes an iteration waiting for its next batch (``wake_reader``), then hands back
the batches not yet taken (``release_all``). The hand-back took the wake-up out with them, so
a loop that was between its closed check and its wait then waited for ever (a close from a
signal handler in the iterating thread: 3 hangs in 90 runs)."""
from __future__ import annotations

import asyncio
import concurrent.futures as cf

from store.client.aio_sinks import AsyncIteratorSink
from store.client.handoff import IteratorSink


def test_the_sync_iterators_wake_up_outlives_the_hand_back() -> None:
    sink = IteratorSink(1 << 20, 10)
    sink.wake_reader()
    sink.release_all()
    assert sink.handoff.get(timeout=10) is None   # (before: queue.Empty after 10 s)


def test_the_async_iterators_wake_up_outlives_the_hand_back() -> None:
    async def main() -> object:
        sink = AsyncIteratorSink(1 << 20, 10)
        fut = sink.submit([], "T")
        sink.wake_reader()
        sink.release_all()
        assert fut.result(timeout=0) == (None, "released")
        return await asyncio.wait_for(sink.get(None), 10)
    try:
        assert asyncio.run(main()) is None
    except (asyncio.TimeoutError, cf.TimeoutError) as exc:   # (before: the wait never ended)
        raise AssertionError("the wake-up was lost") from exc
