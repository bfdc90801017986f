"""``mqctl tx send|commit|rollback|list|check``: transactional messages (``store/tx/transaction.py``,
``store/tx/check.py``).

Commands given to ``--exec`` and ``--check-cmd`` are split like a shell command line (shlex)
and run without a shell, in a process group of their own that is killed on a timeout or an
interrupt. Each gets the message body on stdin and, in its environment::

    MQ_TX_ID, MQ_MSG_ID    the transaction id (= the message id consumers will see)
    MQ_TOPIC, MQ_QUEUE_ID  the real topic and queue
    MQ_KEYS                business keys, space separated (as for consume --exec)
    MQ_TAGS                the tag
    MQ_BORN_TIMESTAMP      ms since the epoch
    MQ_CHECK_TIMES         check only: 1 for the first check of this transaction

``--exec`` (the local transaction): exit 0 commits, exit 1 rolls back, anything else leaves
the transaction UNKNOWN for the check service. ``--check-cmd``: the last non-empty line of
its stdout is COMMIT or ROLLBACK (any case; COMMIT_MESSAGE / ROLLBACK_MESSAGE too) and it
exits 0; any other output, a non-zero exit, a crash or overrunning ``--cmd-timeout`` is
UNKNOWN, and the transaction is asked about again in a later pass.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from mqctl.options import JsonOpt, state

if TYPE_CHECKING:
    from store.log.broker import Store
    from store.log.record import Message
    from store.tx.check import CheckEvent, CheckReport

tx_app = typer.Typer(help="Transactional messages: half messages, commit/rollback, the check service.",
                     no_args_is_help=True)

_ANSWERS = {"COMMIT": "COMMIT", "COMMIT_MESSAGE": "COMMIT",
            "ROLLBACK": "ROLLBACK", "ROLLBACK_MESSAGE": "ROLLBACK"}

FlushOpt = Annotated[str, typer.Option(
    "--flush", help="async (page cache) or sync (fsync before the result is printed).")]


def register(app: typer.Typer) -> None:
    app.add_typer(tx_app, name="tx")


# -- running --exec / --check-cmd --------------------------------------------------------------

def _argv(command: str, flag: str) -> list[str]:
    """``command`` split like a shell line; its program must be runnable (exit 1 otherwise, as
    ``consume --exec``), so that a typo is refused before any half message is stored or any
    check is counted."""
    import shlex

    from mqctl.consumer.handlers import check_runnable
    from store.errors import UsageError
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise UsageError(f"{flag} {command!r}: {exc}") from exc
    if not argv:
        raise UsageError(f"{flag} needs a command")
    check_runnable(argv)
    return argv


def _env(m: "Message", check_times: int | None) -> dict[str, str]:
    from store.log.record import PROP_REAL_QID, PROP_REAL_TOPIC
    env = dict(os.environ)
    env.update(MQ_TX_ID=m.uniq_key or "", MQ_MSG_ID=m.uniq_key or "",
               MQ_TOPIC=m.properties.get(PROP_REAL_TOPIC, ""),
               MQ_QUEUE_ID=m.properties.get(PROP_REAL_QID, ""), MQ_KEYS=" ".join(m.keys),
               MQ_TAGS=m.tags or "", MQ_BORN_TIMESTAMP=str(m.born_timestamp))
    if check_times is not None:
        env["MQ_CHECK_TIMES"] = str(check_times)
    return env


class _Runner:
    """Runs one command at a time; :meth:`stop` (safe in a signal handler) kills it."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.stopping = False

    def run(self, argv: list[str], body: bytes, env: dict[str, str], timeout_s: float | None,
            capture: bool = True) -> tuple[int | None, bytes]:
        """(exit status, stdout); status None when it could not start or ran out of time.
        Without ``capture`` the command's stdout goes to our stderr (ours carries only data)."""
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, env=env, start_new_session=True,
                                    stdout=subprocess.PIPE if capture else sys.stderr.fileno())
        except OSError as exc:
            _warn(f"cannot run {argv[0]}: {exc.strerror or exc}")
            return None, b""
        self.proc = proc
        try:
            out, _ = proc.communicate(body, timeout=timeout_s)
            return proc.returncode, out or b""
        except subprocess.TimeoutExpired:
            _warn(f"{argv[0]} did not finish within {timeout_s:g}s; killed")
            return None, b""
        finally:
            self.proc = None
            if proc.poll() is None:  # timed out, or we are being interrupted
                _kill_group(proc)
                proc.communicate()

    def stop(self) -> None:
        self.stopping = True
        if self.proc is not None:
            _kill_group(self.proc)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _warn(msg: str) -> None:
    sys.stderr.write(f"mqctl: warning: {msg}\n")
    sys.stderr.flush()


