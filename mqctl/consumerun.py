"""``mqctl consume``'s flags turned into a member of a group: the checks only the command line
needs (``--no-group``, ``--json``/``--format``/``--exec`` combinations, durations naming their
flag), the library's options (:class:`store.ConsumeOptions`, its shared rules in
:func:`store.check_consume_options`) and the sink messages go to (``mqctl/consumer/stdoutsink.py``
or ``handlers.py``)."""
from __future__ import annotations

from dataclasses import dataclass

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Callable, Optional

    from mqctl.consumer.handlers import ExecSink
    from mqctl.state import State
    from store import Store
    from store import StoredMessage as Message


@dataclass(eq=False, repr=False)   # (neither is used: start-up, store/__init__.py)
class ConsumeRequest:
    """What one ``mqctl consume`` was asked to do: its flags as parsed, every one given (the
    defaults are the command's, in ``mqctl/commands/consume.py``)."""

    topic: str
    group: Optional[str]
    no_group: bool
    orderly: bool
    broadcast: bool
    from_: str
    tag: Optional[str]
    exec_: Optional[str]
    batch: int
    threads: int
    count: Optional[int]
    exit_at_end: bool
    idle_timeout: Optional[str]
    client_id: Optional[str]
    strategy: Optional[str]
    queues: Optional[str]
    max_reconsume: Optional[int]
    suspend_ms: Optional[int]
    consume_timeout: str
    retry_delay: Optional[str]
    dedup: bool
    json: bool
    format_: Optional[str]
    rebalance_interval: str
    to: Optional[str] = None
    output: Optional[str] = None
    flush: Optional[str] = None


