"""``mqctl progress``: a consumer group's lag per queue (``Admin.lag``; its table's columns in
``mqctl/offsetsview.py``)."""
from __future__ import annotations

import typer

from mqctl.options import GroupOpt, JsonOpt, TopicFilterOpt, state


def register(app: typer.Typer) -> None:
    app.command("progress", help=PROGRESS_HELP)(progress)


PROGRESS_HELP = """Lag per queue of a consumer group.

mqadmin consumerProgress, Kafka's --describe. brokerOffset is the queue's max offset,
consumerOffset the group's committed offset, lag the messages still to consume (a queue with
no committed offset counts every stored message), lastTimestamp the store time of the last
consumed message. Rows of the group's %RETRY% topic are included unless --topic names
another topic. OWNER is the live member holding the queue (its lock) now. Times are local (--utc: UTC).

scheduled counts the messages waiting out a delay before they come to the queue, not yet in
its lag: on the %RETRY% row, the group's failed messages waiting for their retry (RocketMQ's
delay levels: 10s, 30s, 1m, ...). The column is shown when one is waiting; --json always
has the field.

Examples:
  mqctl progress -g billing
  mqctl progress -g billing --json | jq -s 'map(.lag) | add'"""


def progress(ctx: typer.Context, group: GroupOpt, topic: TopicFilterOpt = None, json: JsonOpt = False) -> None:
    from mqctl.offsetsview import CLIENT_STATE, PROGRESS_COLUMNS, SCHEDULED, in_topic
    from mqctl.output import Output, plural
    from store import format_local, topic_kind
    st = state(ctx)
    admin = st.admin()
    rows = [r.to_json() for r in admin.lag(group, topic)]
    for row in rows if not json else ():
        last = row["lastTimestamp"]
        row["lastConsumed"] = format_local(last, st.utc) if last is not None else None
    out = Output(json=json)
    if not rows:
        if not json:
            out.info(f"no committed offsets or subscriptions for group {group}{in_topic(topic)}")
        return
    scheduled = sum(r["scheduled"] for r in rows)
    columns = PROGRESS_COLUMNS[:-1] + ([SCHEDULED] if scheduled else []) + PROGRESS_COLUMNS[-1:]
    out.table(rows, columns + ([CLIENT_STATE] if any(r.get("clientId") for r in rows) else []))
    if not json:
        members = admin.consumers(group)
        live = sum(m.state == "live" for m in members)
        # one notion of live (the rebalance's): a stopped or hung member holds nothing
        expired = f" ({len(members) - live} more expired: stopped or hung)" if len(members) > live else ""
        retrying = sum(r["scheduled"] for r in rows if topic_kind(r["topic"]) == "retry")
        waiting = f", {plural(retrying, 'failed message')} waiting for a retry" if retrying else ""
        delayed = scheduled - retrying
        waiting += f", {plural(delayed, 'delayed message')} not due yet" if delayed else ""
        out.info(f"group {group}: {plural(live, 'live member')}{expired}, total lag {sum(r['lag'] for r in rows)}"
                 f"{waiting}")
