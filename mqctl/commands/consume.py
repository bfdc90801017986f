"""``mqctl consume``: be a member of a consumer group until stopped."""
from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Callable, Optional

import typer

from mqctl.options import state

if TYPE_CHECKING:
    from store.log.record import Message

HELP = """Consume a topic as a member of a group (clustering by default).

Each message is written to stdout (a raw body per line, --json envelopes, or a --format
template), or handed to --exec CMD (body on stdin, MQ_* variables). Delivery is at-least-once.

Examples:
  mqctl consume orders -g billing --from first -e          # drain what is there, then exit
  mqctl consume orders -g billing --exec ./handle.sh       # concurrent, retries, DLQ
  mqctl consume orders -g ledger --orderly --exec ./apply  # one process per queue, in order
  mqctl consume orders -g audit --json --tag 'paid || refunded' | jq .body
  mqctl consume orders --no-group --from earliest -e        # a read: no offsets, no member
  mqctl consume orders -g copy --from first -e --json --batch 500 \
      --exec 'mqctl send orders-copy --input json --reroute'  # a safe copy
"""


def register(app: typer.Typer) -> None:
    app.command("consume", help=HELP)(consume)


def consume(
    ctx: typer.Context,
    topic: Annotated[str, typer.Argument(help="Topic to consume.")],
    group: Annotated[Optional[str], typer.Option("--group", "-g", help="Consumer group.")] = None,
    no_group: Annotated[bool, typer.Option("--no-group", help="Read without a group (like kcat -C without -G): nothing is committed, no retention is held, not a member.")] = False,
    orderly: Annotated[bool, typer.Option("--orderly", help="One process per queue at a time, in queue order, under a queue lock.")] = False,
    broadcast: Annotated[bool, typer.Option("--broadcast", help="Every member gets every message (offsets kept per client).")] = False,
    from_: Annotated[str, typer.Option("--from", "-o", help="Where a queue with no committed offset starts: first (earliest), last (latest), or a time (ISO-8601, ms since epoch, -1h).")] = "last",
    tag: Annotated[Optional[str], typer.Option("--tag", "-t", help="Tag filter: 'A || B' (* = all).")] = None,
    exec_: Annotated[Optional[str], typer.Option("--exec", "-x", help="Run CMD per message (or per --batch); exit 0 = consumed. Split like a shell line, run without a shell.")] = None,
    batch: Annotated[int, typer.Option("--batch", "-b", min=1, help="Messages per handler run.")] = 1,
    threads: Annotated[int, typer.Option("--threads", min=1, max=256, help="Concurrent handler runs (concurrent mode).")] = 4,
    count: Annotated[Optional[int], typer.Option("--count", "-c", "-n", min=1, help="Stop after N messages.")] = None,
    exit_at_end: Annotated[bool, typer.Option("--exit-at-end", "-e", help="Stop when the queues held are drained up to their end at start.")] = False,
    idle_timeout: Annotated[Optional[float], typer.Option("--idle-timeout", min=0.0, help="Stop after SECONDS with nothing to consume.")] = None,
    client_id: Annotated[Optional[str], typer.Option("--client-id", help="Member id (default HOST@PID; broadcast: HOST@DEFAULT, stable across restarts); must be unique among live members.")] = None,
    strategy: Annotated[str, typer.Option("--strategy", help="Queue allocation: averagely, circle, hash, config.")] = "averagely",
    queues: Annotated[Optional[str], typer.Option("--queues", help="Queue ids for --strategy config, e.g. 0,3.")] = None,
    max_reconsume: Annotated[Optional[int], typer.Option("--max-reconsume", min=0, help="Deliveries before the DLQ (default 16; orderly: unlimited).")] = None,
    suspend_ms: Annotated[int, typer.Option("--suspend-ms", min=10, max=30000, help="Orderly: wait before retrying a failed message in place.")] = 1000,
    consume_timeout: Annotated[Optional[float], typer.Option("--consume-timeout", min=0.001, help="Kill a handler after SECONDS and count it as failed (default 15 min).")] = 900.0,
    retry_delay: Annotated[Optional[str], typer.Option("--retry-delay", help="Concurrent: fixed delay before a retry instead of RocketMQ's levels (e.g. 2s).")] = None,
    dedup: Annotated[bool, typer.Option("--dedup", help="Skip redeliveries of message ids whose handler already completed.")] = False,
    json: Annotated[bool, typer.Option("--json", "-j", "-J", help="Write each message as a JSON envelope (round-trips into send --input json); with --exec, the handler reads envelopes on stdin, one per line.")] = False,
    format_: Annotated[Optional[str], typer.Option("--format", "-f", help="kcat-style template: %t topic %q queue %o offset %k keys %T tags %s body %i msgId %h properties %d time ...")] = None,
    rebalance_interval: Annotated[float, typer.Option("--rebalance-interval", min=0.05, help="Seconds between rebalances when nothing changes (a member joining or leaving wakes it at once).")] = 5.0,
) -> None:
    from mqctl.consumer.handlers import ExecSink, StdoutSink, warn
    from store.client.runtime import ConsumeOptions, Runtime
    from store.errors import UsageError
    from store.names import parse_tag_expression, validate_any_topic, validate_client_id, validate_group
    validate_any_topic(topic)
    if no_group:
        if group is not None:
            raise UsageError("give --group or --no-group, not both")
        for flag, given in (("--broadcast", broadcast), ("--orderly", orderly), ("--dedup", dedup),
                            ("--client-id", client_id is not None)):
            if given:
                raise UsageError(f"{flag} needs a group; --no-group reads without one")
        group = "mqctl-no-group"
    elif group is None:
        raise UsageError("missing option --group/-g (or --no-group to read without a group); see: mqctl consume --help")
    validate_group(group)
    if json and format_:
        raise UsageError("give --json or --format, not both")
    if strategy not in ("averagely", "circle", "hash", "config"):
        raise UsageError(f"--strategy must be averagely, circle, hash or config, not {strategy!r}")
    cfg_queues = None
    if strategy == "config":
        if not queues:
            raise UsageError("--strategy config needs --queues, e.g. --queues 0,3")
        try:
            cfg_queues = sorted({int(x) for x in queues.split(",") if x.strip()})
        except ValueError as exc:
            raise UsageError(f"--queues {queues!r}: expected queue ids like 0,3") from exc
    elif queues:
        raise UsageError("--queues applies to --strategy config only")
    from_ = {"earliest": "first", "latest": "last"}.get(from_, from_)
    from_where, from_ts = from_, None
    if from_ not in ("first", "last"):
        from store.timeparse import parse_time
        from_where, from_ts = "timestamp", parse_time(from_)
    render = _renderer(json, format_) if exec_ is None or json else None
    if exec_ is not None and format_ is not None:
        raise UsageError("--format applies to stdout; with --exec, give --json or nothing")
    argv = None
    if exec_ is not None:
        from mqctl.consumer.handlers import split_command
        argv = split_command(exec_)
    retry_ms = None
    if retry_delay is not None:
        from store.timeparse import parse_duration
        retry_ms = parse_duration(retry_delay)
    opts = ConsumeOptions(
        topic=topic, group=group, orderly=orderly, broadcast=broadcast or no_group, from_where=from_where,
        from_timestamp=from_ts, tags=parse_tag_expression(tag), batch=batch,
        threads=threads, count=count, exit_at_end=exit_at_end, idle_timeout_s=idle_timeout,
        strategy=strategy, config_queues=cfg_queues, max_reconsume=max_reconsume,
        suspend_ms=suspend_ms, dedup=dedup, retry_delay_ms=retry_ms,
        rebalance_interval_s=rebalance_interval, no_group=no_group)
    if client_id is not None:
        opts.client_id = validate_client_id(client_id)
    elif broadcast:
        from store.client.runtime import default_broadcast_client_id
        opts.client_id, opts.client_id_given = default_broadcast_client_id(), False
    else:
        opts.client_id_given = False
    if argv is not None:
        sink: ExecSink | StdoutSink = ExecSink(argv, group, consume_timeout, threads, batch,
                                               render if json else None)
    else:
        assert render is not None
        sink = StdoutSink(render, raw=not json and format_ is None)
    Runtime(state(ctx).store(), opts, sink, warn=warn).run()


def _renderer(json: bool, fmt: Optional[str]) -> Callable[[Message], bytes]:
    if json:
        from mqctl.output import json_line
        from store.client.envelope import envelope
        return lambda m: json_line(envelope(m))
    if fmt is not None:
        from mqctl.template import compile_template
        return compile_template(fmt).render
    return lambda m: m.body + b"\n"
