"""kcat-style ``--format`` templates for ``consume``: ``mqctl consume T -g G --format '%o %s\\n'``.

A template is parsed once by :func:`compile_template` into a byte-format string with one
``%b`` slot per field and a tuple of field getters, so rendering a message costs one getter
call per field and a single ``bytes % tuple`` — no re-parsing per message. Bodies are kept as
raw bytes (never decoded), so binary payloads pass through unchanged.

Tokens follow kcat where kcat has one (``%t %p %o %k %s %S %h``; ``%T`` is kcat's slot, used
here for RocketMQ tags) and add RocketMQ's own fields; the full list is :data:`FORMAT_HELP`.
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Callable

from store.errors import UsageError
from store.timeparse import format_time

if TYPE_CHECKING:
    from store.log.record import Message

Getter = Callable[["Message"], bytes]


def _text(s: str | None) -> bytes:
    # Store strings were decoded with errors="replace", so "replace" here never changes them;
    # it only guarantees that rendering cannot fail on a hand-built message.
    return s.encode("utf-8", "replace") if s else b""


def _int(n: int) -> bytes:
    return b"%d" % n


def _properties(m: Message) -> bytes:
    return _text(",".join(f"{k}={v}" for k, v in m.properties.items()))


# token letter -> (help text, getter). Order is the order of the help listing.
_FIELDS: dict[str, tuple[str, Getter]] = {
    "t": ("topic", lambda m: _text(m.topic)),
    "q": ("queue id", lambda m: _int(m.queue_id)),
    "p": ("queue id (kcat's partition)", lambda m: _int(m.queue_id)),
    "o": ("queue offset", lambda m: _int(m.queue_offset)),
    "k": ("keys (space-separated)", lambda m: _text(" ".join(m.keys))),
    "T": ("tags", lambda m: _text(m.tags)),
    "s": ("body", lambda m: m.body),
    "S": ("body length (bytes)", lambda m: _int(len(m.body))),
    "i": ("message id", lambda m: _text(m.msg_id)),
    "u": ("unique key", lambda m: _text(m.uniq_key)),
    # All stored properties, system ones included (RETRY_TOPIC, DLQ origin …): a format
    # string is a debugging view, and hiding them would make retries hard to trace.
    "h": ("properties (k=v,k=v)", _properties),
    "d": ("store timestamp (ms)", lambda m: _int(m.store_timestamp)),
    "D": ("store time (ISO-8601 UTC)", lambda m: _text(format_time(m.store_timestamp))),
    "b": ("born timestamp (ms)", lambda m: _int(m.born_timestamp)),
    "r": ("reconsume times", lambda m: _int(m.reconsume_times)),
}
_ESCAPES = {"n": b"\n", "t": b"\t", "r": b"\r", "0": b"\0", "\\": b"\\"}

FORMAT_HELP = (
    ", ".join(f"%{tok} {desc}" for tok, (desc, _) in _FIELDS.items())
    + ", %% a percent sign; escapes \\n \\t \\r \\0 \\\\ \\xNN"
)

# A "%" with the character after it (if any), a "\" with its escape (\x takes two more
# characters, validated later), or a run of plain text.
_LEXER = re.compile(r"%(?P<field>.?)|\\(?P<esc>x..|.?)|(?P<lit>[^%\\]+)", re.DOTALL)


class Template:
    """A compiled ``--format`` string. Build it with :func:`compile_template`."""

    __slots__ = ("source", "_fmt", "_getters")

    def __init__(self, source: str, fmt: bytes, getters: tuple[Getter, ...]) -> None:
        self.source = source
        self._fmt = fmt
        self._getters = getters

    def render(self, msg: Message) -> bytes:
        """The bytes to write for ``msg``: fields substituted, body bytes untouched."""
        return self._fmt % tuple([get(msg) for get in self._getters])

    def __repr__(self) -> str:
        return f"Template({self.source!r})"


def compile_template(text: str) -> Template:
    """Parse ``text`` once; an unknown token or escape is a UsageError (exit 2)."""
    fmt = bytearray()
    getters: list[Getter] = []
    for m in _LEXER.finditer(text):
        field, esc, lit = m.group("field", "esc", "lit")
        if lit is not None:
            # Literal "%" cannot occur here (the lexer splits on it), so no %-escaping needed.
            fmt += _literal(lit, text)
        elif field is not None:
            if field == "%":
                fmt += b"%%"
            else:
                getters.append(_field(field, text))
                fmt += b"%b"
        else:
            # bytes % treats "%" in a literal as a conversion, so a \x25 must be doubled.
            fmt += _escape(esc, text).replace(b"%", b"%%")
    return Template(text, bytes(fmt), tuple(getters))


def _literal(lit: str, text: str) -> bytes:
    try:
        # surrogateescape gives back the exact bytes of an argv that was not UTF-8.
        return lit.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate that no byte sequence decodes to
        raise UsageError(f"format {text!r} is not valid text") from None


def _field(token: str, text: str) -> Getter:
    if token in _FIELDS:
        return _FIELDS[token][1]
    what = f"unknown format token '%{token}'" if token else "format ends with a lone '%'"
    raise UsageError(f"{what} in {text!r}; valid: {FORMAT_HELP}")


def _escape(esc: str, text: str) -> bytes:
    if esc in _ESCAPES:
        return _ESCAPES[esc]
    if len(esc) == 3 and esc[0] == "x" and all(c in "0123456789abcdefABCDEF" for c in esc[1:]):
        return bytes((int(esc[1:], 16),))
    what = f"unknown escape '\\{esc}'" if esc else "format ends with a lone '\\'"
    raise UsageError(f"{what} in {text!r}; valid: {FORMAT_HELP}")
