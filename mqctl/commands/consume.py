"""``mqctl consume``: be a member of a consumer group until stopped. This module parses the
flags; ``mqctl/consumerun.py`` checks them and runs the member."""
from __future__ import annotations

from typing import Annotated, Literal, Optional

import typer

from mqctl.options import complete_group, complete_topic, state
from mqctl.template import FORMAT_HELP

HELP = """Consume a topic as a member of a consumer group.

Each message is written to stdout: its body and a newline, a --json envelope (one per line)
or a --format template. With --exec CMD, CMD runs once per message with the body on stdin
and MQ_TOPIC, MQ_QUEUE_ID, MQ_QUEUE_OFFSET, MQ_MSG_ID, MQ_KEYS, MQ_TAGS, MQ_RECONSUME_TIMES,
MQ_GROUP, MQ_BORN_TIMESTAMP, MQ_STORE_TIMESTAMP in its environment; exit 0 = consumed,
anything else = retried. Delivery is at-least-once.

Exit status: 1 when the run gave up on a message (dead-lettered it after --max-reconsume
retries, or skipped a failed --broadcast one) and ended on its own (-e, --count,
--idle-timeout); 0 otherwise, and 0 when stopped by SIGINT/SIGTERM (a warning then says
what it gave up on).

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

With --to DST the member is an exactly-once pipeline stage: each message is copied to DST,
or with --exec CMD, CMD's stdout becomes DST's messages (a message per line, or with --output
json one NDJSON object per line: body, keys, tags, shardingKey, properties), and those outputs
are written in one atomic batch with the group's offsets for their inputs: after a crash,
kill -9 or power cut (--flush sync) both are there or neither. A failing CMD emits nothing and
is retried as usual. Outputs keep their inputs' queue order.

Examples:
  mqctl consume orders -g billing --from first -e
  mqctl consume orders -g billing --exec ./handle.sh
  mqctl consume orders -g ledger --orderly --exec ./apply.sh
  mqctl consume orders -g audit --json --tag 'paid || refunded'
  mqctl consume orders --no-group --from first -e -f '%p@%o %k %s\\n'
  mqctl consume orders -g copy --from first -e --json --batch 500 \\
      --exec 'mqctl send orders-copy --input json --reroute'
  mqctl consume orders -g mirror --from first --to orders-copy
  mqctl consume orders -g enrich --exec ./enrich.sh --output json \\
      --to orders-enriched
"""

def register(app: typer.Typer) -> None:
    app.command("consume", help=HELP)(consume)


def complete_from(incomplete: str) -> list[str]:
    """``--from``: the words (a time or an offset is typed, not completed)."""
    return [w for w in ("first", "last", "beginning", "end", "stored") if w.startswith(incomplete)]


def complete_format(incomplete: str) -> list[tuple[str, str]]:
    """``--format``: raw and json, and each template token after what is typed (one ending in
    ``%`` gets the token's letter; zsh and fish show what each token is)."""
    from mqctl.template import TOKENS
    words = [(w, h) for w, h in (("raw", "each body and a newline"), ("json", "as --json"))
             if w.startswith(incomplete)]
    if incomplete.endswith("%") or not incomplete:
        words += [(incomplete[:-1] + tok if incomplete else tok, desc) for tok, desc in TOKENS]
    return words


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
        "--from", "-o", metavar="first|last|TIME|-N|+N|N", autocompletion=complete_from,
        help="Where a group new to the topic starts (a queue it has no offset for in a topic it has offsets in: at its "
             "first message): first (beginning), last (end, stored), "
             "a TIME (ISO-8601, without offset = UTC, not local time; ms since epoch; -1h; also @TIME "
             "as rpk, s@MS as kcat), -N (N before the end of each queue, kcat), "
             "+N (N after the start of each queue, rpk) or N (each queue from offset N, as kcat; "
             "--no-group).")] = "last",
    tag: Annotated[Optional[str], typer.Option(
        "--tag", "-t", metavar="EXPR", help="Tag filter: * (all) or 'A || B || C'.")] = None,
    exec_: Annotated[Optional[str], typer.Option(
        "--exec", "-x", metavar="CMD",
        help="Run CMD per message (or per --batch); exit 0 = consumed. Split like a shell line, "
             "run without a shell.")] = None,
    batch: Annotated[int, typer.Option(
        "--batch", metavar="N", min=1, max=1000,
        help="Messages per --exec run (stdin: one per line); at most 1000, what a queue's cache holds. "
             "A batch holds what is waiting, up to N.")] = 1,
    threads: Annotated[Optional[int], typer.Option(
        "--threads", metavar="N", min=1, max=256,
        help="--exec runs at a time (orderly: one per queue); default 4, 1 with --dedup.")] = None,
    count: Annotated[Optional[int], typer.Option(
        "--count", "-c", metavar="N", min=1,
        help="Stop after N messages taken, whatever their outcome (a failed one counts).")] = None,
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
        help="Retries before the DLQ: a message is handled at most N+1 times (default 16; orderly: unlimited, counted by the queue's holder).")] = None,
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
        "--format", "-f", metavar="FORMAT", autocompletion=complete_format,
        help=f"raw (the default: each body and a newline), json (as --json), or an output template "
             f"(kcat's tokens): {FORMAT_HELP}.")] = None,
    to: Annotated[Optional[str], typer.Option(
        "--to", metavar="DST", autocompletion=complete_topic,
        help="Exactly-once stage: copy each message to DST (with --exec: CMD's stdout becomes DST's "
             "messages), written in one atomic batch with the group's offsets.")] = None,
    output: Annotated[Optional[Literal["lines", "json"]], typer.Option(
        "--output",
        help="--exec --to: how CMD's stdout becomes messages: a message per line, or NDJSON objects "
             "(body, keys, tags, shardingKey, properties) [default: lines].", show_default=False)] = None,
    flush: Annotated[Optional[Literal["sync", "async"]], typer.Option(
        "--flush",
        help="--to: sync fsyncs each batch of outputs and offsets before it counts (a power cut keeps "
             "it); async leaves that to the periodic flush [default: async].", show_default=False)] = None,
    rebalance_interval: Annotated[str, typer.Option(
        "--rebalance-interval", metavar="DURATION",
        help="Between rebalances where changes cannot be seen (no inotify, a network file system); "
             "elsewhere a member joining or leaving, a topic or a lock changing starts one at once.")] = "5s",
) -> None:
    from mqctl.consumerun import ConsumeRequest, run_consume
    run_consume(state(ctx), ConsumeRequest(
        topic=topic, group=group, no_group=no_group, orderly=orderly, broadcast=broadcast, from_=from_, tag=tag,
        exec_=exec_, batch=batch, threads=threads if threads is not None else 1 if dedup else 4, count=count, exit_at_end=exit_at_end, idle_timeout=idle_timeout,
        client_id=client_id, strategy=strategy, queues=queues, max_reconsume=max_reconsume, suspend_ms=suspend_ms,
        consume_timeout=consume_timeout, retry_delay=retry_delay, dedup=dedup, json=json, format_=format_,
        rebalance_interval=rebalance_interval, to=to, output=output, flush=flush))
