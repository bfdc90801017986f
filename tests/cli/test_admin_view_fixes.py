"""Admin views a newcomer found wrong: the messages of a deleted topic shown as the messages of
the topic made anew under its name.

Real ``mqctl`` processes."""
from __future__ import annotations

from tests.procs import MQ

# -- a deleted topic's messages ---------------------------------------------------------------------

def test_msg_query_leaves_out_the_messages_of_a_deleted_topic_made_anew(mq: MQ) -> None:
    """Its records stay in the log until retention, but no queue holds them: the offset they
    had names another message now. msg query showed "gone" at deltop/2@0, where "newq2" is."""
    mq.ok("send", "deltop", "gone", "-k", "dk", "-q", "2")
    [gone] = mq.ok("msg", "query", "--topic", "deltop", "-k", "dk", "--json").json_lines()
    mq.ok("topic", "delete", "deltop", "--yes")
    mq.ok("send", "deltop", "newq2", "-q", "2")
    res = mq.ok("msg", "query", "--topic", "deltop", "-k", "dk", "--json")
    assert res.stdout == b"", res
    assert "no messages with key dk in topic deltop" in mq.ok("msg", "query", "--topic", "deltop", "-k", "dk").stderr
    mq.ok("send", "deltop", "again", "-k", "dk", "-q", "2")   # the new topic's message with the key is found
    assert [r["body"] for r in mq.ok("msg", "query", "--topic", "deltop", "-k", "dk", "--json").json_lines()] == ["again"]

    # msg show of the deleted one: still readable (exit 0), said to be deleted with its topic
    shown = mq.ok("msg", "show", gone["msgId"], "--json").json_lines()[0]
    assert shown["body"] == "gone" and shown["deleted"] is True and shown["consumerGroups"] == []
    [event] = [e for e in shown["history"] if e.get("this")]
    assert event["deleted"] is True and event["event"] == "sent"
    text = mq.ok("msg", "show", gone["msgId"]).out
    assert "deleted with topic deltop" in text and "deleted with its topic  (this copy)" in text, text
    [now] = mq.ok("msg", "query", "--topic", "deltop", "-k", "dk", "--json").json_lines()
    assert mq.ok("msg", "show", now["msgId"], "--json").json_lines()[0]["deleted"] is False
