"""``mqctl init`` and ``mqctl topic create|list|status|delete``."""
from __future__ import annotations

import sys
from typing import Annotated

import typer

from mqctl.options import JsonOpt, TopicArg, state
from store.log.settings import LARGEST_MESSAGE_SIZE, MAX_SEGMENT_SIZE

topic_app = typer.Typer(help="Create, list, inspect and delete topics.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.command("init", help=INIT_HELP)(init)
    app.add_typer(topic_app, name="topic")


INIT_HELP = """Create the store at the selected path (idempotent).

The settings are fixed when the store is created; on an existing store they are ignored
(a warning says which differ).

Examples:
  mqctl init
  mqctl --store ./mq init --no-auto-create
  mqctl init --max-message-size 1048576 --segment-size 8388608"""


def init(
    ctx: typer.Context,
    no_auto_create: Annotated[bool, typer.Option(
        "--no-auto-create", help="Refuse sends to topics that were not created first.")] = False,
    max_message_size: Annotated[int, typer.Option(
        "--max-message-size", metavar="BYTES", min=1, max=LARGEST_MESSAGE_SIZE,
        help="Largest body in bytes (default and most: 4 MiB).")] = LARGEST_MESSAGE_SIZE,
    segment_size: Annotated[int, typer.Option(
        "--segment-size", metavar="BYTES", max=MAX_SEGMENT_SIZE,
        help="Commit-log segment size in bytes (default 64 MiB); at least --max-message-size "
             "+ 64 KiB (4259840 with the default 4 MiB).")] = 64 * 1024 * 1024,
) -> None:
    from mqctl.output import Output, human_size
    from store.log.broker import Store, StoreSettings
    st = state(ctx)
    existed = st.store_path.joinpath("store.json").exists()
    settings = StoreSettings(max_message_size=max_message_size, auto_create_topics=not no_auto_create,
                             commitlog_segment_size=segment_size)
    if not existed:
        settings.validate()
    store = Store.open(st.store_path, create=True, settings=settings)
    s = store.settings
    store.close()
    out = Output()
    if not existed:
        out.info(f"initialised store at {st.store_path} (messages up to {human_size(s.max_message_size)}, "
                 f"{human_size(s.commitlog_segment_size)} segments"
                 f"{', topics created on first send' if s.auto_create_topics else ', topics made by topic create'})")
        return
    out.info(f"store already exists at {st.store_path}")
    differ = [flag for flag, given, kept in (
        ("--max-message-size", max_message_size, s.max_message_size),
        ("--segment-size", segment_size, s.commitlog_segment_size),
        ("--no-auto-create", no_auto_create, not s.auto_create_topics)) if given != kept]
    if differ:
        out.warn(f"{', '.join(differ)} ignored: an existing store keeps the settings it was created with")


@topic_app.command("create", help="""Create a topic (exit 4 if it exists with another shape).

Creating a topic that exists with the same queue count and ordering does nothing (exit 0).

Examples:
  mqctl topic create orders
  mqctl topic create ledger --queues 4 --order""")
def create(
    ctx: typer.Context,
    topic: Annotated[str, typer.Argument(metavar="TOPIC", help="Topic name: 1-127 of A-Z a-z 0-9 _ % | -",
                                         show_default=False)],
    queues: Annotated[int, typer.Option("--queues", metavar="N", min=1, max=1024, help="Number of queues.")] = 8,
    order: Annotated[bool, typer.Option(
        "--order", help="Ordered topic: senders must give a sharding key or a queue.")] = False,
    json: JsonOpt = False,
) -> None:
    from mqctl.output import Output, plural
    from store.names import validate_topic
    validate_topic(topic)
    cfg, created = state(ctx).store(create=True).create_topic(topic, queues, order)
    out = Output(json=json)
    if json:
        out.emit_json({"topic": cfg.name, "queues": cfg.queues, "order": cfg.order, "created": created})
    else:
        shape = plural(cfg.queues, "queue") + (", ordered" if cfg.order else "")
        out.info(f"created topic {cfg.name} ({shape})" if created else f"topic {cfg.name} exists ({shape})")


@topic_app.command("list", help="""List topics with their queue and message counts.

Examples:
  mqctl topic list
  mqctl topic list --all --json | jq -r .topic""")
def list_(
    ctx: typer.Context,
    all_: Annotated[bool, typer.Option("--all", "-a", help="Include system topics (%RETRY%, %DLQ%, RMQ_SYS_…).")] = False,
    json: JsonOpt = False,
) -> None:
    from mqctl.output import Output
    from store.client.admin import Admin
    rows = [{"topic": t.topic, "queues": t.queues, "order": t.order, "messages": t.messages}
            for t in Admin.of(state(ctx).store()).topics(system=all_)]
    out = Output(json=json)
    if rows:
        out.table(rows, [("topic", "TOPIC"), ("queues", "QUEUES"), ("order", "ORDER"), ("messages", "MESSAGES")])
    elif not json:
        out.info("no topics" + ("" if all_ else " (--all shows system topics)"))


@topic_app.command("status", help="""Per queue: offsets, message count, last store time.

Times are local; --utc prints UTC. JSON has lastStoreTimestamp in ms since the epoch.

Examples:
  mqctl topic status orders
  mqctl topic status orders --json | jq -s 'map(.messages) | add'""")
def status(ctx: typer.Context, topic: TopicArg, json: JsonOpt = False) -> None:
    from mqctl.output import Output
    from store.names import validate_any_topic
    from store.timeparse import format_local, format_time
    validate_any_topic(topic)
    st = state(ctx)
    store = st.store()
    cfg = store.topic(topic)
    rows = []
    for q in range(cfg.queues):
        last = store.last_store_timestamp(topic, q)
        lo, hi = store.min_offset(topic, q), store.max_offset(topic, q)
        rows.append({"topic": topic, "queueId": q, "minOffset": lo, "maxOffset": hi, "lastStoreTimestamp": last,
                     "lastStoreTime": format_time(last) if last else None, "messages": hi - lo})
        if not json:
            rows[-1]["lastStored"] = format_local(last, st.utc) if last else None
    Output(json=json).table(rows, [("queueId", "QUEUE"), ("minOffset", "MIN-OFFSET"), ("maxOffset", "MAX-OFFSET"),
                                   ("messages", "MESSAGES"), ("lastStored", "LAST-STORED")])


@topic_app.command("delete", help="""Delete a topic, its consume queues and group offsets.

Its records stay in the commit log until retention removes their segment. Asks on a
terminal; elsewhere --yes is required.

Examples:
  mqctl topic delete orders-old --yes""")
def delete(
    ctx: typer.Context,
    topic: TopicArg,
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
