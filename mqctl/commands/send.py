"""``mqctl send``: one message from the command line, or many from stdin. This module parses
the flags; ``mqctl/sender.py`` runs the send (``mqctl/stdin.py`` reads stdin)."""
from __future__ import annotations

from typing import Annotated, Literal, Optional

import typer

from mqctl.options import JsonOpt, complete_topic, state
from mqctl.sender import BATCH_MESSAGES, SendRequest, run_send


def register(app: typer.Typer) -> None:
    app.command("send", help=HELP)(send)


HELP = """Send one message (BODY) or many (stdin, one per line).

Without BODY (or with -), each line of stdin is a message; --delimiter changes the
separator, --key-delimiter reads KEY<D>BODY lines (KEY is the sharding key), --input json
reads NDJSON objects (what consume --json prints; every field optional, a missing body is an
empty one; a msgId is kept as the message's id when the line names no topic or this one: a
resend that --dedup consumers skip). What msg show, msg query and dlq list --json add
(history, group, dlqOriginTopic, ...) is ignored, and so is the queueId of a line from a
system topic (%DLQ%, %RETRY%); other unknown fields are refused. On a terminal, end the
input with Ctrl-D.

Prints one human line on stderr (sent 3 messages to orders (queues 0,1,2)), or with --json
one object per message on stdout: status, msgId, offsetMsgId, topic, queueId, queueOffset,
commitLogOffset. A --delay message waits in the schedule topic until it is due: its JSON
names its topic and the queue it will be delivered to, queueOffset is null (it has none yet),
deliverTimestamp says when (ms), and commitLogOffset and offsetMsgId locate the waiting copy.
Its msgId stays the same once delivered.

Examples:
  mqctl send orders 'hello'
  seq 1000 | mqctl send orders --tag seq
  mqctl send orders 'later' --delay 1.5s
  # 'KEY:BODY' lines: messages with one KEY go to one queue, in order
  tail -F app.log | mqctl send logs --key-delimiter ':'
  mqctl consume a -g copy --json -e | mqctl send b --input json
  mqctl dlq list -g billing --json | mqctl send orders --input json
"""


def send(
    ctx: typer.Context,
    topic: Annotated[str, typer.Argument(
        metavar="TOPIC", show_default=False, autocompletion=complete_topic,
        help="Topic (created on first send unless the store forbids it).")],
    body: Annotated[Optional[str], typer.Argument(
        metavar="[BODY]", show_default=False, help="Message body; omit it or give - to read stdin.")] = None,
    tag: Annotated[Optional[str], typer.Option(
        "--tag", "-t", metavar="TAG", help="Tag (RocketMQ TAGS), what consume --tag selects.")] = None,
    keys: Annotated[Optional[str], typer.Option(
        "--keys", "-k", metavar="K1,K2", help="Business keys, comma separated, for msg query.")] = None,
    prop: Annotated[Optional[list[str]], typer.Option(
        "--property", "-p", metavar="NAME=VALUE", help="User property (repeatable).")] = None,
    sharding_key: Annotated[Optional[str], typer.Option(
        "--sharding-key", "-s", metavar="KEY", help="Same key -> same queue: |javaHash(KEY)| mod queues.")] = None,
    queue: Annotated[Optional[int], typer.Option(
        "--queue", "-q", metavar="N", min=0, help="Explicit queue id.")] = None,
    key_delimiter: Annotated[Optional[str], typer.Option(
        "--key-delimiter", "-K", metavar="D", help="Each stdin line is KEY<D>BODY; KEY is the sharding key.")] = None,
    delimiter: Annotated[Optional[str], typer.Option(
        "--delimiter", "-D", metavar="D",
        help="Record separator of stdin (escapes like \\t, \\0 allowed) [default: \\n].")] = None,
    input_: Annotated[Literal["raw", "json"], typer.Option(
        "--input", "-i", help="stdin format: raw (one body per record) or json (NDJSON objects).")] = "raw",
    flush: Annotated[Literal["async", "sync"], typer.Option(
        "--flush", help="async (page cache) or sync (fsync before the result is printed).")] = "async",
    delay: Annotated[Optional[str], typer.Option(
        "--delay", metavar="LEVEL|DURATION",
        help="Deliver later: a RocketMQ level 1-18 (1s 5s 10s 30s 1m ... 2h) or a duration like 1.5s, 90s, 1h30m.")] = None,
    batch_size: Annotated[int, typer.Option(
        "--batch-size", metavar="N", min=1, max=65536,
        help="At most N messages per store write (one lock each). With --flush sync, results are printed after "
             "an fsync covering their batch; batches written during an fsync share the next one.")] = BATCH_MESSAGES,
    reroute: Annotated[bool, typer.Option(
        "--reroute", help="--input json: ignore each line's queueId and route by its shardingKey (else round-robin), "
                          "e.g. to copy into a topic with fewer queues.")] = False,
    json: JsonOpt = False,
) -> None:
    run_send(state(ctx), SendRequest(
        topic=topic, body=body, tag=tag, keys=keys, properties=prop or [], sharding_key=sharding_key,
        queue=queue, key_delimiter=key_delimiter, delimiter=delimiter, input=input_, flush=flush,
        delay=delay, batch_size=batch_size, reroute=reroute, json=json))
