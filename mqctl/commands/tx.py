"""``mqctl tx send|commit|rollback|list|check``: transactional messages (``store/tx/``); how
the ``--exec`` and ``--check-cmd`` commands run and answer is in ``mqctl/txrun.py``."""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated, Any, Literal, Optional

import typer

from mqctl.options import JsonOpt, complete_topic, state

if TYPE_CHECKING:
    from store.tx.check import CheckEvent, CheckReport

tx_app = typer.Typer(help="Transactional messages: half messages, commit, rollback, check.",
                     no_args_is_help=True)

FlushOpt = Annotated[Literal["async", "sync"], typer.Option(
    "--flush", help="async: page cache; sync: fsync before the result is printed.")]
TxIdArg = Annotated[str, typer.Argument(
    metavar="TXID", help="Transaction id (or the offset id of its half message).", show_default=False)]
STATE_WORDS = {"COMMITTED": "committed", "ROLLED_BACK": "rolled back", "PREPARED": "left unknown",
               "DISCARDED": "discarded"}


def register(app: typer.Typer) -> None:
    app.add_typer(tx_app, name="tx")


SEND_HELP = """Store a half message, invisible until committed.

Prints one JSON line: {"txId", "msgId", "state", ...}; state is PREPARED without --exec,
else COMMITTED, ROLLED_BACK or UNKNOWN (left to `mqctl tx check`).

BODY '-' reads all of stdin as ONE body (a file, a JSON document, binary data). This is
unlike `mqctl send`, which sends one message per line of stdin.

--exec CMD runs the local transaction: CMD gets the body on stdin and MQ_TX_ID, MQ_TOPIC,
MQ_KEYS, MQ_TAGS in its environment; exit 0 commits, exit 1 rolls back, anything else leaves
the transaction to `mqctl tx check`.

Examples:
  mqctl tx send orders '{"id":7}' --keys order-7
  mqctl tx send orders "$ORDER" --exec ./charge-card.sh
  mqctl tx send orders - < order.json"""


@tx_app.command("send", help=SEND_HELP)
def send(
    ctx: typer.Context,
    topic: Annotated[str, typer.Argument(
        metavar="TOPIC", help="Real topic (created on first send unless the store forbids it).",
        autocompletion=complete_topic, show_default=False)],
    body: Annotated[str, typer.Argument(
        metavar="BODY", help="Message body; '-' reads all of stdin as one body.", show_default=False)],
    tag: Annotated[Optional[str], typer.Option("--tag", "-t", metavar="TAG", help="Tag (RocketMQ TAGS).")] = None,
    keys: Annotated[Optional[str], typer.Option("--keys", "-k", metavar="K1,K2", help="Business keys, comma separated.")] = None,
    prop: Annotated[Optional[list[str]], typer.Option(
        "--property", "-p", metavar="NAME=VALUE", help="User property (repeatable).")] = None,
    sharding_key: Annotated[Optional[str], typer.Option(
        "--sharding-key", "-s", metavar="KEY", help="Same key -> same queue.")] = None,
    queue: Annotated[Optional[int], typer.Option("--queue", "-q", metavar="ID", min=0, help="Explicit queue id.")] = None,
    exec_: Annotated[Optional[str], typer.Option(
        "--exec", "-x", metavar="CMD", help="Local transaction: exit 0 commits, 1 rolls back, else UNKNOWN.")] = None,
    flush: FlushOpt = "async",
    json: Annotated[bool, typer.Option(
        "--json", "-j", help="Accepted for symmetry: tx send always prints its one JSON line.")] = False,
) -> None:
    from mqctl.msgargs import message_properties
    from mqctl.output import Output
    from mqctl.txrun import command_argv, local_transaction
    from store.errors import StoreError, UsageError
    from store.log.record import PROP_SHARDING_KEY
    from store.names import validate_topic
    from store.tx.transaction import load, send_half
    validate_topic(topic)
    if sharding_key is not None and queue is not None:
        raise UsageError("give --sharding-key or --queue, not both")
    argv = command_argv(exec_, "--exec") if exec_ is not None else None
    props = message_properties(prop or [], tag, keys, sharding_key)
    if sharding_key is not None:
        props[PROP_SHARDING_KEY] = sharding_key
    if body == "-" and sys.stdin.isatty():
        Output().info("mqctl: reading one body from stdin, all of it (Ctrl-D to end)")
    data = sys.stdin.buffer.read() if body == "-" else body.encode()
    store = state(ctx).store(create=True)
    res = send_half(store, topic, data, props, queue_id=-1 if queue is None else queue,
                    sharding_key=sharding_key, sync=flush == "sync")
    outcome, error = "PREPARED", None
    if argv is not None:
        try:
            outcome = local_transaction(store, res.half, argv, flush == "sync")
        except StoreError as exc:  # e.g. `tx check` resolved it the other way meanwhile:
            # the one line still reports the state the store holds, then the error's exit code
            outcome, error = load(store, res.tx_id).state, exc
    Output().emit_json({"txId": res.tx_id, "msgId": res.tx_id, "state": outcome, "topic": res.topic,
                        "queueId": res.queue_id, "offsetMsgId": res.offset_msg_id})
    if error is not None:
        raise error


