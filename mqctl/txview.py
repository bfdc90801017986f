"""How ``mqctl tx`` shows transactions: the rows of ``tx list``, the line of ``tx commit`` /
``rollback``, and the check service's events and pass summaries (``tx check``)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mqctl.output import Output, plural

if TYPE_CHECKING:
    from store import PendingTransaction, TransactionCheckEvent, TransactionCheckReport, TransactionEnd

STATE_WORDS = {"COMMITTED": "committed", "ROLLED_BACK": "rolled back", "PREPARED": "left unknown",
               "DISCARDED": "discarded"}
LIST_COLUMNS = [("txId", "TX-ID"), ("topic", "TOPIC"), ("queueId", "QUEUE"), ("born", "BORN"),
                ("age", "AGE"), ("checkTimes", "CHECKS")]


def show_pending(out: Output, txs: list[PendingTransaction], now: int, utc: bool, parked: bool = False) -> None:
    """``tx list``: NDJSON rows, or a table with local times and ages (a note when empty);
    ``parked``: the parked transactions (``--parked``), with when each was parked."""
    from store import format_age, format_local, format_time
    rows: list[dict[str, Any]] = [
        {"txId": p.tx_id, "topic": p.topic, "msgId": p.tx_id, "queueId": p.queue_id,
         "bornTimestamp": p.half.born_timestamp, "bornTime": format_time(p.half.born_timestamp),
         "checkTimes": p.check_times, "offsetMsgId": p.half.msg_id,
         **({"state": "DISCARDED", "parkedTimestamp": p.parked_at} if parked else {})} for p in txs]
    if out.json:
        for r in rows:
            out.emit_json(r)
    elif not rows:
        out.info("no parked transactions" if parked else "no unresolved half messages")
    else:
        for r, p in zip(rows, txs):
            r["born"] = format_local(p.half.born_timestamp, utc)
            r["age"] = format_age(max(0, now - p.half.born_timestamp))
            if parked:
                r["parked"] = format_local(p.parked_at or 0, utc)
        out.table(rows, LIST_COLUMNS + ([("parked", "PARKED")] if parked else []))


def show_end(out: Output, res: TransactionEnd, commit: bool) -> None:
    """``tx commit`` / ``rollback``: its JSON object, or what changed."""
    if out.json:
        out.emit_json({"txId": res.tx_id, "state": res.state, "changed": res.changed, "topic": res.topic,
                       "commitOffsetMsgId": res.commit_offset_msg_id})
    else:
        word = "committed" if commit else "rolled back"
        out.info(f"{word} transaction {res.tx_id} ({res.topic})" if res.changed
                 else f"transaction {res.tx_id} was already {word}")


def show_event(out: Output, ev: TransactionCheckEvent) -> None:
    """One transaction the check service checked, parked or repaired."""
    if out.json:
        out.emit_json({"txId": ev.tx_id, "topic": ev.topic, "msgId": ev.tx_id, "checkTimes": ev.check_times,
                       "action": ev.action, "answer": ev.answer, "state": ev.state})
    else:
        out.info(event_line(ev))


def event_line(ev: TransactionCheckEvent) -> str:
    what = f"transaction {ev.tx_id} ({ev.topic})"
    if ev.action == "discarded":
        return f"{what}: parked in TRANS_CHECK_MAX_TIME_TOPIC after {plural(ev.check_times, 'check')}"
    if ev.action == "repaired":
        return f"{what}: already {STATE_WORDS.get(ev.state, ev.state)}; its lost op record was restored"
    if ev.state == "PREPARED":
        return f"{what}: check {ev.check_times} left it unknown; asked again in a later pass"
    return f"{what}: check {ev.check_times} answered {ev.answer}: {STATE_WORDS.get(ev.state, ev.state)}"


def pass_summary(report: TransactionCheckReport, timeout: str = "") -> str:
    """The line after each check pass (stderr); ``timeout``: the ``--timeout`` as given."""
    checked = [e for e in report.events if e.action == "checked"]
    if not report.events:
        if report.left_young:
            older = f" older than {timeout}" if timeout else " due for a check"
            return f"check pass: nothing to check ({report.left_young} pending, none{older})"
        return "check pass: nothing to check"
    count = {s: sum(1 for e in checked if e.state == s) for s in ("COMMITTED", "ROLLED_BACK", "PREPARED")}
    discarded = sum(1 for e in report.events if e.action == "discarded")
    return (f"check pass: {plural(len(checked), 'transaction')} checked ({count['COMMITTED']} committed, "
            f"{count['ROLLED_BACK']} rolled back, {count['PREPARED']} left unknown), {discarded} parked")
