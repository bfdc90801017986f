"""What a command line says about a message: ``--property NAME=VALUE`` pairs, ``--tag``,
``--keys``, delimiters with escapes, and a ``send --input json`` line's fields. Shared by
``send`` and ``tx send``. The properties are
checked and built by the library (``store/client/properties.py``); it names the flags in its
errors (``mqctl/argnames.py``). Imported on ``send``'s Typer-free path: no Typer here."""
from __future__ import annotations

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Optional


# The fields of a ``consume --json`` envelope that say where a message was, not what it is:
# readers of envelopes (``send --input json``, a ``--to`` stage's ``--output json``) ignore them.
ENVELOPE_PLACE_FIELDS = frozenset({
    "topic", "queueOffset", "msgId", "offsetMsgId", "bornTimestamp", "storeTimestamp", "reconsumeTimes",
    "commitLogOffset", "bornHost"})
# The fields the inspection commands add to the envelope, what the store knows of a message
# besides what it is: ``msg show --json`` and ``msg query --json`` (its system flag, whether its
# topic was deleted, its history, the groups' offsets, its transaction:
# ``store.client.history.message_report``) and ``dlq list --json`` (the group, where the dead
# letter came from, whether it was resent, its store time: ``DeadLetter.to_json``). Readers
# of envelopes ignore them too, so ``dlq list -g G --json | send T --input json`` resends by hand.
REPORT_FIELDS = frozenset({
    "sysFlag", "deleted", "history", "consumerGroups", "transaction",
    "group", "dlqOriginTopic", "dlqOriginMsgId", "resent", "storeTime"})
# What ``send --input json`` reads: its own fields and every field of the ``consume --json``
# envelope (ignored ones: where the message was, not what it is; its msgId is kept as the new
# message's id on a resend into the same topic: ``json_msg_id``), so a copy round-trips, and
# the ones the inspection commands add (ignored). Any other field is refused (a typo).
JSON_FIELDS = frozenset({
    "body", "bodyEncoding", "tags", "keys", "shardingKey", "queueId", "properties",
}) | ENVELOPE_PLACE_FIELDS | REPORT_FIELDS


def json_queue_elsewhere(obj: dict[str, object]) -> bool:
    """Whether a line's ``queueId`` is that of a system topic the line names (a dead letter's
    ``%DLQ%`` queue 0, a retry's, a delayed message's level): a place in no user topic, so
    the line is routed as without one (by its ``shardingKey``, else round-robin), as
    ``--reroute`` routes every line."""
    topic = obj.get("topic")
    if not isinstance(topic, str):
        return False
    from store import is_system_topic
    return is_system_topic(topic)


def json_msg_id(obj: dict[str, object], topic: str) -> str | None:
    """A line's ``msgId``, kept as its message's id when the line is a resend: it names no
    ``topic`` or the one it is sent to (RocketMQ's client keeps a UNIQ_KEY the message has), so
    ``consume T --json | send T --input json`` run again makes copies that ``--dedup``
    consumers skip. A copy into another topic (``consume A --json | send B --input json``) is
    a new message with a new id: ``msg show`` of A's id still finds A's. None: a new id."""
    msg_id = obj.get("msgId")
    if msg_id is None or obj.get("topic", topic) != topic:
        return None
    from store import check_msg_id
    return check_msg_id(msg_id, "'msgId'")


def json_body(obj: dict[str, object]) -> bytes:
    """A JSON line's ``body`` (a string; ``bodyEncoding`` ``base64`` for bytes). Optional, as
    cli.md lists it: missing or null, the body is empty. ValueError (``binascii.Error`` for
    bad base64) naming what is wrong."""
    body = obj.get("body")
    if body is None:
        body = ""
    elif not isinstance(body, str):
        raise ValueError("'body' must be a string")
    enc = obj.get("bodyEncoding")
    if enc == "base64":
        import base64
        return base64.b64decode(body, validate=True)
    if enc in (None, "utf-8", "utf8"):
        return body.encode()
    raise ValueError(f"unknown bodyEncoding {enc!r}")


def message_properties(prop: list[str], tag: Optional[str], keys: Optional[str],
                       sharding_key: Optional[str]) -> dict[str, str]:
    """The properties a command line gives every message (``send`` and ``tx send``): user
    ``--property`` pairs, TAGS, KEYS (``--keys`` comma separated) and the sharding key.
    UsageError naming the flag."""
    from mqctl.argnames import ARG_FLAGS
    from store import build_properties
    return build_properties(tags=tag, keys=keys.split(",") if keys else None, properties=prop,
                            sharding_key=sharding_key, arg_names=ARG_FLAGS)


def json_properties(obj: dict[str, object]) -> dict[str, str]:
    """The properties one ``send --input json`` line gives its message: its ``properties``
    object, ``tags``, ``keys`` (a string or a list of strings, each split on commas as
    ``--keys`` is; a key with a space is refused, as ``--keys`` and the library refuse it,
    not split into two) and ``shardingKey``, checked by the library. ValueError for a field of the wrong
    type; InvalidPropertyError (naming the field) for a value that may not be stored."""
    from mqctl.argnames import JSON_FIELD_NAMES
    from store import build_properties
    uprops = obj.get("properties")
    if uprops is None:
        uprops = {}
    if not isinstance(uprops, dict):
        raise ValueError("'properties' must be an object")
    tags = obj.get("tags")
    if tags is not None and not isinstance(tags, str):
        raise ValueError("'tags' must be a string")
    keys = obj.get("keys")
    ks = [] if keys is None else [keys] if isinstance(keys, str) else keys if isinstance(keys, list) else None
    if ks is None or not all(isinstance(k, str) for k in ks):
        raise ValueError("'keys' must be a string or a list of strings")
    skey = obj.get("shardingKey")
    if skey is not None and not isinstance(skey, str):
        raise ValueError("'shardingKey' must be a string")
    return build_properties(tags=tags, keys=[p for k in ks for p in k.split(",")],
                            properties=uprops, sharding_key=skey,
                            arg_names=JSON_FIELD_NAMES)


def unescape(text: str, option: str = "--delimiter") -> bytes:
    from store.errors import UsageError
    try:
        return text.encode().decode("unicode_escape").encode("latin-1")
    except (UnicodeDecodeError, UnicodeEncodeError) as exc:
        raise UsageError(f"{option} {text!r}: not a valid escape sequence ({exc.reason})") from exc


def delay_level_text(ms: int) -> str:
    """A delay level's length as the levels are written: ``1s``, ``30s``, ``2m``, ``1h``."""
    for unit, size in (("h", 3_600_000), ("m", 60_000)):
        if ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms / 1000:g}s"
