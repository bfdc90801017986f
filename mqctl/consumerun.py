"""``mqctl consume``'s flags turned into a member of a group: the checks only the command line
needs (``--no-group``, ``--json``/``--format``/``--exec`` combinations, durations naming their
flag), the library's options (``store.client.options.ConsumeOptions``, its shared rules in
``store/client/rules.py``) and the sink messages go to (``mqctl/consumer/handlers.py``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional

if TYPE_CHECKING:
    from mqctl.state import State
    from store.log.record import Message


@dataclass
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


def run_consume(st: "State", r: ConsumeRequest) -> None:
    """Check the request, then consume until the runtime stops (count, end, idle, signal)."""
    from mqctl.argnames import ARG_FLAGS
    from mqctl.consumer.handlers import ExecSink, StdoutSink, split_command, warn
    from mqctl.options import parse_queue_ids
    from store.client.options import ConsumeOptions, default_broadcast_client_id
    from store.client.rules import check_consume_options
    from store.client.runtime import Runtime
    from store.names import parse_tag_expression, validate_any_topic, validate_client_id, validate_group
    validate_any_topic(r.topic)
    group = _group(r)
    validate_group(group)
    _check_output(r)
    check_consume_options(broadcast=r.broadcast, orderly=r.orderly, dedup=r.dedup, strategy=r.strategy,
                          queues=r.queues, max_reconsume=r.max_reconsume, retry_delay=r.retry_delay,
                          suspend=r.suspend_ms, arg_names=ARG_FLAGS)
    tags = parse_tag_expression(r.tag, "--tag")
    cfg_queues = parse_queue_ids(r.queues or "") if r.strategy == "config" else None
    from_ = {"earliest": "first", "latest": "last"}.get(r.from_, r.from_)
    from_where, from_ts = from_, None
    if from_ not in ("first", "last"):
        from store.timeparse import parse_time
        from_where, from_ts = "timestamp", parse_time(from_)
    idle_s = seconds("--idle-timeout", r.idle_timeout, 0) if r.idle_timeout is not None else None
    handler_s = seconds("--consume-timeout", r.consume_timeout, 1)
    rebalance_s = seconds("--rebalance-interval", r.rebalance_interval, 50)
    render = renderer(r.json, r.format_, st.utc) if r.exec_ is None or r.json else None
    argv = split_command(r.exec_) if r.exec_ is not None else None
    retry_ms = duration_ms("--retry-delay", r.retry_delay) if r.retry_delay is not None else None
    opts = ConsumeOptions(
        topic=r.topic, group=group, orderly=r.orderly, broadcast=r.broadcast or r.no_group, from_where=from_where,
        from_timestamp=from_ts, tags=tags, batch=r.batch,
        threads=r.threads, count=r.count, exit_at_end=r.exit_at_end, idle_timeout_s=idle_s,
        strategy=r.strategy or "averagely", config_queues=cfg_queues, max_reconsume=r.max_reconsume,
        suspend_ms=1000 if r.suspend_ms is None else r.suspend_ms, dedup=r.dedup, retry_delay_ms=retry_ms,
        rebalance_interval_s=rebalance_s, no_group=r.no_group)
    if r.client_id is not None:
        opts.client_id = validate_client_id(r.client_id)
    elif r.broadcast:
        opts.client_id, opts.client_id_given = default_broadcast_client_id(), False
    else:
        opts.client_id_given = False
    if argv is not None:
        sink: ExecSink | StdoutSink = ExecSink(argv, group, handler_s, r.threads, r.batch,
                                               render if r.json else None)
    else:
        assert render is not None
        sink = StdoutSink(render, raw=not r.json and r.format_ is None)
    Runtime(st.store(), opts, sink, warn=warn).run()


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


def _check_output(r: ConsumeRequest) -> None:
    """Where messages go: stdout (raw, ``--json`` or ``--format``) or ``--exec`` runs."""
    from store.errors import UsageError
    if r.json and r.format_ is not None:
        raise UsageError("give --json or --format, not both")
    if r.exec_ is not None and r.format_ is not None:
        raise UsageError("--format applies to stdout; with --exec, give --json or nothing")
    if r.exec_ is None and r.batch != 1:
        raise UsageError("--batch applies to --exec (messages per handler run); stdout gets every message "
                         "as it comes")


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
    from store.errors import UsageError
    from store.timeparse import DURATION_HELP, parse_duration
    try:
        return parse_duration(text)
    except UsageError:
        raise UsageError(f"{flag} {text!r}: not a duration (accepted: {DURATION_HELP})") from None


def renderer(json: bool, fmt: Optional[str], utc: bool) -> Callable[["Message"], bytes]:
    """How a message is written to stdout (or to a ``--exec --json`` handler's stdin)."""
    if json:
        from mqctl.output import json_line
        from store.client.envelope import envelope
        return lambda m: json_line(envelope(m))
    if fmt is not None:
        from mqctl.template import compile_template
        return compile_template(fmt, utc).render
    return lambda m: m.body + b"\n"
