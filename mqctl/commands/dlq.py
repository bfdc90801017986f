"""``mqctl dlq list|resend``: a group's dead letters, and giving them another chance.

Dead letters are RocketMQ's: a message that failed ``--max-reconsume`` times is stored in
``%DLQ%<group>`` queue 0 with ``DLQ_ORIGIN_TOPIC`` / ``DLQ_ORIGIN_MESSAGE_ID`` and its unique
key (so ``msg show`` finds its whole history).

Resend puts a copy of each dead letter into the group's retry topic ``%RETRY%<group>`` queue 0,
the way the broker's send-back does: only that group subscribes to it, ``RETRY_TOPIC`` keeps
the original topic (handlers see ``MQ_TOPIC`` = the original topic), ``reconsumeTimes`` starts
again at 0 and the unique key is kept. Concurrent consumers of the group pick it up; orderly
consumers do not read retry topics (RocketMQ's orderly mode retries in place), so for them a
warning says that a concurrent consumer of the group must run to see the resent messages.

What was resent is recorded by ``store/client/dlq.py`` (its docstring has the file format),
so a second ``resend`` skips it (``--force`` resends anyway).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from mqctl.options import GroupOpt, JsonOpt, state
from store.client.dlq import is_resent, load_record, mark_resent, resent_offsets, save_record

if TYPE_CHECKING:
    from store.log.broker import Store
    from store.log.record import Message

dlq_app = typer.Typer(help="Dead-letter queues: list a group's dead letters, resend them.", no_args_is_help=True)

CHUNK = 256


def register(app: typer.Typer) -> None:
    app.add_typer(dlq_app, name="dlq")


# -- listing -----------------------------------------------------------------------------------

def _dlq_topic(store: "Store", group: str) -> str | None:
    """The group's DLQ topic, None when nothing of it was dead-lettered (exit 3: unknown group)."""
    from store.client.admin import require_group
    from store.names import dlq_topic
    require_group(store, group)
    topic = dlq_topic(group)
    return topic if store.has_topic(topic) else None


def _origin(m: "Message") -> str | None:
    from store.log.record import PROP_DLQ_ORIGIN_TOPIC, PROP_RETRY_TOPIC
    return m.properties.get(PROP_DLQ_ORIGIN_TOPIC) or m.properties.get(PROP_RETRY_TOPIC)


def _row(m: "Message", group: str, resent: bool) -> dict[str, Any]:
    from store.client.envelope import envelope
    from store.log.record import PROP_DLQ_ORIGIN_MESSAGE_ID
    from store.timeparse import format_time
    row = envelope(m)
    row.update({"group": group, "dlqOriginTopic": _origin(m),
                "dlqOriginMsgId": m.properties.get(PROP_DLQ_ORIGIN_MESSAGE_ID), "resent": resent,
                "storeTime": format_time(m.store_timestamp)})
    return row


def _preview(body: Any, width: int = 40) -> str:
    text = str(body).replace("\n", "\\n")
    return text if len(text) <= width else text[: width - 1] + "…"


@dlq_app.command("list", help="""A group's dead letters (%DLQ%GROUP), oldest first.

JSON rows are consume --json envelopes plus dlqOriginTopic, dlqOriginMsgId, resent (already
given another chance with dlq resend) and storeTime. STORED is a local time (--utc: UTC).
Exit 3 if the store does not know the group.

Examples:
  mqctl dlq list -g billing
  mqctl dlq list -g billing --json | jq -r 'select(.resent | not).msgId'""")
def list_(ctx: typer.Context, group: GroupOpt, json: JsonOpt = False) -> None:
    from mqctl.output import Output
    from store.timeparse import format_local
    st = state(ctx)
    store = st.store()
    topic = _dlq_topic(store, group)
    record = load_record(store)
    out = Output(json=json)
    rows, n = [], 0
    for m in (store.iter_queue(topic, 0, 0) if topic else ()):
        row, n = _row(m, group, is_resent(record, group, m.queue_offset)), n + 1
        if json:
            out.emit_json(row)  # streamed: a large DLQ starts printing at once
        else:
            rows.append(row | {"bodyPreview": _preview(row.get("body"), 24),
                               "stored": format_local(m.store_timestamp, st.utc)})
    if rows:
        out.table(rows, [("queueOffset", "OFFSET"), ("msgId", "MSG-ID"), ("dlqOriginTopic", "ORIGIN-TOPIC"),
                         ("reconsumeTimes", "RECONSUMES"), ("stored", "STORED"), ("resent", "RESENT"),
                         ("bodyPreview", "BODY")])
    elif n == 0 and not json:
        out.info(f"no dead letters for group {group}")


