"""What SIGINT and SIGTERM do to a member that installs its own handlers (``mqctl consume``,
``ConsumeOptions.install_signals``): the first stops it gracefully (no new handler call, the
running ones finish, offsets persisted, locks released, the group left), the second ends the
running handlers at once (what finished is committed; exit 130)."""
from __future__ import annotations

import signal
import threading

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Callable, Protocol

    from store.client.dispatch import Dispatcher
    from store.client.options import RunState
    from store.watch import Watcher

    class Stoppable(Protocol):
        """What the handlers use of a :class:`~store.client.runtime.ConsumerRuntime` (which
        imports this module: not named here, but checked against this where it installs them)."""

        state: RunState
        dispatcher: Dispatcher
        wake: Watcher
        force_stop: bool
        on_stopping: Callable[[int], None] | None
        stopping_unsaid: bool

        def stop(self) -> None: ...


def install(rt: Stoppable) -> None:
    """Install the SIGINT and SIGTERM handlers of ``rt``, a :class:`~store.client.runtime.ConsumerRuntime`,
    in the main thread only (elsewhere Python refuses them, and the program's own stay)."""
    def on_signal(signum: int, _frame: object) -> None:
        if not rt.state.stop_requested:
            rt.stop()   # the first: no new handler, the running ones finish
            rt.stopping_unsaid = True
            say_stopping(rt)   # (at once: the wait may be long)
            return
        rt.force_stop = True   # the second: end the running handlers at once
        if (abort := getattr(rt.dispatcher.pool, "abort", None)) is not None:
            abort()
        rt.wake.set()
        if rt.dispatcher.in_write:
            raise KeyboardInterrupt   # a write blocked on a reader that does not read
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)


def say_stopping(rt: Stoppable) -> None:
    """Tell ``rt.on_stopping`` how many handlers the stop waits for, once, when there are any:
    from the first signal's handler, and again as the wait begins (a signal that came while a
    handler was being started, not yet counted, said nothing)."""
    if rt.stopping_unsaid and rt.on_stopping is not None:
        running = sum(1 for f in rt.dispatcher.futures if f.running())
        if running:
            rt.stopping_unsaid = False
            rt.on_stopping(running)
