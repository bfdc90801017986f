"""``mqctl tx send|commit|rollback|list|check``: transactional messages (``store/tx/``); how
the ``--exec`` and ``--check-cmd`` commands run and answer is in ``mqctl/txrun.py``, what is
shown in ``mqctl/txview.py``, and ``tx check`` in ``mqctl/commands/txcheck.py``."""
from __future__ import annotations

import sys
from typing import Annotated, Literal, Optional

import typer

from mqctl.commands.txcheck import CHECK_HELP, check
from mqctl.options import JsonOpt, complete_topic, state

tx_app = typer.Typer(help="Transactional messages: half messages, commit, rollback, check.",
                     no_args_is_help=True)

FlushOpt = Annotated[Literal["async", "sync"], typer.Option(
    "--flush", help="async: page cache; sync: fsync before the result is printed.")]
TxIdArg = Annotated[str, typer.Argument(
    metavar="TXID", help="Transaction id (or the offset id of its half message).", show_default=False)]


def register(app: typer.Typer) -> None:
    app.add_typer(tx_app, name="tx")


SEND_HELP = """Store a half message, invisible until committed.

Prints one JSON line: {"txId", "msgId", "state", ...}; state is PREPARED without --exec,
else COMMITTED, ROLLED_BACK or UNKNOWN (left to `mqctl tx check`).

BODY '-' reads all of stdin as ONE body (a file, a JSON document, binary data). This is
unlike `mqctl send`, which sends one message per line of stdin.

--exec CMD runs the local transaction: CMD gets the body on stdin and MQ_TX_ID, MQ_TOPIC,
MQ_KEYS, MQ_TAGS in its environment; exit 0 commits, exit 1 rolls back, anything else leaves
the transaction to `mqctl tx check`. Before CMD starts, one line on stderr names the half
message ("mqctl: half message stored: txId …"), so it can be resolved if mqctl is killed.
Once CMD exits, whatever it left running in its process group is killed (start lasting work
with setsid, or from the consumer of the committed message).

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
    from store import validate_topic
    from store.errors import StoreError, UsageError
    validate_topic(topic)
    if sharding_key is not None and queue is not None:
        raise UsageError("give --sharding-key or --queue, not both")
    argv = command_argv(exec_, "--exec") if exec_ is not None else None
    props = message_properties(prop or [], tag, keys, sharding_key)
    if body == "-" and sys.stdin.isatty():
        Output().info("mqctl: reading one body from stdin, all of it (Ctrl-D to end)")
    data = sys.stdin.buffer.read() if body == "-" else body.encode()
    st = state(ctx)
    st.store(create=True)
    admin = st.admin()
    res = admin.prepare_transaction(topic, data, props, queue=queue, sharding_key=sharding_key,
                                    sync=flush == "sync")
    outcome, error = "PREPARED", None
    if argv is not None:
        # stdout's one JSON line comes at the end; this names the half message now, so a
        # caller whose mqctl dies during CMD (kill -9) can still commit or roll it back
        Output().info(f"mqctl: half message stored: txId {res.tx_id} (topic {res.topic}, queue "
                      f"{res.queue_id}, offsetMsgId {res.offset_msg_id}); running the local transaction")
        try:
            outcome = local_transaction(admin, res.half, argv, flush == "sync")
        except StoreError as exc:  # e.g. `tx check` resolved it the other way meanwhile:
            # the one line still reports the state the store holds, then the error's exit code
            outcome, error = admin.transaction_state(res.tx_id), exc
    from mqctl.output import BrokenPipe, say
    try:
        Output().emit_json({"txId": res.tx_id, "msgId": res.tx_id, "state": outcome, "topic": res.topic,
                            "queueId": res.queue_id, "offsetMsgId": res.offset_msg_id})
    except BrokenPipe:   # (the reader left: a note, and exit 141 as every command gives it)
        say(f"mqctl: stdout was closed by the reader; the half message is stored as txId {res.tx_id} ({outcome})")
        raise
    except OSError as exc:   # (>&-, a full disk: the error names the half message, or nothing could)
        from mqctl.errors import stdout_failure
        from store.errors import OperationError
        raise OperationError(f"{stdout_failure(exc)}; the half message is stored as txId {res.tx_id} "
                             f"({outcome})") from exc
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
    from mqctl.txview import show_end
    show_end(Output(json=json), state(ctx).admin().end_transaction(text, commit, sync=sync), commit)


@tx_app.command("list", help="""List unresolved (PREPARED) transactions, oldest first.

Times are local (--utc for UTC), ages how long ago the half message was sent. With nothing to
list, a line on stderr and nothing on stdout (nothing at all with --json). --json gives
txId, topic, msgId, queueId, bornTimestamp (ms), checkTimes and offsetMsgId.

--parked lists instead the transactions tx check parked after --max-checks and nobody resolved
since (tx commit / rollback still do), oldest parked first; --json adds state (DISCARDED)
and parkedTimestamp (ms).

Examples:
  mqctl tx list
  mqctl tx list --json | jq -r .txId
  mqctl tx list --parked""")
def list_(ctx: typer.Context, parked: Annotated[bool, typer.Option(
        "--parked", help="List the transactions parked after --max-checks instead.")] = False,
          json: JsonOpt = False) -> None:
    import time

    from mqctl.output import Output
    from mqctl.txview import show_pending
    st = state(ctx)
    txs = st.admin().transactions(parked=parked)
    show_pending(Output(json=json), txs, time.time_ns() // 1_000_000, st.utc, parked)


# ``tx check`` (the check service) has a module of its own; registered last, as listed
tx_app.command("check", help=CHECK_HELP)(check)