def run_consume(st: State, r: ConsumeRequest) -> None:
    """Check the request, then consume until the runtime stops (count, end, idle, signal)."""
    import sys

    from mqctl.argnames import ARG_FLAGS
    from mqctl.errors import warn
    from store import (
        ConsumeOptions,
        ConsumerRuntime,
        check_consume_options,
        default_broadcast_client_id,
        parse_tag_expression,
        validate_client_id,
        validate_consumable_topic,
        validate_group,
    )
    validate_consumable_topic(r.topic)
    _named_format(r)
    group = _group(r)
    validate_group(group)
    _check_output(r)
    check_consume_options(broadcast=r.broadcast, orderly=r.orderly, dedup=r.dedup, strategy=r.strategy,
                          queues=r.queues, max_reconsume=r.max_reconsume, retry_delay=r.retry_delay,
                          suspend=r.suspend_ms, arg_names=ARG_FLAGS)
    tags = parse_tag_expression(r.tag, "--tag")
    cfg_queues = None
    if r.strategy == "config":
        from mqctl.options import parse_queue_ids
        cfg_queues = parse_queue_ids(r.queues or "")
    from_where, from_ts, from_off = start_position(r.from_, r.no_group)
    if from_ts is not None:   # (say what a zone-less or future time was read as: maybe not what was meant)
        from store import time_note
        word = r.from_.strip()
        note = time_note(word[1:] if word.startswith("@") else word, from_ts)
        if note:
            warn(f"--from {word}: {note}")
    idle_s = seconds("--idle-timeout", r.idle_timeout, 0) if r.idle_timeout is not None else None
    handler_s = seconds("--consume-timeout", r.consume_timeout, 1)
    rebalance_s = seconds("--rebalance-interval", r.rebalance_interval, 50)
    render = renderer(r.json, r.format_, st.utc) if r.exec_ is None or r.json else None
    argv = None
    if r.exec_ is not None:
        # the handlers' machinery (threads, process spawning) only for --exec
        from mqctl.consumer.handlers import ExecSink, split_command
        argv = split_command(r.exec_)
    retry_ms = duration_ms("--retry-delay", r.retry_delay) if r.retry_delay is not None else None
    opts = ConsumeOptions(
        topic=r.topic, group=group, orderly=r.orderly, broadcast=r.broadcast or r.no_group, from_where=from_where,
        from_timestamp=from_ts, tags=tags, batch=r.batch,
        threads=r.threads, count=r.count, exit_at_end=r.exit_at_end, idle_timeout_s=idle_s,
        strategy=r.strategy or "averagely", config_queues=cfg_queues, max_reconsume=r.max_reconsume,
        suspend_ms=1000 if r.suspend_ms is None else r.suspend_ms, dedup=r.dedup, retry_delay_ms=retry_ms,
        rebalance_interval_s=rebalance_s, no_group=r.no_group, from_offset=from_off, to=r.to,
        to_sync=r.flush == "sync", arg_names=ARG_FLAGS)
    if r.from_.strip().lower() == "last" and not (r.no_group or r.broadcast) and sys.stderr.isatty():
        opts.on_start_at_end = _say_start_at_end(group)
    if r.client_id is not None:
        opts.client_id = validate_client_id(r.client_id)
    elif r.broadcast:
        opts.client_id, opts.client_id_given = default_broadcast_client_id(), False
    else:
        opts.client_id_given = False
    from mqctl.consumer.stdoutsink import StdoutSink
    sink: ExecSink | StdoutSink | None = None
    if argv is not None:
        sink = ExecSink(argv, group, handler_s, r.threads, r.batch, render if r.json else None,
                        outputs=None if r.to is None else r.output or "lines")
    elif r.to is None:
        assert render is not None
        sink = StdoutSink(render, raw=not r.json and r.format_ is None)
    store = st.store()
    from mqctl.startgc import release
    release()   # (the store and the runtime are loaded: collect again, mqctl/startgc.py)
    _check_ordered_output(store, r)
    if not r.exit_at_end and not store.has_topic(r.topic):
        if not wait_for_topic(store, r.topic, idle_s):
            return
        if opts.from_where == "last":
            # everything in the topic was sent after this consumer started: "last" would
            # skip what the first sends put there before it joined
            opts.from_where = "first"
    from mqctl.terminal import output_kept_on_interrupt
    rt = ConsumerRuntime(store, opts, warn=warn)
    if sink is not None and not isinstance(sink, StdoutSink):
        sink.emit = rt.emit
    if isinstance(sink, StdoutSink):
        sink.stopping = lambda: rt.stop_requested   # (a stop ends a write blocked on the reader)
    else:
        rt.on_stopping = stopping_notice
    rt.set_sink(sink if sink is not None else rt.copy_sink())
    try:
        with output_kept_on_interrupt(sink.fd if isinstance(sink, StdoutSink) else -1):
            rt.run()
    finally:
        if isinstance(sink, StdoutSink):
            sink.close()   # (its non-blocking descriptor of stdout: a caller may run consume again)


def _say_start_at_end(group: str) -> Callable[[str, int, int], None]:
    """On a terminal, once: a new group starts at the end of what is stored (RocketMQ's and
    Kafka's default), which at a first try looks like a consumer that gets nothing."""
    import sys
    said = False

    def say(topic: str, _queue_id: int, _passed: int) -> None:
        nonlocal said
        if not said:
            said = True
            try:
                sys.stderr.write(f"mqctl: group {group} is new to {topic}: it starts at the end, after the "
                                 f"messages stored before it (--from first reads them)\n")
                sys.stderr.flush()
            except (OSError, ValueError):
                pass   # (a notice: never a reason not to start)
    return say


def stopping_notice(running: int) -> None:
    """The first SIGINT/SIGTERM of a consumer whose handlers are running: it waits for them
    (up to ``--consume-timeout``), so say so at once, and what a second signal does. (Run in
    the signal handler: one ``os.write``, never the buffered stderr it may have interrupted.)"""
    import os
    if not running:
        return
    them, their = ("it", "its") if running == 1 else ("them", "their")
    line = (f"mqctl: stopping: waiting for {running} handler{'s' if running != 1 else ''} to finish "
            f"(Ctrl-C again to end {them} now; {their} messages are delivered again)\n")
    try:
        os.write(2, line.encode())
    except OSError:
        pass   # (stderr closed: the stop goes on all the same)


