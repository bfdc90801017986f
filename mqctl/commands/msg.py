"""``mqctl msg show|query``: messages by id (offset id or unique key) and by business key."""
from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from mqctl.options import JsonOpt, state

msg_app = typer.Typer(help="Look messages up by id or key.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(msg_app, name="msg")


def _print_detail(obj: dict[str, Any]) -> None:
    """mqadmin's queryMsgById block: one ``Field: value`` per line."""
    width = max(len(k) for k in obj) + 1
    lines = []
    for k, v in obj.items():
        if isinstance(v, (dict, list)):
            import json
            v = json.dumps(v, ensure_ascii=False)
        lines.append(f"{(k + ':').ljust(width)} {'-' if v is None else v}\n")
    sys.stdout.write("".join(lines))
    sys.stdout.flush()


@msg_app.command("show", help="One message by offset id or unique key, with its history.")
def show(
    ctx: typer.Context,
    msg_id: Annotated[str, typer.Argument(metavar="MSGID", help="Offset id or unique key (32 hex digits).")],
    json: JsonOpt = False,
) -> None:
    from mqctl.output import Output
    from store.client.history import message_report
    store = state(ctx).store()
    m = store.find(msg_id)
    obj = message_report(store, m)
    if json:
        Output(json=True).emit_json(obj)
    else:
        _print_detail(obj)


@msg_app.command("query", help="Messages of a topic carrying a business key (newest first), via the key index.")
def query(
    ctx: typer.Context,
    topic: Annotated[str, typer.Option("--topic", "-t", help="Topic.")],
    key: Annotated[str, typer.Option("--key", "-k", help="Business key (as given with send --keys).")],
    limit: Annotated[int, typer.Option("--limit", "-m", min=1, help="At most this many (mqadmin's -m).")] = 64,
    json: JsonOpt = False,
) -> None:
    from mqctl.output import Output
    from store.client.envelope import envelope
    from store.names import validate_any_topic
    from store.timeparse import format_time
    validate_any_topic(topic)
    store = state(ctx).store()
    store.topic(topic)
    found = store.query_key(topic, key, limit)
    out = Output(json=json)
    if json:
        for m in found:
            out.emit_json(envelope(m))
    else:
        out.table([{"msgId": m.uniq_key or m.msg_id, "queueId": m.queue_id, "queueOffset": m.queue_offset,
                    "time": format_time(m.store_timestamp)} for m in found],
                  [("msgId", "MSG-ID"), ("queueId", "QUEUE"), ("queueOffset", "OFFSET"), ("time", "STORED")])
