"""``mqctl topic create|list|status|update|delete`` (``mqctl init``, creating the store, is
``mqctl/commands/init.py``)."""
from __future__ import annotations

import sys
from typing import Annotated

import typer

import store
from mqctl.options import JsonOpt, TopicArg, YesOpt, state

topic_app = typer.Typer(help="Create, list, inspect, grow and delete topics.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(topic_app, name="topic")


@topic_app.command("create", help="""Create a topic (exit 4 if it exists with another shape).

Creating a topic that exists with the same queue count and ordering does nothing (exit 0).

Examples:
  mqctl topic create orders
  mqctl topic create ledger --queues 4 --order""")
def create(
    ctx: typer.Context,
    topic: Annotated[str, typer.Argument(metavar="TOPIC", help="Topic name: 1-127 of A-Z a-z 0-9 _ % | -",
                                         show_default=False)],
    queues: Annotated[int, typer.Option("--queues", metavar="N", min=1, max=store.MAX_QUEUES, help="Number of queues.")] = 8,
    order: Annotated[bool, typer.Option(
        "--order", help="Ordered topic: senders must give a sharding key or a queue.")] = False,
    json: JsonOpt = False,
) -> None:
    from mqctl.output import Output, plural
    from store import validate_topic
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
    rows = [{"topic": t.topic, "queues": t.queues, "order": t.order, "messages": t.messages}
            for t in state(ctx).admin().topics(system=all_)]
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
    from store import format_local
    st = state(ctx)
    rows = [q.to_json() for q in st.admin().topic_status(topic)]
    for r in rows if not json else ():
        last = r["lastStoreTimestamp"]
        r["lastStored"] = format_local(last, st.utc) if last else None
    Output(json=json).table(rows, [("queueId", "QUEUE"), ("minOffset", "MIN-OFFSET"), ("maxOffset", "MAX-OFFSET"),
                                   ("messages", "MESSAGES"), ("lastStored", "LAST-STORED")])


@topic_app.command("update", help="""Add queues to a topic (N larger than today; the same N does nothing).

Consumers pick the new queues up at once. Sharding keys route by the new count from then
on: a key's messages before and after the change may sit in different queues, so per-key
order holds across the change only once consumers have drained the old queues. Queues
cannot be removed (exit 2): their messages would become unreachable.

Examples:
  mqctl topic update orders --queues 16""")
def update(
    ctx: typer.Context,
    topic: TopicArg,
    queues: Annotated[int, typer.Option("--queues", metavar="N", min=1, max=store.MAX_QUEUES,
                                        help="The new number of queues (at least today's).")],
    json: JsonOpt = False,
) -> None:
    from mqctl.output import Output, plural
    from store import validate_topic
    validate_topic(topic)   # (the system's topics: refused as by create and delete, before a lookup)
    admin = state(ctx).admin()
    before = admin.topic_status(topic)
    info = admin.update_topic(topic, queues)
    out = Output(json=json)
    changed = info.queues != len(before)
    if json:
        out.emit_json({"topic": info.topic, "queues": info.queues, "order": info.order, "updated": changed})
    else:
        out.info(f"topic {info.topic} now has {plural(info.queues, 'queue')} (was {len(before)})" if changed
                 else f"topic {info.topic} has {plural(info.queues, 'queue')} already")


@topic_app.command("delete", help="""Delete a topic, its consume queues and group offsets.

Its records stay in the commit log until retention removes their segment. Asks on a
terminal; elsewhere --yes is required.

Examples:
  mqctl topic delete orders-old --yes""")
def delete(
    ctx: typer.Context,
    topic: TopicArg,
    yes: YesOpt = False,
) -> None:
    from store import validate_topic
    validate_topic(topic)
    store = state(ctx).store()
    store.topic(topic)
    if not yes:
        from mqctl.confirm import confirm
        confirm(f"Delete topic {topic} and its consumer offsets?", f"deleting topic {topic!r}",
                f"topic {topic} is kept")
    store.delete_topic(topic)
    sys.stderr.write(f"deleted topic {topic}\n")