# -- resending ---------------------------------------------------------------------------------

def _resend_draft(m: "Message", group: str):  # type: ignore[no-untyped-def]
    from store.log.record import (
        PROP_DLQ_ORIGIN_MESSAGE_ID,
        PROP_DLQ_ORIGIN_TOPIC,
        PROP_ORIGIN_MESSAGE_ID,
        PROP_RETRY_TOPIC,
        Draft,
    )
    from store.names import retry_topic
    props = {k: v for k, v in m.properties.items() if k not in (PROP_DLQ_ORIGIN_TOPIC, PROP_DLQ_ORIGIN_MESSAGE_ID)}
    origin = m.properties.get(PROP_RETRY_TOPIC) or m.properties.get(PROP_DLQ_ORIGIN_TOPIC)
    if origin:
        props[PROP_RETRY_TOPIC] = origin
    props.setdefault(PROP_ORIGIN_MESSAGE_ID, m.properties.get(PROP_DLQ_ORIGIN_MESSAGE_ID) or m.msg_id)
    return Draft(topic=retry_topic(group), body=m.body, properties=props, queue_id=0, flag=m.flag,
                 born_timestamp=m.born_timestamp, reconsume_times=0)


def _matches(m: "Message", msg_id: str) -> bool:
    wanted = msg_id.strip()
    return m.uniq_key == wanted or m.msg_id == wanted.upper()


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
    from store.client.members import live_members
    from store.errors import MessageNotFoundError
    from store.names import retry_topic
    store = state(ctx).store()
    topic = _dlq_topic(store, group)
    out = Output(json=json)
    if topic is None:
        if msg_id is not None:
            raise MessageNotFoundError(f"no message with id {msg_id!r}: group {group} has no dead letters")
        if not json:
            out.info(f"no dead letters for group {group}")
        return
    end = store.max_offset(topic, 0)
    record = load_record(store)
    start = 0 if (force or msg_id is not None) else min(resent_offsets(record, group)[0], end)
    off = max(start, store.min_offset(topic, 0))
    resent = skipped = matched = 0
    shown: list[dict[str, Any]] = []
    with out.progress(end - off, "resending") as bar:
        while off < end:
            nxt = min(end, off + CHUNK)
            chunk = list(store.iter_queue(topic, 0, off, nxt))
            if msg_id is not None:
                chunk = [m for m in chunk if _matches(m, msg_id)]
                matched += len(chunk)
            with store.write_lock():
                record = load_record(store)
                todo = [m for m in chunk if force or not is_resent(record, group, m.queue_offset)]
                skipped += len(chunk) - len(todo)
                results = store.put([_resend_draft(m, group) for m in todo]) if todo and not dry_run else []
                if not dry_run and (todo or msg_id is None):
                    mark_resent(record, group, [m.queue_offset for m in todo], nxt if msg_id is None else None)
                    save_record(store, record)
            for i, m in enumerate(todo):
                row = {"group": group, "msgId": m.uniq_key or m.msg_id, "dlqOffset": m.queue_offset,
                       "originTopic": _origin(m), "topic": retry_topic(group), "queueId": 0,
                       "queueOffset": results[i].queue_offset if results else None,
                       "offsetMsgId": results[i].msg_id if results else None, "resent": not dry_run}
                if json:
                    out.emit_json(row)
                else:
                    shown.append(row)
            resent += len(todo)
            bar.advance(nxt - off)
            off = nxt
    if msg_id is not None and matched == 0:
        raise MessageNotFoundError(f"no message with id {msg_id!r} in the dead letters of group {group}")
    if shown:
        out.table(shown, [("dlqOffset", "DLQ-OFFSET"), ("msgId", "MSG-ID"), ("originTopic", "ORIGIN-TOPIC"),
                          ("topic", "TO"), ("queueOffset", "OFFSET")])
    if resent == skipped == 0:
        out.info(f"no dead letters for group {group}" if end == store.min_offset(topic, 0) else
                 f"nothing to resend: every dead letter of group {group} was resent before (--force resends them)")
        return
    msg = f"{'would resend' if dry_run else 'resent'} {plural(resent, 'dead letter')} of group {group} to {retry_topic(group)}"
    if skipped:
        msg += f"; {skipped} resent before skipped (--force resends them)"
    out.info(msg)
    if resent and not dry_run:
        members = live_members(store.layout, group)
        if members and all(m.record.get("orderly") for m in members):
            out.warn(f"the live members of {group} are orderly and do not read {retry_topic(group)}: "
                     f"run a concurrent consumer of the group to process the resent messages")
