"""How ``mqctl offsets`` and ``mqctl progress`` show a group's offsets: the columns of their
tables, and what ``offsets reset`` says about its plan (clamped targets, live members, the
summary of what moved)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mqctl.output import Output, plural

if TYPE_CHECKING:
    from store import ResetPlan

SHOW_COLUMNS = [("topic", "TOPIC"), ("queueId", "QUEUE"), ("offset", "OFFSET")]
CLIENT_STATE = ("clientState", "CLIENT")
CLIENT_COLUMNS = [("clientId", "CLIENT-ID"), CLIENT_STATE]
PROGRESS_COLUMNS = [("topic", "TOPIC"), ("queueId", "QUEUE"), ("brokerOffset", "BROKER-OFFSET"),
                    ("consumerOffset", "CONSUMER-OFFSET"), ("lag", "LAG"), ("lastConsumed", "LAST-CONSUMED"),
                    ("owner", "OWNER")]
SCHEDULED = ("scheduled", "SCHEDULED")   # shown when a message waits in the schedule topic
RESET_COLUMNS = [("topic", "TOPIC"), ("queueId", "QUEUE"), ("currentOffset", "CURRENT-OFFSET"),
                 ("newOffset", "NEW-OFFSET"), ("clamped", "CLAMPED")]


def in_topic(topic: str | None) -> str:
    return f" in topic {topic}" if topic else ""


def show_offsets(out: Output, rows: list[dict[str, Any]], group: str, topic: str | None) -> None:
    """``offsets show``: the table (broadcast clients' columns when there are any)."""
    cols = SHOW_COLUMNS + (CLIENT_COLUMNS if any(r["clientId"] for r in rows) else [])
    if rows:
        out.table(rows, cols)
    elif not out.json:
        out.info(f"no committed offsets for group {group}{in_topic(topic)}")


def reset_notes(out: Output, plan: ResetPlan, to_offset: int | None, when: str | None) -> None:
    """Where the target was clamped to a queue's stored range (``when``: a time target, shown)."""
    def note(queues: list[int], what: str, to: str = "the earliest offset") -> None:
        if queues:
            out.info(f"mqctl: note: {what} {plan.topic} {'queue' if len(queues) == 1 else 'queues'} "
                     f"{','.join(map(str, queues))}: clamped to {to}")
    if when is not None:
        note(plan.early, f"{when} is before the earliest stored message of")
    if to_offset is not None:
        note(sorted({r.queue_id for r in plan.rows if r.clamped == "end"}), f"offset {to_offset} is past the end of",
             "the end")
        note(sorted({r.queue_id for r in plan.rows if r.clamped == "earliest"}),
             f"offset {to_offset} is no longer stored in")


def show_reset(out: Output, plan: ResetPlan, execute: bool) -> None:
    """The plan's table, then what a dry run would need, or what the reset did."""
    group, topic = plan.group, plan.topic
    cols = list(RESET_COLUMNS)
    if plan.broadcast:
        cols.insert(2, ("clientId", "CLIENT-ID"))
    out.table([r.to_json(group, execute) for r in plan.rows], cols)
    if not execute:
        if plan.busy:
            out.warn(f"live members of group {group} hold queues of {topic} ({plan.owners}): --execute "
                     f"will also need --force")
        out.info("dry run: nothing changed; add --execute to apply this plan")
        return
    clients = len({r.client_id for r in plan.rows if r.client_id})
    out.info(f"reset {plural(len({r.queue_id for r in plan.rows}), 'queue')} of {topic} for group {group}"
             + (f" and {plural(clients, 'broadcast client')} ({plan.moved} of {len(plan)} offsets moved)"
                if clients else f" ({plan.moved} moved)"))
    if plan.busy:
        out.warn(f"reset under live members ({plan.owners}): they take the new offsets at their next "
                 f"commit; an idle member keeps its position until new messages arrive")
        if plan.broadcast:
            out.warn("running broadcast clients do not learn of a reset and will write their own "
                     "offsets back: restart them")