def wait_for_topic(store: Store, topic: str, idle_s: float | None) -> bool:
    """A long-running consumer started before its topic exists waits for it (as Kafka's and
    RocketMQ's consumers do), saying so once on stderr. True once it exists; False when
    SIGINT/SIGTERM or ``--idle-timeout`` ended the wait (a stop like any other: exit 0).
    (``-e`` does not wait: nothing is there to drain, so the topic is not found, exit 3.)"""
    import signal
    import threading
    import time

    from mqctl.output import say
    say(f"mqctl: waiting for topic {topic!r} to be created (Ctrl-C to stop)")
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    deadline = None if idle_s is None else time.monotonic() + idle_s
    try:
        # a topic is made rarely and once: a look at its config file (a stat while it is
        # unchanged) every 200 ms costs nothing and needs no watcher
        while not stop.wait(0.2):
            if store.has_topic(topic):
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False
        return False
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


# --from/-o words: RocketMQ's and Kafka's names, and kcat's (beginning, end, stored)
FROM_WORDS = {"first": "first", "earliest": "first", "beginning": "first",
              "last": "last", "latest": "last", "end": "last", "stored": "last"}
FROM_HELP = ("first/earliest/beginning, last/latest/end, stored (the group's committed offset), -N (N before "
             "the end of each queue), +N (N after the start of each queue), N (a queue offset of each queue: "
             "--no-group) or a time (also as @TIME, rpk's, or s@MS, kcat's)")


def start_position(text: str, no_group: bool) -> tuple[str, Optional[int], Optional[int]]:
    """``--from``/``-o`` as (where, timestamp, offset). A bare number of 10 or 13 digits is a
    time (seconds or ms since the epoch); any other is kcat's queue offset N, ``-N`` is N
    before the end of each queue (kcat), ``+N`` N after its start (rpk). A time may be
    marked as rpk marks it, ``@TIME`` (``@-1h``, ``@2026-11-30``), or as kcat does, ``s@MS``
    (ms since the epoch). Only a group new to the topic starts there: a group resumes from its
    own (kcat's ``stored``), and one with offsets in the topic starts a queue it has none for at
    its first message (store/client/startpoint.py)."""
    from store.errors import UsageError
    word = text.strip()
    if word.lower() in FROM_WORDS:   # (FIRST, Last: a word in any case, as parse_time takes NOW)
        word = word.lower()
        if word == "stored" and no_group:
            raise UsageError("-o stored is the group's committed offset: --no-group has none")
        return FROM_WORDS[word], None, None
    if word.startswith("-") and word[1:].isdigit():
        return "tail", None, int(word[1:])
    if word.startswith("+") and word[1:].isdigit():   # rpk's: N after the start of each queue
        return "head", None, int(word[1:])
    if word.isdigit() and len(word) not in (10, 13):
        if not no_group:
            raise UsageError(f"-o {word} (a queue offset) needs --no-group (a group resumes from its own "
                             f"offsets); use -o -N for N before the end of each queue")
        return "offset", None, int(word)
    # (imported only for a time: the time parser loads ``datetime``, which a word or an
    # offset does not need)
    from store import parse_time
    try:
        if word.startswith("s@") and word[2:].isascii() and word[2:].isdigit():
            return "timestamp", parse_time(str(int(word[2:])).rjust(13, "0")), None   # (ms, whatever its digits)
        return "timestamp", parse_time(word[1:] if word.startswith("@") else word), None
    except UsageError as exc:
        raise UsageError(f"{exc}; --from/-o also takes {FROM_HELP}") from None


def _group(r: ConsumeRequest) -> str:
    """The group to consume as: ``--group``, or with ``--no-group`` a fixed name that nothing
    is persisted under (which the options needing a real group refuse)."""
    from store.errors import UsageError
    if not r.no_group:
        if r.group is None:
            raise UsageError("missing option --group/-g (or --no-group to read without a group); "
                             "see: mqctl consume --help")
        return r.group
    if r.group is not None:
        raise UsageError("give --group or --no-group, not both")
    for flag, given in (("--broadcast", r.broadcast), ("--orderly", r.orderly), ("--dedup", r.dedup),
                        ("--client-id", r.client_id is not None), ("--strategy", r.strategy is not None),
                        ("--max-reconsume", r.max_reconsume is not None),
                        ("--retry-delay", r.retry_delay is not None)):
        if given:
            raise UsageError(f"{flag} needs a group; --no-group reads without one")
    return "mqctl-no-group"


