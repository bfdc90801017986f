"""Naming rules for topics and groups, and the system's reserved names.

Names are ``^[A-Za-z0-9_%|-]{1,127}$`` (RocketMQ's character set, so every name is also a safe
directory name: no ``/``, no ``.``, nothing a path could escape with). User topics may not
start with ``RMQ_SYS_``, ``%RETRY%`` or ``%DLQ%``, nor be one of RocketMQ's system topics.
Groups have the full 127 characters, so a group's ``%RETRY%GROUP`` and ``%DLQ%GROUP`` topics
take up to 134: the system's own names, read and written but never a user's topic (as
RocketMQ's broker allows its retry and dead-letter topics past 127).
"""
from __future__ import annotations

import re

from store.errors import InvalidNameError, UsageError

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Iterable

NAME_RE = re.compile(r"^[A-Za-z0-9_%|-]{1,127}\Z")  # \Z: "$" would accept a trailing newline
# any topic the store may hold: a name, or a group's retry or dead-letter topic
ANY_TOPIC_RE = re.compile(r"^(?:%RETRY%|%DLQ%)?[A-Za-z0-9_%|-]{1,127}\Z")

RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
SYSTEM_PREFIX = "RMQ_SYS_"
RESERVED_PREFIXES = (SYSTEM_PREFIX, RETRY_PREFIX, DLQ_PREFIX)

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
CHECK_MAX_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
# Exactly-once stages' offset commits, written with their outputs (store/log/offsetcommits.py)
OFFSET_COMMIT_TOPIC = "RMQ_SYS_OFFSET_COMMIT"
# The delay scheduler's progress, written with the messages it delivers (store/log/positions.py)
DELAY_PROGRESS_TOPIC = "RMQ_SYS_DELAY_PROGRESS"
# The one "broker" of a store, in MessageQueue identities and broadcast offset files.
BROKER_NAME = "mqctl"
SYSTEM_TOPICS = frozenset({
    "TBW102", SCHEDULE_TOPIC, "BenchmarkTest", HALF_TOPIC, "RMQ_SYS_TRACE_TOPIC",
    OP_HALF_TOPIC, CHECK_MAX_TOPIC, "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT", "CHECKPOINT_TOPIC",
})


def _check_syntax(kind: str, name: str, pattern: re.Pattern[str] = NAME_RE) -> None:
    if not isinstance(name, str):   # (a Python caller's None or number: no name to quote)
        raise InvalidNameError(f"a {kind} name must be a str, not {type(name).__name__}")
    if not pattern.fullmatch(name):
        shown = name if isinstance(name, str) and len(name) <= 60 else f"{str(name)[:57]}..."
        raise InvalidNameError(
            f"invalid {kind} name {shown!r}: use 1-127 characters from A-Z a-z 0-9 _ % | -")


def validate_topic(name: str) -> str:
    """A topic name a user may create or send to. A system topic's name (up to 134 characters:
    ``%RETRY%`` and a group's) is said to be reserved, whatever its length."""
    _check_syntax("topic", name, ANY_TOPIC_RE)
    if name.startswith(RESERVED_PREFIXES) or name in SYSTEM_TOPICS:
        raise InvalidNameError(f"topic name {name!r} is reserved for the system")
    _check_syntax("topic", name)
    return name


def validate_any_topic(name: str) -> str:
    """A topic name that may be read: user topics and the system's retry/DLQ/system topics."""
    _check_syntax("topic", name, ANY_TOPIC_RE)
    return name


def validate_consumable_topic(name: str) -> str:
    """A topic a consumer may subscribe to: a user topic, or a group's ``%RETRY%`` or
    ``%DLQ%`` topic. The store's own topics (``RMQ_SYS_…``: transactions' half messages, the
    parked ones, delayed messages not yet due) are refused: what they hold is not for
    delivery. Inspection (``msg show``, ``query --all``, admin) still reads them."""
    _check_syntax("topic", name, ANY_TOPIC_RE)
    if is_system_topic(name) and not name.startswith((RETRY_PREFIX, DLQ_PREFIX)):
        raise InvalidNameError(f"topic {name!r} is reserved for the system and cannot be consumed "
                               f"(msg show, or query --all, inspect it)")
    return name


def validate_group(name: str) -> str:
    """A consumer group name."""
    _check_syntax("group", name)
    if name.startswith(RESERVED_PREFIXES) or name.startswith("CID_RMQ_SYS_"):
        raise InvalidNameError(f"group name {name!r} is reserved for the system")
    return name


