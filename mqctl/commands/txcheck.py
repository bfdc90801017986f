"""``mqctl tx check``: the check service, asking a command about old half messages (how the
command runs and answers: ``mqctl/txrun.py``; what is shown: ``mqctl/txview.py``). Registered
in the ``tx`` group by ``mqctl/commands/tx.py``."""
from __future__ import annotations

from typing import Annotated

import typer

from mqctl.options import JsonOpt, state

CHECK_HELP = """Ask a command about old half messages and resolve them.

One pass over the half messages older than --timeout; with --loop, a pass every --interval
until SIGINT or SIGTERM (then exit 0). Passes of several processes run one at a time. CMD
gets the body on stdin and MQ_TX_ID, MQ_MSG_ID, MQ_TOPIC, MQ_QUEUE_ID, MQ_KEYS, MQ_TAGS,
MQ_BORN_TIMESTAMP and MQ_CHECK_TIMES in its environment.

CMD answers on the last non-empty line of its stdout, in any case, blanks around it ignored:
COMMIT or ROLLBACK resolves the transaction, UNKNOWN leaves it for a later pass (RocketMQ's
COMMIT_MESSAGE, ROLLBACK_MESSAGE and UNKNOW too). Any other answer, no answer, a non-zero
exit or overrunning --cmd-timeout leaves it unknown as well, with a warning. CMD's exit ends
its turn: its answer is what it wrote before, and whatever it left running is killed. After
--max-checks checks a transaction is parked in TRANS_CHECK_MAX_TIME_TOPIC; `mqctl tx commit`
or `rollback` still resolves it.

Examples:
  mqctl tx check --check-cmd ./order-status.sh --timeout 0
  mqctl tx check --check-cmd './order-status.sh --db prod' --loop"""


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
    from mqctl.txview import pass_summary, show_event
    from store import parse_duration
    argv = command_argv(check_cmd, "--check-cmd")
    timeout_ms, pause_s = parse_duration(timeout), parse_duration(interval) / 1000
    out = Output(json=json)
    check_service(state(ctx).admin(), argv, timeout_ms=timeout_ms, max_checks=max_checks,
                  cmd_timeout_s=parse_duration(cmd_timeout) / 1000 or None, loop_pause_s=pause_s if loop else None,
                  on_event=lambda ev: show_event(out, ev), on_pass=lambda report: out.info(pass_summary(report, _spoken(timeout))))


def _spoken(duration: str) -> str:
    """``6s`` as ``6 s``, a bare number as seconds: how the summary names --timeout."""
    text = duration.strip()
    if text.replace(".", "", 1).isdigit():
        return f"{text} s"
    import re
    return re.sub(r"(\d)([a-z]+)", r"\1 \2", text)
