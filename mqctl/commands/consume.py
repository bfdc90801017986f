"""``mqctl consume``: be a member of a consumer group until stopped."""
from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Callable, Literal, Optional

import typer

from mqctl.options import complete_group, complete_topic, state
from mqctl.template import FORMAT_HELP

if TYPE_CHECKING:
    from store.log.record import Message

HELP = """Consume a topic as a member of a consumer group.

Each message is written to stdout: its body and a newline, a --json envelope (one per line)
or a --format template. With --exec CMD, CMD runs once per message with the body on stdin
and MQ_TOPIC, MQ_QUEUE_ID, MQ_QUEUE_OFFSET, MQ_MSG_ID, MQ_KEYS, MQ_TAGS, MQ_RECONSUME_TIMES,
MQ_GROUP, MQ_BORN_TIMESTAMP, MQ_STORE_TIMESTAMP in its environment; exit 0 = consumed,
anything else = retried. Delivery is at-least-once.

With --batch N, CMD gets up to N messages of one queue at a time. Its stdin holds each body
followed by a newline, or with --json one envelope per line (use it when bodies may hold
newlines). The MQ_* values are the first message's, except MQ_RECONSUME_TIMES: the highest
of the batch. MQ_QUEUE_OFFSETS and MQ_MSG_IDS list every message, MQ_BATCH_SIZE counts them.

A redelivered message has reconsumeTimes above 0 (MQ_RECONSUME_TIMES, --format %r). In
concurrent mode it comes back through the retry topic %RETRY%GROUP: same topic and message
id as before, but its queue id and offset are the retry topic's.

--orderly with --broadcast: every member reads every queue in order, without queue locks
(no queue is shared); a failed message is retried in place until it succeeds. Broadcast
messages are never dead-lettered: concurrent broadcast skips a failed one with a warning.

Examples:
  mqctl consume orders -g billing --from first -e
  mqctl consume orders -g billing --exec ./handle.sh
  mqctl consume orders -g ledger --orderly --exec ./apply.sh
  mqctl consume orders -g audit --json --tag 'paid || refunded'
  mqctl consume orders --no-group --from first -e -f '%p@%o %k %s\\n'
  mqctl consume orders -g copy --from first -e --json --batch 500 \\
      --exec 'mqctl send orders-copy --input json --reroute'
"""

def register(app: typer.Typer) -> None:
    app.command("consume", help=HELP)(consume)


def complete_from(incomplete: str) -> list[str]:
    """``--from``: the two words (a time is typed, not completed)."""
    return [w for w in ("first", "last") if w.startswith(incomplete)]


