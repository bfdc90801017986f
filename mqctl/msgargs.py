"""What a command line says about a message: ``--property NAME=VALUE`` pairs, ``--tag``,
``--keys``, delimiters with escapes. Shared by ``send`` and ``tx send``; every value is
checked so that none can forge another property (a unique key, say)."""
from __future__ import annotations

from typing import Optional


def _split_props(values: list[str]) -> dict[str, str]:
    from store.errors import UsageError
    from store.log.record import check_property
    out: dict[str, str] = {}
    for item in values:
        sep = "=" if "=" in item else (":" if ":" in item else None)
        if sep is None:
            raise UsageError(f"--property {item!r}: expected NAME=VALUE")
        name, value = item.split(sep, 1)
        try:
            check_property(name, value)
        except Exception as exc:  # BadInputError from the store: a usage error on the command line
            raise UsageError(f"--property {item!r}: {exc}") from exc
        out[name] = value
    return out


def message_properties(prop: list[str], tag: Optional[str], keys: Optional[str],
                       sharding_key: Optional[str]) -> dict[str, str]:
    """The properties a command line gives every message (``send`` and ``tx send``): user
    ``--property`` pairs, TAGS and KEYS. No value may carry the property separators, or it
    could forge another property (a unique key, say)."""
    from store.errors import UsageError
    from store.names import tag_problem
    props = _split_props(prop)
    try:
        for what, value in (("--tag", tag), ("--keys", keys), ("--sharding-key", sharding_key)):
            if value is not None:
                no_separators(what, value)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    if tag:
        why = tag_problem(tag)
        if why:
            raise UsageError(f"--tag {tag!r}: {why}")
    if tag:
        props["TAGS"] = tag
    if keys:
        ks = [k.strip() for k in keys.split(",") if k.strip()]
        if any(" " in k for k in ks):
            raise UsageError("--keys: a key may not contain spaces")
        props["KEYS"] = " ".join(ks)
    return props


def unescape(text: str, option: str = "--delimiter") -> bytes:
    from store.errors import UsageError
    try:
        return text.encode().decode("unicode_escape").encode("latin-1")
    except (UnicodeDecodeError, UnicodeEncodeError) as exc:
        raise UsageError(f"{option} {text!r}: not a valid escape sequence ({exc.reason})") from exc


def no_separators(what: str, value: str) -> str:
    """Tags, keys and sharding keys are stored as properties (``has_separator`` says why).
    ValueError: the caller makes it a usage error (a flag) or a data error (an input line)."""
    from store.log.record import has_separator
    if has_separator(value):
        raise ValueError(f"{what} may not contain the control characters \\x01 or \\x02")
    return value