def _named_format(r: ConsumeRequest) -> None:
    """``--format raw`` is the default output (each body and a newline) and ``--format json``
    is ``--json``, by the contract's names; any other ``--format`` is a template."""
    if r.format_ == "raw":
        if r.json:   # (raw and --json ask for two outputs: neither silently wins)
            from store.errors import UsageError
            raise UsageError("give --json or --format, not both")
        r.format_ = None
    elif r.format_ == "json":
        r.format_, r.json = None, True


def _check_output(r: ConsumeRequest) -> None:
    """Where messages go: stdout (raw, ``--json`` or ``--format``), ``--exec`` runs, or an
    exactly-once stage's output topic (``--to``)."""
    from store.errors import UsageError
    if r.to is None:
        for flag, given in (("--output", r.output), ("--flush", r.flush)):
            if given is not None:
                raise UsageError(f"{flag} applies to --to (an exactly-once stage's outputs)")
    else:
        if r.exec_ is None and (r.json or r.format_ is not None):
            raise UsageError("--to copies messages to DST: nothing goes to stdout (no --json/--format)")
        if r.exec_ is None and r.output is not None:
            raise UsageError("--output is how an --exec handler's stdout becomes messages: it needs --exec")
        from mqctl.argnames import ARG_FLAGS
        from store import check_stage
        check_stage(None, r.to, broadcast=r.broadcast, dedup=r.dedup, no_group=r.no_group, arg_names=ARG_FLAGS,
                    consumed=r.topic)
    if r.json and r.format_ is not None:
        raise UsageError("give --json or --format, not both")
    if r.exec_ is not None and r.format_ is not None:
        raise UsageError("--format applies to stdout; with --exec, give --json or nothing")
    if r.exec_ is None and r.batch != 1 and r.to is None:
        raise UsageError("--batch applies to --exec (messages per handler run); stdout gets every message "
                         "as it comes")


def _check_ordered_output(store: Store, r: ConsumeRequest) -> None:
    """An ordered ``--to`` topic takes only messages with a sharding key or a queue: an
    ``--orderly`` stage puts each output in its input's queue number (or by its key), and
    ``--exec --output json`` outputs may carry a ``shardingKey``. Any other stage would
    fail at its first write, after joining: refused before it joins."""
    from store.errors import UsageError
    if r.to is None or r.orderly or (r.exec_ is not None and r.output == "json"):
        return
    if store.has_topic(r.to) and store.topic(r.to).order:
        raise UsageError(f"--to {r.to}: the topic is ordered, and its messages need a sharding key or a queue: "
                         f"add --orderly (each output goes to its input's queue number, or by its key), "
                         f"or use --exec with --output json and a shardingKey in each output")


def seconds(flag: str, text: str, min_ms: int) -> float:
    """A DURATION flag in seconds; at least ``min_ms``."""
    from store.errors import UsageError
    ms = duration_ms(flag, text)
    if ms < min_ms:
        raise UsageError(f"{flag} must be at least {min_ms} ms, not {text!r}" if min_ms
                         else f"{flag} must not be negative")
    return ms / 1000


def duration_ms(flag: str, text: str) -> int:
    """A DURATION flag in ms; the error names the flag."""
    from store import DURATION_HELP, parse_duration
    from store.errors import UsageError
    try:
        return parse_duration(text)
    except UsageError:
        raise UsageError(f"{flag} {text!r}: not a duration (accepted: {DURATION_HELP})") from None


def renderer(json: bool, fmt: Optional[str], utc: bool) -> Callable[[Message], bytes]:
    """How a message is written to stdout (or to a ``--exec --json`` handler's stdin)."""
    if json:
        from mqctl.output import json_line
        from store import envelope
        return lambda m: json_line(envelope(m))
    if fmt is not None:
        from mqctl.template import compile_template
        return compile_template(fmt, utc).render
    return lambda m: m.body + b"\n"