def consume(
    ctx: typer.Context,
    topic: Annotated[str, typer.Argument(
        metavar="TOPIC", show_default=False, autocompletion=complete_topic,
        help="Topic to consume (a %RETRY% or %DLQ% topic too).")],
    group: Annotated[Optional[str], typer.Option(
        "--group", "-g", metavar="GROUP", autocompletion=complete_group,
        help="Consumer group (required, unless --no-group).")] = None,
    no_group: Annotated[bool, typer.Option(
        "--no-group",
        help="Read without a group (like kcat -C without -G): nothing is committed, no retention is held, "
             "not a member.")] = False,
    orderly: Annotated[bool, typer.Option(
        "--orderly", help="One handler per queue at a time, in queue order (clustering: under a queue lock).")] = False,
    broadcast: Annotated[bool, typer.Option(
        "--broadcast", help="Every member gets every message (offsets kept per client).")] = False,
    from_: Annotated[str, typer.Option(
        "--from", "-o", metavar="first|last|TIME", autocompletion=complete_from,
        help="Where a queue with no committed offset starts: first, last, or a TIME "
             "(ISO-8601, ms since epoch, -1h).")] = "last",
    tag: Annotated[Optional[str], typer.Option(
        "--tag", "-t", metavar="EXPR", help="Tag filter: * (all) or 'A || B || C'.")] = None,
    exec_: Annotated[Optional[str], typer.Option(
        "--exec", "-x", metavar="CMD",
        help="Run CMD per message (or per --batch); exit 0 = consumed. Split like a shell line, "
             "run without a shell.")] = None,
    batch: Annotated[int, typer.Option(
        "--batch", metavar="N", min=1, help="Messages per --exec run (stdin: one per line).")] = 1,
    threads: Annotated[int, typer.Option(
        "--threads", metavar="N", min=1, max=256, help="--exec runs at a time (orderly: one per queue).")] = 4,
    count: Annotated[Optional[int], typer.Option(
        "--count", "-c", metavar="N", min=1, help="Stop after N messages.")] = None,
    exit_at_end: Annotated[bool, typer.Option(
        "--exit-at-end", "-e", help="Stop when the queues held are drained up to their end at start.")] = False,
    idle_timeout: Annotated[Optional[str], typer.Option(
        "--idle-timeout", metavar="DURATION",
        help="Stop after this long with nothing to consume (bare number: seconds).")] = None,
    client_id: Annotated[Optional[str], typer.Option(
        "--client-id", metavar="CLIENT-ID",
        help="Member id (default HOST@PID; broadcast: HOST@DEFAULT, stable across restarts); "
             "unique among live members.")] = None,
    strategy: Annotated[Optional[Literal["averagely", "circle", "hash", "config"]], typer.Option(
        "--strategy", help="Queue allocation among the members [default: averagely].",
        show_default=False)] = None,
    queues: Annotated[Optional[str], typer.Option(
        "--queues", metavar="IDS", help="Queue ids for --strategy config, e.g. 0,3.")] = None,
    max_reconsume: Annotated[Optional[int], typer.Option(
        "--max-reconsume", metavar="N", min=0,
        help="Deliveries before the DLQ (default 16; orderly: unlimited).")] = None,
    suspend_ms: Annotated[Optional[int], typer.Option(
        "--suspend-ms", metavar="MS", min=10, max=30000,
        help="--orderly: wait before retrying a failed message in place [default: 1000].",
        show_default=False)] = None,
    consume_timeout: Annotated[str, typer.Option(
        "--consume-timeout", metavar="DURATION",
        help="Kill a --exec run after this long and count it as failed (bare number: seconds).")] = "15m",
    retry_delay: Annotated[Optional[str], typer.Option(
        "--retry-delay", metavar="DURATION",
        help="Concurrent: a fixed delay before each retry instead of RocketMQ's levels (10s, 30s, 1m ...).")] = None,
    dedup: Annotated[bool, typer.Option(
        "--dedup", help="Skip redeliveries of message ids whose handler already completed.")] = False,
    json: Annotated[bool, typer.Option(
        "--json", "-j",
        help="Write each message as a JSON envelope (what send --input json reads back); with "
             "--exec, the handler reads envelopes on stdin, one per line.")] = False,
    format_: Annotated[Optional[str], typer.Option(
        "--format", "-f", metavar="FORMAT", help=f"Output template (kcat's tokens): {FORMAT_HELP}.")] = None,
    rebalance_interval: Annotated[str, typer.Option(
        "--rebalance-interval", metavar="DURATION",
        help="Between rebalances when nothing changes (a member joining or leaving wakes it at once).")] = "5s",
) -> None:
    from mqctl.consumer.handlers import ExecSink, StdoutSink, split_command, warn
    from mqctl.options import ARG_FLAGS, parse_queue_ids
    from store.client.rules import check_consume_options
    from store.client.runtime import ConsumeOptions, Runtime, default_broadcast_client_id
    from store.errors import UsageError
    from store.names import parse_tag_expression, validate_any_topic, validate_client_id, validate_group
    validate_any_topic(topic)
    if no_group:
        if group is not None:
            raise UsageError("give --group or --no-group, not both")
        for flag, given in (("--broadcast", broadcast), ("--orderly", orderly), ("--dedup", dedup),
                            ("--client-id", client_id is not None), ("--strategy", strategy is not None),
                            ("--max-reconsume", max_reconsume is not None),
                            ("--retry-delay", retry_delay is not None)):
            if given:
                raise UsageError(f"{flag} needs a group; --no-group reads without one")
        group = "mqctl-no-group"
    elif group is None:
        raise UsageError("missing option --group/-g (or --no-group to read without a group); see: mqctl consume --help")
    validate_group(group)
    if json and format_ is not None:
        raise UsageError("give --json or --format, not both")
    if exec_ is not None and format_ is not None:
        raise UsageError("--format applies to stdout; with --exec, give --json or nothing")
    if exec_ is None and batch != 1:
        raise UsageError("--batch applies to --exec (messages per handler run); stdout gets every message "
                         "as it comes")
    check_consume_options(broadcast=broadcast, orderly=orderly, dedup=dedup, strategy=strategy, queues=queues,
                          max_reconsume=max_reconsume, retry_delay=retry_delay, suspend=suspend_ms,
                          arg_names=ARG_FLAGS)
    tags = parse_tag_expression(tag, "--tag")
    cfg_queues = parse_queue_ids(queues or "") if strategy == "config" else None
    from_ = {"earliest": "first", "latest": "last"}.get(from_, from_)
    from_where, from_ts = from_, None
    if from_ not in ("first", "last"):
        from store.timeparse import parse_time
        from_where, from_ts = "timestamp", parse_time(from_)
    idle_s = _seconds("--idle-timeout", idle_timeout, 0) if idle_timeout is not None else None
    handler_s = _seconds("--consume-timeout", consume_timeout, 1)
    rebalance_s = _seconds("--rebalance-interval", rebalance_interval, 50)
    render = _renderer(json, format_, state(ctx).utc) if exec_ is None or json else None
    argv = split_command(exec_) if exec_ is not None else None
    retry_ms = _duration_ms("--retry-delay", retry_delay) if retry_delay is not None else None
    opts = ConsumeOptions(
        topic=topic, group=group, orderly=orderly, broadcast=broadcast or no_group, from_where=from_where,
        from_timestamp=from_ts, tags=tags, batch=batch,
        threads=threads, count=count, exit_at_end=exit_at_end, idle_timeout_s=idle_s,
        strategy=strategy or "averagely", config_queues=cfg_queues, max_reconsume=max_reconsume,
        suspend_ms=1000 if suspend_ms is None else suspend_ms, dedup=dedup, retry_delay_ms=retry_ms,
        rebalance_interval_s=rebalance_s, no_group=no_group)
    if client_id is not None:
        opts.client_id = validate_client_id(client_id)
    elif broadcast:
        opts.client_id, opts.client_id_given = default_broadcast_client_id(), False
    else:
        opts.client_id_given = False
    if argv is not None:
        sink: ExecSink | StdoutSink = ExecSink(argv, group, handler_s, threads, batch,
                                               render if json else None)
    else:
        assert render is not None
        sink = StdoutSink(render, raw=not json and format_ is None)
    Runtime(state(ctx).store(), opts, sink, warn=warn).run()


def _seconds(flag: str, text: str, min_ms: int) -> float:
    """A DURATION flag in seconds; at least ``min_ms``."""
    from store.errors import UsageError
    ms = _duration_ms(flag, text)
    if ms < min_ms:
        raise UsageError(f"{flag} must be at least {min_ms} ms, not {text!r}" if min_ms
                         else f"{flag} must not be negative")
    return ms / 1000


def _duration_ms(flag: str, text: str) -> int:
    """A DURATION flag in ms; the error names the flag."""
    from store.errors import UsageError
    from store.timeparse import DURATION_HELP, parse_duration
    try:
        return parse_duration(text)
    except UsageError:
        raise UsageError(f"{flag} {text!r}: not a duration (accepted: {DURATION_HELP})") from None


def _renderer(json: bool, fmt: Optional[str], utc: bool) -> Callable[[Message], bytes]:
    if json:
        from mqctl.output import json_line
        from store.client.envelope import envelope
        return lambda m: json_line(envelope(m))
    if fmt is not None:
        from mqctl.template import compile_template
        return compile_template(fmt, utc).render
    return lambda m: m.body + b"\n"
