"""Where a consumer's batches go: the sinks of the consumer runtime.

An inline sink (:class:`InlineSink`) consumes on the loop's own thread: a batch is consumed
when its :meth:`~InlineSink.consume` returned. A pool sink (:class:`PoolSink`) is handed
batches to work on elsewhere and answers each with a future of an :data:`Outcome`.
:class:`ThreadPoolSink` is the pool sink of a thread pool. What the runtime does with each
answer is :mod:`store.client.dispatch`'s business.
"""
from __future__ import annotations

from store.log.record import Message

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    import concurrent.futures as cf
    from typing import Any, Callable, Protocol, Sequence

    from typing_extensions import TypeIs

    class InlineSink(Protocol):
        """A sink that consumes on the loop's own thread.

        :meth:`consume` returning means the batch is consumed (its offsets may be committed);
        raising means nothing of it is, and the exception stops the consumer. ``raw`` sinks also
        take bare bodies (:meth:`write_raw`) when there is nothing to filter or deduplicate: the
        runtime then skips building messages (``mqctl consume`` printing raw bodies)."""

        raw: bool

        def consume(self, batch: list[Message]) -> None: ...

        def write_raw(self, bodies: Sequence[bytes | memoryview]) -> None: ...

    class PoolSink(Protocol):
        """A sink that consumes elsewhere: :meth:`submit` returns a future of an :data:`Outcome`.

        ``batch`` is the most messages per submitted batch, ``max_in_flight`` the most batches
        outstanding. A sink with ``per_message`` true handles a batch one message at a time (its
        outcomes may name single failures): the runtime then sizes batches to what is waiting,
        one message each when little is, up to ``batch`` when a backlog would otherwise cost a
        hand-over per message. A future that raises :class:`~store.errors.HandlerError` stops the consumer
        (the handler cannot run at all). :meth:`shutdown` is called once, when the member stops;
        ``wait`` is False when it stops on an error.

        Optional attributes: ``client_messages`` true, the sink takes :class:`store.Message`
        objects as they are (the runtime then builds them straight from a pull's columns, for the
        subscribed topic's queues in concurrent mode without dedup or a tag filter; elsewhere it
        hands over records, which the sink converts); ``persist_every_s`` above 0, an in-process
        consumer (the iterator, Python handlers): see :meth:`store.ConsumerRuntime.set_sink`; ``spread`` above
        0, a per-message sink's backlog is cut into that many batches (default ``max_in_flight``):
        a sink whose hand-over costs as much as many handler calls (Python handlers in threads)
        says its thread count, one batch per thread, half the hand-overs (a backlog of ``spread``
        full batches and more goes out in full batches); ``cancel_on_stop`` true,
        the futures still pending when the member stops are cancelled (their batches handed back:
        a stop starts no new handler); ``interleave`` true (handlers, concurrent mode), batches go
        out round-robin across the queues held, a batch of each in turn, so a backlog in one queue
        does not hold back the others (without it, a queue's cache goes out before the next's);
        ``may_start`` (None until the runtime sets it), a sink that starts a handler later
        than the batch's hand-out (a thread free, a slot free) first asks ``may_start(batch)``,
        and hands the batch back (released) when it says no; ``on_outcome`` (likewise), a sink that has it calls
        ``on_outcome(batch, outcome)`` in the thread that waited for the handler, as soon as the
        outcome is known, before it frees the handler's slot or completes the future: ``dedup``
        records a batch's consumed messages there, so nothing (another handler's start, the
        loop's turn) comes between a handler's exit and its record."""

        batch: int
        max_in_flight: int

        def submit(self, batch: list[Message], topic: str) -> cf.Future[Outcome]: ...

        def shutdown(self, wait: bool) -> None: ...


# (True: consumed, False: failed, None: released untouched, or an int k: the first k of the
# batch consumed and the rest released, concurrent mode only; the reason, for failures)
Outcome = tuple[bool | int | list[tuple[int, str]] | None, str]
"""What a pool sink says about a batch: ``(True, "")`` consumed, ``(False, why)`` failed,
``(None, why)`` released (not consumed, not failed: the batch is handed out again), and from
a sink that handles a batch message by message, ``([(i, why), ...], "")``: consumed but for
the listed messages, each of which failed."""


def rest_outcome(ok: Any, settled: int, rest: int) -> Any:
    """The outcome of a batch whose first ``settled`` messages were settled already (an
    iterator's, :meth:`store.client.dispatch.Dispatcher.take_progress`), for the ``rest`` left:
    an iterator's outcomes are consumed, released, or the first k consumed, with k never below
    ``settled``."""
    if ok is True or ok is None or isinstance(ok, bool) or not isinstance(ok, int):
        return ok
    left = ok - settled
    return None if left <= 0 else True if left >= rest else left


# what makes a sink a pool sink (a PoolSink's members), told apart at run time without typing
POOL_SINK_MEMBERS = ("batch", "max_in_flight", "submit", "shutdown")


def is_pool_sink(sink: InlineSink | PoolSink) -> TypeIs[PoolSink]:
    """Whether ``sink`` is a :class:`PoolSink` (has its members), else an :class:`InlineSink`."""
    return all(hasattr(sink, name) for name in POOL_SINK_MEMBERS)


class ThreadPoolSink:
    """A :class:`PoolSink` that runs ``work(batch, topic) -> Outcome`` in a thread pool."""

    client_messages = False     # (the optional PoolSink attributes)
    persist_every_s = 0.0
    spread = 0
    cancel_on_stop = True
    interleave = True           # handlers: a batch of each queue held in turn

    def __init__(self, work: Callable[[list[Message], str], Outcome], threads: int, batch: int = 1,
                 per_message: bool = False, initializer: Callable[[], object] | None = None) -> None:
        self.work = work
        self.batch = max(1, batch)
        self.per_message = per_message
        self.max_in_flight = 2 * max(1, threads)
        # (imported here: concurrent.futures loads logging, traceback and their regular
        # expressions, ~3 ms of a process that writes its messages inline)
        import concurrent.futures as cf
        self.pool = cf.ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="handler",
                                          initializer=initializer)   # (run in each thread first)
        self.on_outcome: Callable[[list[Message], Outcome], None] | None = None
        self.may_start: Callable[[list[Message]], bool] | None = None

    def submit(self, batch: list[Message], topic: str) -> cf.Future[Outcome]:
        return self.pool.submit(self._run, batch, topic)

    def _run(self, batch: list[Message], topic: str) -> Outcome:
        if self.may_start is not None and not self.may_start(batch):
            return None, "handed back before its handler started"
        outcome = self.work(batch, topic)
        if self.on_outcome is not None:
            self.on_outcome(batch, outcome)   # (in this thread, before the future completes)
        return outcome

    def shutdown(self, wait: bool) -> None:
        self.pool.shutdown(wait=wait, cancel_futures=True)