@tx_app.command("commit", help="""Commit a transaction: its message becomes visible.

Committing twice is a no-op (exit 0); a rolled-back transaction is refused (exit 4).

Examples:
  mqctl tx commit "$txid"
  mqctl tx commit "$txid" --flush sync --json""")
def commit(ctx: typer.Context, tx_id: TxIdArg, flush: FlushOpt = "async", json: JsonOpt = False) -> None:
    _end(ctx, tx_id, True, flush == "sync", json)


@tx_app.command("rollback", help="""Roll back a transaction: its message is never delivered.

Rolling back twice is a no-op (exit 0); a committed transaction is refused (exit 4).

Examples:
  mqctl tx rollback "$txid"
""")
def rollback(ctx: typer.Context, tx_id: TxIdArg, flush: FlushOpt = "async", json: JsonOpt = False) -> None:
    _end(ctx, tx_id, False, flush == "sync", json)


def _end(ctx: typer.Context, text: str, commit: bool, sync: bool, json: bool) -> None:
    from mqctl.output import Output
    from store.tx.transaction import end_transaction, resolve_tx_id
    store = state(ctx).store()
    res = end_transaction(store, resolve_tx_id(store, text), commit, sync=sync)
    out = Output(json=json)
    if json:
        out.emit_json({"txId": res.tx_id, "state": res.state, "changed": res.changed, "topic": res.topic,
                       "commitOffsetMsgId": res.commit_offset_msg_id})
    else:
        word = "committed" if commit else "rolled back"
        out.info(f"{word} transaction {res.tx_id} ({res.topic})" if res.changed
                 else f"transaction {res.tx_id} was already {word}")


@tx_app.command("list", help="""List unresolved (PREPARED) transactions, oldest first.

Times are local (--utc for UTC), ages how long ago the half message was sent. With nothing to
list, a line on stderr and nothing on stdout (nothing at all with --json). --json gives
txId, topic, msgId, queueId, bornTimestamp (ms), checkTimes and offsetMsgId.

Examples:
  mqctl tx list
  mqctl tx list --json | jq -r .txId""")
def list_(ctx: typer.Context, json: JsonOpt = False) -> None:
    from mqctl.output import Output
    from store.timeparse import format_age, format_local, format_time
    from store.tx.check import pending
    from store.tx.transaction import now_ms
    utc, now = state(ctx).utc, now_ms()
    out = Output(json=json)
    txs = pending(state(ctx).store())
    rows: list[dict[str, Any]] = [
        {"txId": p.tx_id, "topic": p.topic, "msgId": p.tx_id, "queueId": p.queue_id,
         "bornTimestamp": p.half.born_timestamp, "bornTime": format_time(p.half.born_timestamp),
         "checkTimes": p.check_times, "offsetMsgId": p.half.msg_id} for p in txs]
    if json:
        for r in rows:
            out.emit_json(r)
    elif not rows:
        out.info("no unresolved half messages")
    else:
        for r, p in zip(rows, txs):
            r["born"] = format_local(p.half.born_timestamp, utc)
            r["age"] = format_age(max(0, now - p.half.born_timestamp))
        out.table(rows, [("txId", "TX-ID"), ("topic", "TOPIC"), ("queueId", "QUEUE"), ("born", "BORN"),
                         ("age", "AGE"), ("checkTimes", "CHECKS")])


