"""``mqctl init`` and ``mqctl topic create|list|status|delete``."""
from __future__ import annotations

import sys
from typing import Annotated

import typer

from mqctl.options import JsonOpt, state

topic_app = typer.Typer(help="Create, list, inspect and delete topics.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.command("init", help="Create the store at the selected path (idempotent).")(init)
    app.add_typer(topic_app, name="topic")


def init(
    ctx: typer.Context,
    no_auto_create: Annotated[bool, typer.Option(
        "--no-auto-create", help="Refuse sends to topics that were not created first.")] = False,
    max_message_size: Annotated[int, typer.Option(
        "--max-message-size", min=1, help="Largest body in bytes (default 4 MiB).")] = 4 * 1024 * 1024,
    segment_size: Annotated[int, typer.Option(
        "--segment-size", min=64 * 1024, help="Commit-log segment size in bytes (default 64 MiB).")] = 64 * 1024 * 1024,
) -> None:
    from store.errors import UsageError
    from store.log.broker import Store, StoreSettings
    st = state(ctx)
    if max_message_size + 65536 + 8 > segment_size:
        raise UsageError("--segment-size must exceed --max-message-size by at least 64 KiB")
    existed = st.store_path.joinpath("store.json").exists()
    store = Store.open(st.store_path, create=True, settings=StoreSettings(
        max_message_size=max_message_size, auto_create_topics=not no_auto_create,
        commitlog_segment_size=segment_size))
    store.close()
    sys.stderr.write(f"{'store already exists at' if existed else 'initialised store at'} {st.store_path}\n")


@topic_app.command("create", help="Create a topic (exit 4 if it exists with another queue count).")
def create(
    ctx: typer.Context,
    topic: Annotated[str, typer.Argument(help="Topic name: 1-127 of A-Z a-z 0-9 _ % | -")],
    queues: Annotated[int, typer.Option("--queues", "-n", help="Number of queues.")] = 8,
    order: Annotated[bool, typer.Option(
        "--order", help="Ordered topic: senders must give a sharding key or a queue.")] = False,
    json: JsonOpt = False,
) -> None:
    from mqctl.output import Output
    from store.names import validate_topic
    validate_topic(topic)
    cfg, created = state(ctx).store(create=True).create_topic(topic, queues, order)
    out = Output(json=json)
    if json:
        out.emit_json({"topic": cfg.name, "queues": cfg.queues, "order": cfg.order, "created": created})
    else:
        out.info(f"{'created' if created else 'exists:'} topic {cfg.name} with {cfg.queues} queues"
                 f"{' (ordered)' if cfg.order else ''}")


@topic_app.command("list", help="List topics with their queue and message counts.")
def list_(
    ctx: typer.Context,
    all_: Annotated[bool, typer.Option("--all", "-a", help="Include system topics (%RETRY%, %DLQ%, RMQ_SYS_…).")] = False,
    json: JsonOpt = False,
) -> None:
    from mqctl.output import Output
    from store.client.admin import Admin
    rows = [{"topic": t.topic, "queues": t.queues, "order": t.order, "messages": t.messages}
            for t in Admin.of(state(ctx).store()).topics(system=all_)]
    Output(json=json).table(rows, [("topic", "TOPIC"), ("queues", "QUEUES"), ("order", "ORDER"),
                                   ("messages", "MESSAGES")])


@topic_app.command("status", help="Per queue: min and max offsets and the last store time.")
def status(
    ctx: typer.Context,
    topic: Annotated[str, typer.Argument(help="Topic name.")],
    json: JsonOpt = False,
) -> None:
    from mqctl.output import Output
    from store.names import validate_any_topic
    from store.timeparse import format_time
    validate_any_topic(topic)
    store = state(ctx).store()
    cfg = store.topic(topic)
    rows = []
    for q in range(cfg.queues):
        last = store.last_store_timestamp(topic, q)
        rows.append({"topic": topic, "queueId": q, "minOffset": store.min_offset(topic, q),
                     "maxOffset": store.max_offset(topic, q), "lastStoreTimestamp": last,
                     "lastStoreTime": format_time(last) if last else None})
    Output(json=json).table(rows, [("queueId", "QUEUE"), ("minOffset", "MIN-OFFSET"),
                                   ("maxOffset", "MAX-OFFSET"), ("lastStoreTime", "LAST-STORED")])


@topic_app.command("delete", help="Delete a topic, its consume queues and its group offsets.")
def delete(
    ctx: typer.Context,
    topic: Annotated[str, typer.Argument(help="Topic name.")],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
) -> None:
    from store.errors import UsageError
    from store.names import validate_topic
    validate_topic(topic)
    store = state(ctx).store()
    store.topic(topic)
    if not yes:
        if not (sys.stdin.isatty() and sys.stderr.isatty()):
            raise UsageError(f"deleting topic {topic!r} needs --yes when not run from a terminal")
        if not typer.confirm(f"Delete topic {topic} and its consumer offsets?", err=True):
            raise typer.Exit(1)
    store.delete_topic(topic)
    sys.stderr.write(f"deleted topic {topic}\n")
