"""``mqctl dlq list|resend``: a group's dead letters, and giving them another chance.

Dead letters are RocketMQ's: a message that failed ``--max-reconsume`` times is stored in
``%DLQ%<group>`` queue 0. Listing and resending them (a copy into the group's retry topic
``%RETRY%<group>``, the record of what was resent) are the library's:
``Admin.dead_letters`` / ``Admin.resend_dead_letters`` over ``store/client/dlq.py``, whose
docstring has the details and the record's file format. Orderly consumers do not read retry
topics, so when every live member of the group is orderly a warning says that a concurrent
consumer of the group must run to see the resent messages.
"""
from __future__ import annotations

from typing import Annotated, Optional

import typer

from mqctl.options import GroupOpt, JsonOpt, state

dlq_app = typer.Typer(help="Dead-letter queues: list a group's dead letters, resend them.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(dlq_app, name="dlq")


# -- listing -----------------------------------------------------------------------------------

@dlq_app.command("list", help="""A group's dead letters (%DLQ%GROUP), oldest first.

JSON rows are consume --json envelopes plus dlqOriginTopic, dlqOriginMsgId, resent (already
given another chance with dlq resend) and storeTime. STORED is a local time (--utc: UTC).
Exit 3 if the store does not know the group.

Examples:
  mqctl dlq list -g billing
  mqctl dlq list -g billing --json | jq -r 'select(.resent | not).msgId'""")
def list_(ctx: typer.Context, group: GroupOpt, json: JsonOpt = False) -> None:
    from mqctl.msgview import preview
    from mqctl.output import Output
    from store import format_local
    st = state(ctx)
    out = Output(json=json)
    rows, n = [], 0
    for letter in st.admin().dead_letters(group):
        row, n = letter.to_json(), n + 1
        if json:
            out.emit_json(row)  # streamed: a large DLQ starts printing at once
        else:
            rows.append(row | {"bodyPreview": preview(letter.message.body, 24),
                               "stored": format_local(letter.message.store_timestamp, st.utc)})
    if rows:
        out.table(rows, [("queueOffset", "OFFSET"), ("msgId", "MSG-ID"), ("dlqOriginTopic", "ORIGIN-TOPIC"),
                         ("reconsumeTimes", "RECONSUMES"), ("stored", "STORED"), ("resent", "RESENT"),
                         ("bodyPreview", "BODY")])
    elif n == 0 and not json:
        out.info(f"no dead letters for group {group}")


# -- resending ---------------------------------------------------------------------------------

@dlq_app.command("resend", help="""Give dead letters another chance (via %RETRY%GROUP).

Copies them to the group's retry topic with reconsumeTimes 0: all not yet resent, or only
the one(s) with --msg-id (unique key or offset id). Only the group's consumers see them
again, under their original topic. What was resent is recorded in config/dlqResend.json, so
a second resend skips it (--force resends anyway).

Examples:
  mqctl dlq resend -g billing --dry-run
  mqctl dlq resend -g billing
  mqctl dlq resend -g billing --msg-id 0BBFD16A3BCF76A68335686AF0BC1DDB""")
def resend(
    ctx: typer.Context,
    group: GroupOpt,
    msg_id: Annotated[Optional[str], typer.Option("--msg-id", "-m", metavar="MSGID",
                                                  help="Only this message (unique key or offset id).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Resend messages that were resent before, too.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", "-n", help="List what would be resent; change nothing.")] = False,
    json: JsonOpt = False,
) -> None:
    from mqctl.output import Output, plural
    out = Output(json=json)
    stream = (lambda r: out.emit_json(r.to_json())) if json else None  # JSON rows as each chunk goes
    with out.progress_callback("resending") as progress:
        res = state(ctx).admin().resend_dead_letters(group, msg_id, force=force, dry_run=dry_run,
                                                     progress=progress, on_row=stream)
    if res.topic is None:
        if not json:
            out.info(f"no dead letters for group {group}")
        return
    if res.rows:
        out.table([r.to_json() for r in res.rows], [("dlqOffset", "DLQ-OFFSET"), ("msgId", "MSG-ID"),
                                                ("originTopic", "ORIGIN-TOPIC"), ("topic", "TO"),
                                                ("queueOffset", "OFFSET")])
    if res.resent == res.skipped == 0:
        out.info(f"no dead letters for group {group}" if res.empty else
                 f"nothing to resend: every dead letter of group {group} was resent before (--force resends them)")
        return
    msg = f"{'would resend' if dry_run else 'resent'} {plural(res.resent, 'dead letter')} of group {group} to {res.retry_topic}"
    if res.skipped:
        msg += f"; {res.skipped} resent before skipped (--force resends them)"
    out.info(msg)
    if res.only_orderly_members:
        out.warn(f"the live members of {group} are orderly and do not read {res.retry_topic}: "
                 f"run a concurrent consumer of the group to process the resent messages")