CHECK_HELP = """Ask a command about old half messages and resolve them.

One pass over the half messages older than --timeout; with --loop, a pass every --interval
until SIGINT or SIGTERM (then exit 0). Passes of several processes run one at a time. CMD
gets the body on stdin and MQ_TX_ID, MQ_MSG_ID, MQ_TOPIC, MQ_QUEUE_ID, MQ_KEYS, MQ_TAGS,
MQ_BORN_TIMESTAMP and MQ_CHECK_TIMES in its environment.

CMD answers on the last non-empty line of its stdout, in any case, blanks around it ignored:
COMMIT or ROLLBACK resolves the transaction, UNKNOWN leaves it for a later pass (RocketMQ's
COMMIT_MESSAGE, ROLLBACK_MESSAGE and UNKNOW too). Any other answer, no answer, a non-zero
exit or overrunning --cmd-timeout leaves it unknown as well, with a warning. After
--max-checks checks a transaction is parked in TRANS_CHECK_MAX_TIME_TOPIC; `mqctl tx commit`
or `rollback` still resolves it.

Examples:
  mqctl tx check --check-cmd ./order-status.sh --timeout 0
  mqctl tx check --check-cmd './order-status.sh --db prod' --loop"""


@tx_app.command("check", help=CHECK_HELP)
def check(
    ctx: typer.Context,
    check_cmd: Annotated[str, typer.Option(
        "--check-cmd", metavar="CMD", help="Command that answers COMMIT, ROLLBACK or UNKNOWN.", show_default=False)],
    timeout: Annotated[str, typer.Option(
        "--timeout", metavar="DURATION", help="Leave half messages younger than this alone (bare number: seconds).")] = "6s",
    max_checks: Annotated[int, typer.Option("--max-checks", metavar="N", min=1, help="Checks before a transaction is parked.")] = 15,
    loop: Annotated[bool, typer.Option("--loop", help="Keep running a pass every --interval.")] = False,
    interval: Annotated[str, typer.Option("--interval", metavar="DURATION", help="Pause between passes with --loop.")] = "30s",
    cmd_timeout: Annotated[str, typer.Option(
        "--cmd-timeout", metavar="DURATION", help="A CMD running longer is killed (answer UNKNOWN); 0: no limit.")] = "60s",
    json: JsonOpt = False,
) -> None:
    from mqctl.output import Output
    from mqctl.txrun import check_service, command_argv
    from store.timeparse import parse_duration
    argv = command_argv(check_cmd, "--check-cmd")
    timeout_ms, pause_s = parse_duration(timeout), parse_duration(interval) / 1000
    out = Output(json=json)

    def on_event(ev: "CheckEvent") -> None:
        if json:
            out.emit_json({"txId": ev.tx_id, "topic": ev.topic, "msgId": ev.tx_id, "checkTimes": ev.check_times,
                           "action": ev.action, "answer": ev.answer, "state": ev.state})
        else:
            out.info(_event_line(ev))

    check_service(state(ctx).store(), argv, timeout_ms=timeout_ms, max_checks=max_checks,
                  cmd_timeout_s=parse_duration(cmd_timeout) / 1000 or None, loop_pause_s=pause_s if loop else None,
                  on_event=on_event, on_pass=lambda report: out.info(_summary(report)))


def _event_line(ev: "CheckEvent") -> str:
    from mqctl.output import plural
    what = f"transaction {ev.tx_id} ({ev.topic})"
    if ev.action == "discarded":
        return f"{what}: parked in TRANS_CHECK_MAX_TIME_TOPIC after {plural(ev.check_times, 'check')}"
    if ev.action == "repaired":
        return f"{what}: already {STATE_WORDS.get(ev.state, ev.state)}; its lost op record was restored"
    if ev.state == "PREPARED":
        return f"{what}: check {ev.check_times} left it unknown; asked again in a later pass"
    return f"{what}: check {ev.check_times} answered {ev.answer}: {STATE_WORDS.get(ev.state, ev.state)}"


def _summary(report: "CheckReport") -> str:
    from mqctl.output import plural
    checked = [e for e in report.events if e.action == "checked"]
    if not report.events:
        return "check pass: nothing to check"
    count = {s: sum(1 for e in checked if e.state == s) for s in ("COMMITTED", "ROLLED_BACK", "PREPARED")}
    discarded = sum(1 for e in report.events if e.action == "discarded")
    return (f"check pass: {plural(len(checked), 'transaction')} checked ({count['COMMITTED']} committed, "
            f"{count['ROLLED_BACK']} rolled back, {count['PREPARED']} left unknown), {discarded} parked")
