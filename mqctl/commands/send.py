"""``mqctl send``: one message from the command line, or many from stdin (``mqctl/stdin.py``
reads it, ``mqctl/sender.py`` batches, stores and reports)."""
from __future__ import annotations

import os
import sys
from typing import Annotated, Literal, Optional

import typer

from mqctl.msgargs import message_properties, unescape
from mqctl.options import JsonOpt, complete_topic
from mqctl.sender import BATCH_MESSAGES, Sender
from mqctl.stdin import read_chunks


def register(app: typer.Typer) -> None:
    app.command("send", help=HELP)(send)


HELP = """Send one message (BODY) or many (stdin, one per line).

Without BODY (or with -), each line of stdin is a message; --delimiter changes the
separator, --key-delimiter reads KEY<D>BODY lines (KEY is the sharding key), --input json
reads NDJSON objects (what consume --json prints). On a terminal, end the input with Ctrl-D.

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
    import signal as _signal
    import threading as _threading

    from store.errors import UsageError
    from store.names import validate_topic
    if _threading.current_thread() is _threading.main_thread():
        # Ctrl-C ends a send with exit 130 (after what was acknowledged is made durable, in
        # ``finish``), also when the shell started it with SIGINT ignored (a background job).
        _signal.signal(_signal.SIGINT, _signal.default_int_handler)
    validate_topic(topic)
    if sharding_key is not None and queue is not None:
        raise UsageError("give --sharding-key or --queue, not both")
    from_stdin = body is None or body == "-"
    if not from_stdin:
        for flag, given in (("--key-delimiter", key_delimiter is not None), ("--delimiter", delimiter is not None),
                            ("--input json", input_ == "json"), ("--reroute", reroute)):
            if given:
                raise UsageError(f"{flag} applies to messages read from stdin, not to a BODY argument")
    if key_delimiter is not None and input_ == "json":
        raise UsageError("--key-delimiter applies to --input raw only")
    if reroute and input_ != "json":
        raise UsageError("--reroute applies to --input json (it ignores each line's queueId)")
    delim = unescape(delimiter if delimiter is not None else "\\n")
    if not delim:
        raise UsageError("--delimiter may not be empty")
    kd = unescape(key_delimiter, "--key-delimiter") if key_delimiter is not None else None
    if kd == b"":
        raise UsageError("--key-delimiter may not be empty")
    base_props = message_properties(prop or [], tag, keys, sharding_key)
    from store.log.schedule import parse_delay
    deliver = parse_delay(delay) if delay is not None else None
    sender = Sender(ctx, topic, base_props, sharding_key, queue, flush == "sync", json, deliver)
    sender.batch_messages = batch_size
    sender.reroute = reroute
    sender.delay_text = (delay or "").strip()
    finished = False
    try:
        if not from_stdin:
            assert body is not None
            sender.add_raw(os.fsencode(body), 0)   # the argument's bytes, UTF-8 or not; line 0: BODY
        else:
            fd = sys.stdin.fileno()
            if os.isatty(fd):   # a person at a terminal: say what the silence is
                what = "JSON objects" if input_ == "json" else "messages"
                sep = "one per line" if delim == b"\n" else f"separated by {delimiter}"
                sys.stderr.write(f"mqctl: reading {what} from stdin, {sep} (Ctrl-D to end)\n")
                sys.stderr.flush()
            line = 0
            fast = input_ == "raw" and kd is None and deliver is None
            from mqctl.output import keep_big_buffers
            keep_big_buffers()   # read blocks and batch buffers: reused, not faulted in anew
            for records, more in read_chunks(fd, delim, zero_copy=fast):
                if fast:
                    sender.add_bodies(records, line, more)
                    line += len(records)
                    continue
                for rec in records:
                    line += 1
                    if input_ == "json":
                        sender.add_json(rec, line)
                    elif rec:
                        sender.add_raw(rec, line, kd)
                sender.flush()
        sender.flush()
        finished = True
    finally:
        try:
            sender.finish()
        finally:
            sender.summary(finished)
