"""What a consumer group member is told to do, and the flags its parts share while it runs."""
from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field


@dataclass
class ConsumeOptions:
    """How a member consumes: what ``mqctl consume``'s flags and :class:`store.Consumer`'s
    arguments set."""

    topic: str
    group: str
    orderly: bool = False
    broadcast: bool = False
    from_where: str = "last"            # first | last | timestamp | offset | tail | head
    from_timestamp: int | None = None
    from_offset: int | None = None      # "offset": this queue offset; "tail": this many before the
                                        # end; "head": this many after the start
    tags: frozenset[str] | None = None  # None = every tag
    batch: int = 1                      # messages per pool-sink batch
    threads: int = 4                    # pool sinks: batches in flight at most 2 x threads
    count: int | None = None
    exit_at_end: bool = False
    idle_timeout_s: float | None = None
    client_id: str = field(default_factory=lambda: f"{os.uname().nodename}@{os.getpid()}")
    strategy: str = "averagely"
    config_queues: list[int] | None = None
    max_reconsume: int | None = None    # None: 16 concurrent, unlimited orderly
    suspend_ms: int = 1000
    dedup: bool = False
    retry_delay_ms: int | None = None
    rebalance_interval_s: float = 5.0   # a backstop: membership changes wake the loop at once
    persist_interval_s: float = 5.0
    install_signals: bool = True        # SIGINT/SIGTERM stop the loop (its thread must be main)
    client_id_given: bool = True        # False: a default id (broadcast: HOST@DEFAULT)
    no_group: bool = False              # read without a group: nothing persisted, no member
    to: str | None = None               # an exactly-once stage: outputs go here (stage.py)
    to_sync: bool = False               # its batches fsynced before they count (--flush sync)
    # how the member's errors name arguments (store/client/rules.py; None: the Python spelling)
    arg_names: Mapping[str, str] | None = None
    # told (topic, queue id, messages passed) of each queue a group new to the topic starts at its
    # end (from_where "last") while it holds messages: a newcomer's "why did I get nothing?".
    # Called on the member's loop thread, before the computed starts are committed: must not raise.
    on_start_at_end: Callable[[str, int, int], None] | None = None


def default_broadcast_client_id() -> str:
    """A broadcast consumer's default id: stable on a host, as RocketMQ's ``IP@DEFAULT``, so a
    restarted broadcast consumer resumes its own offsets instead of being a new client."""
    return f"{os.uname().nodename}@DEFAULT"


@dataclass(eq=False, repr=False)   # (neither is used: start-up, store/__init__.py)
class RunState:
    """Whether the member is to stop, shared by the loop and the parts that hand out work:
    ``stop_requested`` (a stop, from any thread or a signal handler: no new batch is handed
    out) and ``fatal`` (what ended it abnormally, re-raised to the owner)."""

    stop_requested: bool = False
    fatal: BaseException | None = None

    def halted(self) -> bool:
        return self.stop_requested or self.fatal is not None