def retry_topic(group: str) -> str:
    return RETRY_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_PREFIX + group


def is_retry_topic(topic: str) -> bool:
    return topic.startswith(RETRY_PREFIX)


def is_system_topic(topic: str) -> bool:
    """A topic the store keeps for itself (retries, dead letters, delays, transactions)."""
    return topic.startswith(RESERVED_PREFIXES) or topic in SYSTEM_TOPICS


def topic_kind(topic: str) -> str:
    """What a topic holds: ``retry`` (a group's ``%RETRY%`` topic), ``dlq`` (its dead
    letters), ``schedule`` (delayed messages until due), ``half`` (transactions' half
    messages), ``system`` (the store's other topics) or ``user``."""
    if is_retry_topic(topic):
        return "retry"
    if topic.startswith(DLQ_PREFIX):
        return "dlq"
    if topic == SCHEDULE_TOPIC:
        return "schedule"
    if topic == HALF_TOPIC:
        return "half"
    return "system" if is_system_topic(topic) else "user"


CLIENT_ID_RE = re.compile(r"^[A-Za-z0-9_.@:%|#-]{1,200}\Z")


def validate_client_id(client_id: str) -> str:
    """Client ids become file names under the store, so they get the same guard as names."""
    if not isinstance(client_id, str):
        raise InvalidNameError(f"a client id must be a str, not {type(client_id).__name__}")
    if not CLIENT_ID_RE.fullmatch(client_id) or client_id in (".", ".."):
        raise InvalidNameError(
            f"invalid client id {client_id[:60]!r}: use 1-200 characters from A-Z a-z 0-9 _ . @ : % | # -")
    return client_id


TAG_EXPRESSION_HELP = "* (every message) or TAG || TAG || ..."


def tag_problem(tag: str) -> str | None:
    """Why ``tag`` cannot be a message's tag, or None when it can. A tag holds none of the
    characters a consumer's expression (:func:`parse_tag_expression`) refuses, so every tag
    sent can be selected. ``send --tag`` and the ``tags`` of ``send --input json`` use it."""
    if tag != tag.strip():
        return "a tag may not start or end with spaces"
    if "|" in tag:
        return "a message has one tag, and a tag may not contain '|' (consumers select several with 'A || B')"
    for ch in "&,*":
        if ch in tag:
            return f"a tag may not contain {ch!r}"
    return None


def tag_text(tags: Iterable[str] | None) -> str:
    """A parsed expression as a member record publishes it: ``*`` (every message) or
    ``A || B`` (sorted, so two members that wrote their alternatives in another order agree)."""
    return "*" if tags is None else " || ".join(sorted(tags))


def parse_tag_expression(expr: str | None, what: str = "tag expression") -> frozenset[str] | None:
    """RocketMQ's subscription expression: ``A || B`` is the set of tags; ``*`` (alone or as
    one of the alternatives) or nothing (``''``) means every message (None). Spaces around a
    tag are dropped and an empty alternative beside a tag is ignored (``'A ||'`` is ``A``), as
    RocketMQ's ``FilterAPI.buildSubscriptionData`` does. An expression whose every part is
    empty (``'||'``, ``' || '``, ``' '``) names no tag: a UsageError, not every message
    (RocketMQ refuses ``'||'`` and makes ``' || '`` select nothing).

    Strict about everything else: a tag never holds ``|``, ``&``, ``,`` or ``*``, so ``A | B``,
    ``A && B``, ``A,B`` or ``A*`` is a UsageError naming the grammar, not a literal tag that
    silently matches nothing. ``what`` names the expression in that error (``--tag``)."""
    if expr is None:
        return None
    tags: set[str] = set()
    for part in expr.split("||"):
        tag = part.strip()
        if not tag or tag == "*":
            tags.add(tag)
            continue
        why = None
        if "&" in tag:
            why = "there is no '&&': a message has one tag, and 'A || B' selects either"
        elif "|" in tag:
            why = "alternatives are separated by '||'"
        elif "," in tag:
            why = "alternatives are separated by '||', not ','"
        elif "*" in tag:
            why = "'*' stands alone (every message); tags have no wildcards"
        if why:
            raise UsageError(f"{what} {expr!r}: {why}; write {TAG_EXPRESSION_HELP}")
        tags.add(tag)
    if "*" in tags:
        return None
    tags.discard("")
    if not tags and expr != "":
        raise UsageError(f"{what} {expr!r}: it names no tag; write {TAG_EXPRESSION_HELP}")
    return frozenset(tags) or None
