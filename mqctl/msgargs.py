"""What a command line says about a message: ``--property NAME=VALUE`` pairs, ``--tag``,
``--keys``, delimiters with escapes. Shared by ``send`` and ``tx send``. The properties are
checked and built by the library (``store/client/properties.py``); it names the flags in its
errors (``mqctl/argnames.py``). Imported on ``send``'s Typer-free path: no Typer here."""
from __future__ import annotations

from typing import Optional


def message_properties(prop: list[str], tag: Optional[str], keys: Optional[str],
                       sharding_key: Optional[str]) -> dict[str, str]:
    """The properties a command line gives every message (``send`` and ``tx send``): user
    ``--property`` pairs, TAGS and KEYS (``--keys`` comma separated). ``--sharding-key`` is
    checked but not included: the caller routes by it. UsageError naming the flag."""
    from mqctl.argnames import ARG_FLAGS
    from store.client.properties import build_properties
    from store.log.record import PROP_SHARDING_KEY
    props = build_properties(tags=tag, keys=keys.split(",") if keys else None, properties=prop,
                             sharding_key=sharding_key, arg_names=ARG_FLAGS)
    props.pop(PROP_SHARDING_KEY, None)
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
