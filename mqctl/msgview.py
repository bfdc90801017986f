"""How ``mqctl msg`` shows messages: ``msg show``'s fields, what a copy is (a retry, a dead
letter, ...) and its history as lines of text; ``msg query``'s table rows."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from store import StoredMessage as Message

BODY_SHOWN = 2000   # characters of a body msg show prints; --json has it whole
QUERY_COLUMNS = [("msgId", "MSG-ID"), ("queueId", "QUEUE"), ("queueOffset", "OFFSET"), ("time", "STORED"),
                 ("tags", "TAGS"), ("keys", "KEYS"), ("properties", "PROPERTIES"), ("past", "GROUPS-PAST"),
                 ("body", "BODY")]


def describe(m: Message, obj: dict[str, Any], when: Callable[[int], str]) -> list[str]:
    """``msg show``'s lines: what the copy is, its fields and history (``obj``: its JSON report)."""
    from mqctl.output import human_size
    body = obj["body"] if obj.get("bodyEncoding") != "base64" else BINARY_BODY
    if len(body) > BODY_SHOWN:
        body = body[:BODY_SHOWN] + f"… ({human_size(len(m.body))} in all; --json has it whole)"
    fields = [("Topic", m.topic), ("Queue", m.queue_id), ("Queue offset", m.queue_offset),
              ("Message id", obj["msgId"]), ("Offset id", m.msg_id), ("Keys", ",".join(m.keys) or "-"),
              ("Tags", m.tags or "-"), ("Properties", props_text(m.user_properties)),
              ("Born", f"{when(m.born_timestamp)} at {m.born_host}"), ("Stored", when(m.store_timestamp)),
              ("Reconsumes", m.reconsume_times), ("Commit-log offset", m.commitlog_offset),
              ("Size", human_size(len(m.body)))]
    if "transaction" in obj:
        tx = obj["transaction"]
        fields.append(("Transaction", f"{tx['txId']} ({tx['state'].lower().replace('_', ' ')})"))
    fields.append(("Body", body.replace("\n", "\n" + " " * 19)))
    note = lineage(m, when)
    lines = [note] if note else []
    if obj.get("deleted"):
        lines.append(f"deleted with topic {m.topic} (its record stays in the log until retention; "
                     f"no queue holds it)")
    lines += [f"{(k + ':').ljust(18)} {v}" for k, v in fields]
    lines += ["", "History:"]
    for e in obj["history"]:   # (the --json history: one source, every event either shows)
        lines.append(f"  {(when(e['time']) if e['time'] is not None else '').ljust(len(when(0)))}  "
                     f"{event_text(e, when)}".rstrip())
    return lines


def query_row(m: Message, obj: dict[str, Any], stored: str) -> dict[str, Any]:
    """A ``msg query`` table row (``obj``: the message's report, as msg show's; ``stored``:
    the store time, shown): the groups whose committed offsets are past it stand for its
    history, which ``msg show`` tells in full."""
    past = [c["group"] for c in obj.get("consumerGroups", ()) if c.get("consumed")]
    return {"msgId": m.uniq_key or m.msg_id, "queueId": m.queue_id, "queueOffset": m.queue_offset,
            "time": stored, "tags": m.tags, "keys": m.keys, "properties": props_text(m.user_properties),
            "past": ",".join(past) or "-", "body": preview(m.body)}


def props_text(props: dict[str, str]) -> str:
    return " ".join(f"{k}={v}" for k, v in props.items()) or "-"


def lineage(m: Message, when: Callable[[int], str]) -> str | None:
    """What a copy is, when it is not the message as sent: a retry, a dead letter, ..."""
    from mqctl.output import plural
    from store import Prop, topic_kind
    p = m.properties
    origin = p.get(Prop.ORIGIN_MESSAGE_ID) or p.get(Prop.DLQ_ORIGIN_MESSAGE_ID) or m.uniq_key or m.msg_id
    src = p.get(Prop.RETRY_TOPIC) or m.topic
    n = m.reconsume_times
    kind = topic_kind(m.topic)
    if kind == "retry":
        return (f"retry {n} of message {origin} from topic {src}" if n else
                f"message {origin} from topic {src}, resent from the dead-letter queue")
    if kind == "dlq":
        return f"dead letter of message {origin} from topic {src} (reconsumed {plural(n, 'time')})"
    if kind == "schedule":
        due = p.get(Prop.DELIVER_MS, "")
        due_text = f", due {when(int(due))}" if due.isdigit() else ""
        real = p.get(Prop.REAL_TOPIC, "?")
        if topic_kind(real) == "retry":
            return f"retry {n} of message {origin} from topic {src}, waiting for {real}{due_text}"
        return f"delayed message for topic {real}{due_text}"
    if kind == "half":
        return f"half message of a transaction for topic {p.get(Prop.REAL_TOPIC, '?')}"
    return None


def event_text(e: dict[str, Any], when: Callable[[int], str]) -> str:
    """One line of the timeline (the events of :func:`store.message_timeline`)."""
    from mqctl.output import plural
    where = f"{e.get('topic')} queue {e.get('queueId')} offset {e.get('queueOffset')}"
    kind, n = e["event"], e.get("reconsumeTimes", 0)
    if kind == "consumed":
        who = f"group {e['group']}" + (f" (client {e['clientId']})" if e.get("clientId") else "")
        # the store keeps a group's offset, not what it handled: a group that started from
        # "last" has its offset past messages it never saw
        return (f"{who} is past it (committed offset {e['offset']})" if e["consumed"]
                else f"{who} has not reached it (committed offset {e['offset']})")
    if kind == "scheduled":
        due = f", due {when(e['deliverAt'])}" if e.get("deliverAt") is not None else ""
        what = f"retry {n}" if n else "delivery"
        return f"{what} scheduled for {e['realTopic']}{due}"
    text = {"sent": f"sent to {where}", "delivered": f"delivered to {where} (delay over)",
            "committed": f"committed to {where}", "retry": f"retry {n} sent to {where}",
            "resent": f"resent from the dead-letter queue to {where}",
            "dead-lettered": f"dead-lettered to {e.get('topic')} offset {e.get('queueOffset')} "
                             f"(reconsumed {plural(n, 'time')})",
            "half": f"transaction half message stored for {e.get('realTopic')}"
                    + (f" (check {e['checkTimes']})" if e.get("checkTimes") else ""),
            "discarded": f"transaction given up after {plural(e.get('checkTimes', 0), 'check')}: "
                         f"parked in {e.get('topic')}",
            "commit": "transaction committed", "rollback": "transaction rolled back",
            "discard": "transaction discarded"}.get(kind, f"copy in {where}")
    if e.get("deleted"):
        text += ", deleted with its topic"
    return text + ("  (this copy)" if e.get("this") else "")


BINARY_BODY = "(binary; --json has it in base64)"


def preview(body: bytes, width: int = 32) -> str:
    """A body in a table (``msg query``, ``dlq list``): its text escaped
    (:func:`mqctl.output.printable`) and cut at ``width``, or :data:`BINARY_BODY` when it is
    not UTF-8 (as ``msg show`` says)."""
    from mqctl.output import printable
    try:
        text = printable(body.decode("utf-8"))
    except UnicodeDecodeError:
        return BINARY_BODY
    return text if len(text) <= width else text[: width - 1] + "…"
