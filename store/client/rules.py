"""Argument rules the command line and the Python client share, and how their errors name
arguments.

A rule is written once, here or in :class:`store.Admin`, for both faces of the library: a
Python caller passes ``broadcast=True, dedup=True``, the command line ``--broadcast --dedup``.
Error messages name arguments through a mapping (``arg_names``) from the Python name to the
caller's spelling; by default (:data:`PYTHON_NAMES`) the Python spelling is used, and the
command line passes its flags, so each face reads its own names::

    dedup does not apply to broadcast: its log is the group's, ...          (Python)
    --dedup does not apply to --broadcast: its log is the group's, ...      (mqctl consume)
"""
from __future__ import annotations

from collections.abc import Mapping

from store.errors import UsageError

ArgNames = Mapping[str, str]

# The Python spelling of every argument a shared message names (keys ending in ``_example``
# are an argument with a sample value).
PYTHON_NAMES: dict[str, str] = {
    "broadcast": "broadcast", "orderly": "orderly", "dedup": "dedup", "strategy": "strategy",
    "queues": "queues", "queues_example": "queues=[0, 3]", "max_reconsume": "max_reconsume",
    "retry_delay": "retry_delay", "suspend": "suspend_ms", "consumers": "consumers",
    "consumers_example": "consumers=['a', 'b']", "consumers_hint": "consumers=[...]",
    "client_id": "client_id", "force": "force=True", "queue": "queue", "topic": "topic", "to": "to=TOPIC",
    "segment_size": "commitlog_segment_size",
    # a message's properties (store/client/properties.py): ``key`` is one of the keys, and
    # ``key_with_spaces`` the whole message about one, ``{value}`` the key
    "tags": "tags", "key": "a key", "key_with_spaces": "a key may not contain spaces: {value}",
    "properties": "property", "properties_arg": "properties", "keys": "keys", "sharding_key": "sharding_key",
}


def spelling(arg_names: ArgNames | None) -> dict[str, str]:
    """:data:`PYTHON_NAMES` with the caller's spellings (``arg_names``) over it."""
    return {**PYTHON_NAMES, **(arg_names or {})}


def usage(template: str, arg_names: ArgNames | None, **values: object) -> UsageError:
    """A ``UsageError`` whose ``{name}`` fields are argument names in the caller's spelling
    (and ``values``, filled in as given)."""
    return UsageError(template.format_map({**spelling(arg_names), **values}))


def check_flags(**flags: object) -> None:
    """Each of ``flags`` (an argument's name and value) is True or False: a switch given a
    string or a number is refused, not read by its truth (``execute="no"`` would execute)."""
    for name, value in flags.items():
        if value is not True and value is not False:
            raise UsageError(f"{name} must be True or False, not {value!r}")


def check_flush(flush: object) -> None:
    """``flush`` is "async" (durable against a process crash once the call returns) or "sync"
    (also against a machine crash: fsynced first); anything else is refused, whatever the
    other arguments (a consumer's ``flush`` without ``to`` included: it would apply to none)."""
    if flush not in ("async", "sync"):
        raise UsageError(f"flush must be 'async' or 'sync', not {flush!r}")


def check_consume_options(*, broadcast: bool = False, orderly: bool = False, dedup: bool = False,
                          strategy: str | None = None, queues: object = None,
                          max_reconsume: int | None = None, retry_delay: object = None,
                          suspend: object = None, arg_names: ArgNames | None = None) -> None:
    """Refuse consume options that contradict each other, or that the others make
    meaningless (``UsageError``, one line with the reason). Pass what the caller gave (None:
    not given):

    ``strategy`` / ``queues``: the allocation strategy and the queue ids of the ``config``
    one (they need each other); ``broadcast``: every member gets every message, so no
    strategy, no dedup log (it is the group's), no dead letters (``max_reconsume``) and no
    later retries (``retry_delay``); ``orderly``: retried in place after ``suspend`` ms
    instead of after a ``retry_delay`` through the retry topic.
    """
    for flag, value in (("orderly", orderly), ("broadcast", broadcast), ("dedup", dedup)):
        if not isinstance(value, bool):   # ("yes", 1, None: a mistake, not a mode)
            raise UsageError(f"{flag} must be True or False, not {value!r}")
    if queues is not None and strategy != "config":
        raise usage("{queues} applies to {strategy} config only", arg_names)
    if strategy == "config" and queues is None:
        raise usage("{strategy} config needs {queues}, e.g. {queues_example}", arg_names)
    if broadcast:
        why = {
            "strategy": (strategy is not None, "every broadcast member reads every queue"),
            "dedup": (dedup, "its log is the group's, so a message one broadcast member "
                             "handled would be skipped by all the others"),
            "max_reconsume": (max_reconsume is not None,
                              "broadcast messages are never dead-lettered (concurrent: a failed "
                              "one is skipped; {orderly}: retried in place)"),
            "retry_delay": (retry_delay is not None, "broadcast messages are not retried later "
                                                     "(concurrent: a failed one is skipped)"),
        }
        for arg, (given, reason) in why.items():
            if given:
                raise usage(f"{{{arg}}} does not apply to {{broadcast}}: {reason}", arg_names)
    if orderly and retry_delay is not None:
        raise usage("{retry_delay} applies to concurrent consumption; {orderly} retries a failed "
                    "message in place after {suspend}", arg_names)
    if not orderly and suspend is not None:
        raise usage("{suspend} applies to {orderly}; concurrent consumption retries through "
                    "the retry topic ({retry_delay})", arg_names)