def parse_answer(status: int | None, stdout: bytes) -> str:
    """A check command's verdict: COMMIT, ROLLBACK or UNKNOWN."""
    if status != 0:
        return "UNKNOWN"
    lines = [ln.strip() for ln in stdout.decode("utf-8", "replace").splitlines() if ln.strip()]
    return _ANSWERS.get(lines[-1].upper(), "UNKNOWN") if lines else "UNKNOWN"


# -- tx send ------------------------------------------------------------------------------------

def _properties(prop: list[str], tag: str | None, keys: str | None, sharding_key: str | None) -> dict[str, str]:
    from mqctl.commands.send import message_properties
    props = message_properties(prop, tag, keys, sharding_key)
    if sharding_key is not None:
        props["__SHARDINGKEY"] = sharding_key
    return props


def _sync(flush: str) -> bool:
    from store.errors import UsageError
    if flush not in ("sync", "async"):
        raise UsageError(f"--flush must be sync or async, not {flush!r}")
    return flush == "sync"


@tx_app.command("send", help="""Store a half message (invisible to consumers until committed).

Prints one JSON line: {"txId", "msgId", "state", ...}; state is PREPARED without --exec,
else COMMITTED, ROLLED_BACK or UNKNOWN (left to `tx check`).

\b
Examples:
  mqctl tx send orders '{"id":7}' --keys order-7
  mqctl tx send orders "$ORDER" --exec './charge-card.sh'   # exit 0 commit, 1 rollback
""")
def send(
    ctx: typer.Context,
    topic: Annotated[str, typer.Argument(help="Real topic (created on first send unless the store forbids it).")],
    body: Annotated[str, typer.Argument(help="Message body; '-' reads all of stdin as one body.")],
    tag: Annotated[Optional[str], typer.Option("--tag", "-t", help="Tag (RocketMQ TAGS).")] = None,
    keys: Annotated[Optional[str], typer.Option("--keys", "-k", help="Business keys, comma separated.")] = None,
    prop: Annotated[Optional[list[str]], typer.Option("--property", "-p", help="User property NAME=VALUE (repeatable).")] = None,
    sharding_key: Annotated[Optional[str], typer.Option("--sharding-key", "-s", help="Same key -> same queue.")] = None,
    queue: Annotated[Optional[int], typer.Option("--queue", "-q", min=0, help="Explicit queue id.")] = None,
    exec_: Annotated[Optional[str], typer.Option("--exec", "-x", metavar="CMD", help="Local transaction: exit 0 commits, 1 rolls back, else UNKNOWN.")] = None,
    flush: FlushOpt = "async",
) -> None:
    from mqctl.output import Output
    from store.errors import StoreError, UsageError
    from store.names import validate_topic
    from store.tx.transaction import send_half
    validate_topic(topic)
    if sharding_key is not None and queue is not None:
        raise UsageError("give --sharding-key or --queue, not both")
    sync = _sync(flush)
    argv = _argv(exec_, "--exec") if exec_ is not None else None
    props = _properties(prop or [], tag, keys, sharding_key)
    data = sys.stdin.buffer.read() if body == "-" else body.encode()
    store = state(ctx).store(create=True)
    res = send_half(store, topic, data, props, queue_id=-1 if queue is None else queue,
                    sharding_key=sharding_key, sync=sync)
    outcome, error = "PREPARED", None
    if argv is not None:
        try:
            outcome = _local_transaction(store, res.half, argv, sync)
        except StoreError as exc:  # e.g. `tx check` resolved it the other way meanwhile:
            # the one line still reports the state the store holds, then the error's exit code
            from store.tx.transaction import load
            outcome, error = load(store, res.tx_id).state, exc
    Output().emit_json({"txId": res.tx_id, "msgId": res.tx_id, "state": outcome, "topic": res.topic,
                        "queueId": res.queue_id, "offsetMsgId": res.offset_msg_id})
    if error is not None:
        raise error


def _local_transaction(store: "Store", half: "Message", argv: list[str], sync: bool) -> str:
    """Run the local transaction; commit or roll back on its exit status. Returns the state."""
    from store.tx.transaction import end_transaction
    status, _ = _Runner().run(argv, half.body, _env(half, None), None, capture=False)
    if status not in (0, 1):
        return "UNKNOWN"
    return end_transaction(store, half.uniq_key or "", commit=status == 0, sync=sync).state


# -- tx commit / rollback -----------------------------------------------------------------------

TxIdArg = Annotated[str, typer.Argument(metavar="TXID", help="Transaction id (or the offset id of its half message).")]


@tx_app.command("commit", help="Commit: the message becomes visible (no-op if committed; exit 4 if rolled back).")
def commit(ctx: typer.Context, tx_id: TxIdArg, flush: FlushOpt = "async", json: JsonOpt = False) -> None:
    _end(ctx, tx_id, True, _sync(flush), json)


@tx_app.command("rollback", help="Roll back: the message is never delivered (no-op if rolled back; exit 4 if committed).")
def rollback(ctx: typer.Context, tx_id: TxIdArg, flush: FlushOpt = "async", json: JsonOpt = False) -> None:
    _end(ctx, tx_id, False, _sync(flush), json)


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


