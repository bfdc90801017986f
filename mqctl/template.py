"""kcat-style ``--format`` templates for ``consume``: ``mqctl consume T -g G --format '%o %s\\n'``.

A template is parsed once by :func:`compile_template` into a byte-format string with one
``%b`` slot per field and a tuple of field getters, so rendering a message costs one getter
call per field and a single ``bytes % tuple`` — no re-parsing per message. Bodies are kept as
raw bytes (never decoded), so binary payloads pass through unchanged.

Where kcat has a token, it means what it means in kcat: ``%t`` topic, ``%p`` queue id (kcat's
partition), ``%o`` queue offset, ``%k`` keys, ``%s`` body, ``%S`` body size, ``%R`` body size
as a 4-byte big-endian integer (for length-prefixed framing), ``%T`` store timestamp (ms),
``%h`` user properties. The rest are mqctl's own, on letters kcat does not use: ``%g`` tags,
``%m`` message id (the unique key: ``--json``'s ``msgId``; ``%i`` too, which rpk uses for a
record counter), ``%I`` offset message id, ``%n`` delivery count (reconsume times + 1: 1 on the
first delivery), ``%r`` reconsume times (above 0: a redelivery), ``%B`` born timestamp (ms), ``%D`` store time in
ISO-8601 UTC, ``%d`` store time for people (local, or UTC with ``--utc``). The full list is
:data:`FORMAT_HELP`; a bad token is a usage error that names it and lists them.
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Callable

from store import format_local, format_time
from store.errors import UsageError

if TYPE_CHECKING:
    from store import StoredMessage as Message

Getter = Callable[["Message"], bytes]


def _text(s: str | None) -> bytes:
    # Store strings were decoded with errors="replace", so "replace" here never changes them;
    # it only guarantees that rendering cannot fail on a hand-built message.
    return s.encode("utf-8", "replace") if s else b""


def _int(n: int) -> bytes:
    return b"%d" % n


def _user_properties(m: Message) -> bytes:
    # The properties --json's "properties" shows: what the sender set, never the store's own
    # (UNIQ_KEY, TAGS, KEYS, __SHARDINGKEY, RETRY_TOPIC ...), which have tokens or --json.
    return _text(",".join(f"{k}={v}" for k, v in m.user_properties.items()))


def _msg_id(m: Message) -> bytes:
    return _text(m.uniq_key or m.msg_id)


def _fields(utc: bool) -> dict[str, tuple[str, Getter]]:
    """Token letter -> (help text, getter), in the order of the help listing."""
    return {
        "t": ("topic", lambda m: _text(m.topic)),
        "p": ("queue id", lambda m: _int(m.queue_id)),
        "o": ("queue offset", lambda m: _int(m.queue_offset)),
        "k": ("keys", lambda m: _text(" ".join(m.keys))),
        "s": ("body", lambda m: m.body),
        "S": ("body size", lambda m: _int(len(m.body))),
        "R": ("body size as a 4-byte big-endian integer", lambda m: len(m.body).to_bytes(4, "big")),
        "T": ("store timestamp (ms)", lambda m: _int(m.store_timestamp)),
        "h": ("user properties (k=v,k=v)", _user_properties),
        "g": ("tags", lambda m: _text(m.tags)),
        "m": ("message id (msgId)", _msg_id),
        "i": ("message id (as %m)", _msg_id),
        "I": ("offset message id (offsetMsgId)", lambda m: _text(m.msg_id)),
        "n": ("delivery count (reconsume times + 1)", lambda m: _int(m.reconsume_times + 1)),
        "r": ("reconsume times (above 0: a redelivery)", lambda m: _int(m.reconsume_times)),
        "B": ("born timestamp (ms)", lambda m: _int(m.born_timestamp)),
        "d": ("store time (local; UTC with --utc)", lambda m: _text(format_local(m.store_timestamp, utc))),
        "D": ("store time (ISO-8601 UTC)", lambda m: _text(format_time(m.store_timestamp))),
    }


_ESCAPES = {"n": b"\n", "t": b"\t", "r": b"\r", "0": b"\0", "\\": b"\\"}
ESCAPES_HELP = "\\n \\t \\r \\0 \\\\ \\xNN"
TOKENS = [(f"%{tok}", desc) for tok, (desc, _) in _fields(False).items()] + [("%%", "a percent sign")]
TOKENS_HELP = ", ".join(f"{tok} {desc}" for tok, desc in TOKENS)
FORMAT_HELP = f"{TOKENS_HELP}; escapes {ESCAPES_HELP}"

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


def compile_template(text: str, utc: bool = False) -> Template:
    """Parse ``text`` once; an unknown token or escape is a UsageError (exit 2) that names
    it. ``utc``: ``%d`` prints UTC instead of local time (the root ``--utc``)."""
    if text.isascii() and text.replace("-", "").replace("_", "").isalnum():
        # a bare word is a mistyped name (jsno, xml), not a template printing it for every message
        raise UsageError(f"--format {text!r}: not raw, json or a template (a template holds tokens: {TOKENS_HELP})")
    fields = _fields(utc)
    fmt = bytearray()
    getters: list[Getter] = []
    for m in _LEXER.finditer(text):
        field, esc, lit = m.group("field", "esc", "lit")
        if lit is not None:
            # Literal "%" cannot occur here (the lexer splits on it), so no %-escaping needed.
            fmt += _literal(lit)
        elif field is not None:
            if field == "%":
                fmt += b"%%"
            elif field in fields:
                getters.append(fields[field][1])
                fmt += b"%b"
            elif field:
                raise UsageError(f"--format: unknown token %{_shown(field)} (tokens: {TOKENS_HELP})")
            else:
                raise UsageError(f"--format: a lone % at the end (%% prints a percent sign; tokens: {TOKENS_HELP})")
        else:
            # bytes % treats "%" in a literal as a conversion, so a \x25 must be doubled.
            fmt += _escape(esc).replace(b"%", b"%%")
    return Template(text, bytes(fmt), tuple(getters))


def _shown(s: str) -> str:
    """``s`` as printable text for an error line (a control character or a lone surrogate
    as its escape, never a raw byte on the user's terminal)."""
    return s if s.isprintable() else s.encode("unicode_escape").decode("ascii")


def _literal(lit: str) -> bytes:
    try:
        # surrogateescape gives back the exact bytes of an argv that was not UTF-8.
        return lit.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate that no byte sequence decodes to
        raise UsageError("--format: not valid text (it holds a lone surrogate)") from None


def _escape(esc: str) -> bytes:
    if esc in _ESCAPES:
        return _ESCAPES[esc]
    if esc[:1] == "x":
        if len(esc) == 3 and all(c in "0123456789abcdefABCDEF" for c in esc[1:]):
            return bytes((int(esc[1:], 16),))
        raise UsageError(f"--format: \\x needs two hex digits, as in \\x41 (escapes: {ESCAPES_HELP})")
    if not esc:
        raise UsageError(f"--format: a lone \\ at the end (\\\\ prints a backslash; escapes: {ESCAPES_HELP})")
    raise UsageError(f"--format: unknown escape \\{_shown(esc)} (escapes: {ESCAPES_HELP})")
