"""``mqctl msg show|query``: messages by id (offset id or unique key) and by business key (how
a message and its history read: ``mqctl/msgview.py``)."""
from __future__ import annotations

import sys
from typing import Annotated, Optional

import typer

from mqctl.options import JsonOpt, TopicRequiredOpt, state

msg_app = typer.Typer(help="Look messages up by id or key.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(msg_app, name="msg")


@msg_app.command("show", help="""One message by offset id or unique key, with its history.

The history is a timeline, oldest first: where the message was sent, delayed, retried,
dead-lettered or resent, and which groups' committed offsets are past it (the store keeps
each group's offset, not what or when it consumed). Times are local; --utc prints UTC. --json has every field raw.

Examples:
  mqctl msg show 0BBFD16A3BCF76A68335686AF0BC1DDB
  mqctl msg show 7F00000100002A9F0000000000000000 --utc
  mqctl msg show 0BBFD16A3BCF76A68335686AF0BC1DDB --json | jq .history
  mqctl msg show -m 0BBFD16A3BCF76A68335686AF0BC1DDB""")
def show(
    ctx: typer.Context,
    msg_id: Annotated[Optional[str], typer.Argument(
        metavar="[MSGID]", show_default=False, help="Offset id or unique key (32 hex digits).")] = None,
    msg_id_opt: Annotated[Optional[str], typer.Option(
        "--msg-id", "-m", metavar="MSGID", help="The message id, as a flag (as in dlq resend).")] = None,
    json: JsonOpt = False,
) -> None:
    from store.errors import UsageError
    if (msg_id is None) == (msg_id_opt is None):
        raise UsageError("give the message id once: mqctl msg show MSGID (or -m MSGID)")
    msg_id = msg_id if msg_id is not None else msg_id_opt
    assert msg_id is not None
    from mqctl.msgview import describe
    from mqctl.output import Output
    from store import format_local, message_report
    st = state(ctx)
    store = st.store()
    m = store.find(msg_id, strict=True)
    obj = message_report(store, m)
    if json:
        Output(json=True).emit_json(obj)
        return
    sys.stdout.write("\n".join(describe(m, obj, lambda ms: format_local(ms, st.utc))) + "\n")
    sys.stdout.flush()


@msg_app.command("query", help="""Messages of a topic with a business key, newest first.

Found through the key index (keys given with send --keys). Times are local; --utc prints UTC.
--json has msg show's fields for each (history, consumerGroups); the table shows the groups
past each message. At most --limit (64) are shown; when more match, a note on stderr says so.

Examples:
  mqctl msg query --topic orders --key order-1001
  mqctl msg query --topic orders --key order-1001 --json | jq -r .msgId""")
def query(
    ctx: typer.Context,
    topic: TopicRequiredOpt,
    key: Annotated[str, typer.Option("--key", "-k", metavar="KEY", help="Business key (as given with send --keys).")],
    limit: Annotated[int, typer.Option("--limit", metavar="N", min=1, help="At most N messages.")] = 64,
    json: JsonOpt = False,
) -> None:
    from mqctl.errors import warn
    from mqctl.msgview import QUERY_COLUMNS, query_row
    from mqctl.output import Output
    from store import format_local, message_report, validate_any_topic
    from store.errors import CorruptionError
    validate_any_topic(topic)
    key = _check_key(key)
    st = state(ctx)
    store = st.store()
    store.topic(topic)
    # (one more: do more match?) A damaged match is named and fails the command (exit 5),
    # after the intact ones are shown: a partial answer is still one.
    damaged: list[CorruptionError] = []
    found = store.query_key(topic, key, limit + 1, damaged=damaged)
    out = Output(json=json)
    if not found and not damaged and not json:
        out.info(f"no messages with key {key} in topic {topic}")
    if len(found) > limit:
        found = found[:limit]
        # on stderr, never stdout (scripts parse it), and exit 0: the newest ones are here
        out.info(f"mqctl: {limit} shown, more match: --limit N shows up to N")
    # each message as msg show has it: its envelope and what the store knows of its history
    reports = [(m, message_report(store, m)) for m in found]
    if json:
        for _m, obj in reports:
            out.emit_json(obj)
    elif reports:
        out.table([query_row(m, obj, format_local(m.store_timestamp, st.utc)) for m, obj in reports], QUERY_COLUMNS)
    for exc in damaged[1:]:
        warn(str(exc))
    if damaged:
        raise damaged[0]   # (the last line, by the CLI's error boundary: exit 5)


def _check_key(key: str) -> str:
    """The key as send --keys stores it (blanks around it dropped). One no message can have
    (empty, or holding a space: keys are stored space separated) is a bad value (exit 2), as
    send --keys refuses it, not a key nobody sent."""
    from mqctl.argnames import ARG_FLAGS
    from store import build_properties
    from store.errors import UsageError
    if not key.strip():
        raise UsageError("--key may not be empty")
    build_properties(keys=[key], arg_names={**ARG_FLAGS, "keys": "--key", "key": "--key",
                                             "key_with_spaces": "--key: a key may not contain spaces"})
    return key.strip()