# -- tx list ------------------------------------------------------------------------------------

@tx_app.command("list", help="Unresolved (PREPARED) transactions, oldest first.")
def list_(ctx: typer.Context, json: JsonOpt = False) -> None:
    from mqctl.output import Output
    from store.timeparse import format_time
    from store.tx.check import pending
    rows = [{"txId": p.tx_id, "topic": p.topic, "msgId": p.tx_id, "queueId": p.queue_id,
             "bornTimestamp": p.half.born_timestamp, "bornTime": format_time(p.half.born_timestamp),
             "checkTimes": p.check_times, "offsetMsgId": p.half.msg_id}
            for p in pending(state(ctx).store())]
    Output(json=json).table(rows, [("txId", "TX-ID"), ("topic", "TOPIC"), ("queueId", "QUEUE"),
                                   ("bornTime", "BORN"), ("checkTimes", "CHECKS")])


# -- tx check -----------------------------------------------------------------------------------

@tx_app.command("check", help="""Ask CMD about every half message older than --timeout, and resolve it.

One pass (or one every --interval with --loop, until SIGINT/SIGTERM, then exit 0). CMD gets the
body on stdin and MQ_TX_ID, MQ_TOPIC, MQ_MSG_ID, MQ_KEYS, MQ_TAGS, MQ_CHECK_TIMES in its
environment, and prints COMMIT, ROLLBACK or UNKNOWN. After --max-checks checks a transaction
is parked in TRANS_CHECK_MAX_TIME_TOPIC. Passes of several processes run one at a time.

\b
Example:
  mqctl tx check --check-cmd './order-status.sh' --loop
""")
def check(
    ctx: typer.Context,
    check_cmd: Annotated[str, typer.Option("--check-cmd", "-c", metavar="CMD", help="Command that answers COMMIT, ROLLBACK or UNKNOWN.")],
    timeout: Annotated[str, typer.Option("--timeout", metavar="DURATION", help="Leave half messages younger than this alone (bare number: seconds).")] = "6s",
    max_checks: Annotated[int, typer.Option("--max-checks", min=1, help="Checks before a transaction is discarded.")] = 15,
    loop: Annotated[bool, typer.Option("--loop", help="Keep running a pass every --interval.")] = False,
    interval: Annotated[str, typer.Option("--interval", metavar="DURATION", help="Pause between passes with --loop.")] = "30s",
    cmd_timeout: Annotated[str, typer.Option("--cmd-timeout", metavar="DURATION", help="A CMD running longer is killed (answer UNKNOWN); 0: no limit.")] = "60s",
    json: JsonOpt = False,
) -> None:
    from mqctl.output import Output
    from store.timeparse import parse_duration
    from store.tx.check import check_pass
    argv = _argv(check_cmd, "--check-cmd")
    timeout_ms, pause_s = parse_duration(timeout), parse_duration(interval) / 1000
    cmd_timeout_s = parse_duration(cmd_timeout) / 1000 or None
    store = state(ctx).store()
    out = Output(json=json)
    runner = _Runner()
    if loop:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: runner.stop())

    def ask(copy: "Message", times: int) -> str:
        return parse_answer(*runner.run(argv, copy.body, _env(copy, times), cmd_timeout_s))

    def on_event(ev: "CheckEvent") -> None:
        if json:
            out.emit_json({"txId": ev.tx_id, "topic": ev.topic, "msgId": ev.tx_id, "checkTimes": ev.check_times,
                           "action": ev.action, "answer": ev.answer, "state": ev.state})
        else:
            said = f" -> {ev.answer}" if ev.answer else ""
            out.info(f"{ev.tx_id} {ev.topic}: {ev.action} (check {ev.check_times}){said}: {ev.state}")

    while True:
        report = check_pass(store, ask, timeout_ms=timeout_ms, max_checks=max_checks,
                            on_event=on_event, should_stop=lambda: runner.stopping)
        if report.events or not loop:
            out.info(_summary(report))
        if not loop or runner.stopping:
            return
        deadline = time.monotonic() + pause_s
        while not runner.stopping and time.monotonic() < deadline:
            time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
        if runner.stopping:
            return


def _summary(report: "CheckReport") -> str:
    checked = [e for e in report.events if e.action == "checked"]
    count = {a: sum(1 for e in checked if e.answer == a) for a in ("COMMIT", "ROLLBACK", "UNKNOWN")}
    discarded = sum(1 for e in report.events if e.action == "discarded")
    (h0, h1), (o0, o1) = report.half_offsets, report.op_offsets
    return (f"check pass: {len(checked)} checked ({count['COMMIT']} commit, {count['ROLLBACK']} rollback, "
            f"{count['UNKNOWN']} unknown), {discarded} discarded; half offset {h0}->{h1}, op offset {o0}->{o1}")
