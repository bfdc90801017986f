"""One time grammar for every time flag, one duration grammar, and how both are printed.

Every flag that takes a point in time (``consume --from``, ``offsets reset --to-time``, …)
goes through :func:`parse_time`, and every flag that takes a length of time
(``store clean --older-than``, ``--idle-timeout``, ``--delay``) through :func:`parse_duration`,
so a user learns the grammar once, whichever flag it is. Bad input is a
:class:`~store.errors.UsageError` (exit 2) whose one line lists an example of each accepted
form, because the user who typed it wrong needs the right spelling, not a parser's complaint.

Times are milliseconds since the Unix epoch, as the store keeps them. A time written without
a UTC offset is read as UTC, never as local time: the same command line must mean the same
instant on every machine that runs it.
"""
from __future__ import annotations

import re
import time

from store.errors import UsageError

_UNIT_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
# "ms" comes before "m" in the alternation so that "500ms" is not read as 500m followed by
# a stray "s". Each number is capped at 15 digits: plenty for any real duration, and it keeps
# int() away from Python's 4300-digit conversion limit (which raises ValueError).
_PART = re.compile(r"([0-9]{1,15}(?:\.[0-9]{1,9})?)(ms|s|m|h|d)")
_DURATION = re.compile(r"(?:[0-9]{1,15}(?:\.[0-9]{1,9})?(?:ms|s|m|h|d))+")
_DECIMAL = re.compile(r"[0-9]{1,15}(?:\.[0-9]{1,9})?")

# The last instant format_time can print (datetime stops at year 9999): 9999-12-31T23:59:59.999Z.
# A number, not computed with ``datetime``: that module is imported only by the functions that
# print or read a date, not by a command that parses a duration or a word.
MAX_TIME_MS = 253_402_300_799_999

TIME_HELP = (
    "1732183200123 (ms since epoch), 1732183200 (s since epoch), now, -90s / -15m / -2h30m / "
    "-1d (ago), 2026-11-21, 2026-11-21T10:00:00Z, 2026-11-21 10:00:00.123+02:00 "
    "(ISO-8601; no offset means UTC)"
)
DURATION_HELP = "500ms, 30s, 1.5s, 5m, 2h, 3d, 1h30m (a bare number is seconds)"
# A calendar date (extended or basic) and the character after it: ISO-8601 and RFC 3339 put a
# time after "T" (or a space), while ``fromisoformat`` takes any character there, so that
# "2026-11-30+01:00" (meant as midnight at +01:00) read as 01:00 UTC.
_DATE_THEN = re.compile(r"(?:[0-9]{4}-[0-9]{2}-[0-9]{2}|[0-9]{8}|[0-9]{4}-?W[0-9]{2}(?:-?[0-9])?)(.?)",
                        re.IGNORECASE | re.DOTALL)


def parse_time(text: str, now_ms: int | None = None) -> int:
    """The instant ``text`` names, in ms since the epoch; ``now_ms`` pins "now" (tests, and
    commands that resolve several flags against one clock reading)."""
    s = text.strip()
    if not s:
        raise _bad_time(text, "empty")
    if _ascii_digits(s):
        ms = _epoch_number(s, text)
    elif s.lower() == "now":
        ms = _now(now_ms)
    elif s[0] == "-":
        ago = _duration_ms(s[1:].lower())
        if ago is None:
            raise _bad_time(text, "a relative time is '-' then number+unit pairs")
        ms = _now(now_ms) - ago
    else:
        ms = _iso_ms(s, text)
    if not 0 <= ms <= MAX_TIME_MS:
        raise _bad_time(text, "outside 1970-01-01 .. 9999-12-31")
    return ms


def time_note(text: str, ms: int, now_ms: int | None = None) -> str | None:
    """What a time flag's ``text`` resolved to (``ms``, its :func:`parse_time`), when that may
    not be what was meant (so that the command can say what it read), else None: an ISO-8601
    time without an offset where local time is not UTC (read as UTC, while human views print local time: a time copied
    from one lands hours away), and a time in the future (nothing stored is that late)."""
    notes = []
    s = text.strip()
    if s and not _ascii_digits(s) and s[0] != "-" and s.lower() != "now":
        from datetime import datetime, timedelta
        try:
            zoneless = datetime.fromisoformat(s.upper()).tzinfo is None
        except ValueError:
            zoneless = False
        offset = datetime.fromtimestamp(ms / 1000).astimezone().utcoffset() if zoneless else None
        if offset:
            minutes = offset // timedelta(minutes=1)
            zone = f"{'+' if minutes > 0 else '-'}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"
            alone = _DATE_THEN.fullmatch(s)
            dated = alone is not None and not alone.group(1)   # a date alone: its offset needs a time
            notes.append(f"read as UTC (no offset given): {format_time(ms)}, {format_local(ms)} local time "
                         f"(UTC{zone}); write {s}{'T00:00' if dated else ''}{zone} for local time")
    ahead = ms - _now(now_ms)
    if ahead >= 1000:
        notes.append(f"{format_time(ms)} is {format_age(ahead)} in the future: nothing stored is that late")
    return "; ".join(notes) or None


def parse_duration(text: str) -> int:
    """The length of time ``text`` names, in ms. A bare number is seconds (``--idle-timeout 10``)."""
    s = text.strip().lower()
    if _DECIMAL.fullmatch(s):
        return _scaled(s, "s")
    ms = _duration_ms(s)
    if ms is None:
        raise UsageError(f"bad duration {_shown(text)}: accepted: {DURATION_HELP}")
    return ms


def format_time(ms: int) -> str:
    """ISO-8601 UTC with milliseconds, e.g. ``2026-11-21T10:00:00.123Z``; parse_time reads it
    back to the same ms. Valid for 0 <= ms <= MAX_TIME_MS."""
    from datetime import datetime, timedelta, timezone
    dt = datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(milliseconds=ms)
    # Fields by hand rather than strftime: glibc's %Y does not zero-pad years below 1000.
    return (f"{dt.year:04d}-{dt.month:02d}-{dt.day:02d}T{dt.hour:02d}:{dt.minute:02d}:"
            f"{dt.second:02d}.{dt.microsecond // 1000:03d}Z")


def format_local(ms: int, utc: bool = False) -> str:
    """A time for people: local time with ms, ``2026-11-24 00:49:24.123``, or with ``utc``
    the ISO-8601 UTC form of :func:`format_time` (what ``--utc`` prints)."""
    if utc:
        return format_time(ms)
    from datetime import datetime
    dt = datetime.fromtimestamp(ms / 1000).astimezone()
    return f"{dt:%Y-%m-%d %H:%M:%S}.{ms % 1000:03d}"


def format_age(ms_delta: int) -> str:
    """A compact age for tables: ``500ms``, ``3s``, ``2m05s``, ``1h02m``, ``3d04h``.

    Two units at most, the smaller zero-padded so columns of ages line up; the result is
    itself a valid :func:`parse_duration` input.
    """
    if ms_delta < 0:
        return "-" + format_age(-ms_delta)
    if ms_delta < 1000:
        return f"{ms_delta}ms"
    minutes, seconds = divmod(ms_delta // 1000, 60)
    if minutes == 0:
        return f"{seconds}s"
    hours, minutes = divmod(minutes, 60)
    if hours == 0:
        return f"{minutes}m{seconds:02d}s"
    days, hours = divmod(hours, 24)
    if days == 0:
        return f"{hours}h{minutes:02d}m"
    return f"{days}d{hours:02d}h"


def _ascii_digits(s: str) -> bool:
    # str.isdigit alone accepts "²" and other Unicode digits that int() then rejects.
    return s.isascii() and s.isdigit()


def _epoch_number(s: str, text: str) -> int:
    # Only the two lengths that cannot be confused (as rpk): a 12-digit number could be
    # seconds in the year 33658 or ms in 1973, and guessing would silently pick a wrong day.
    if len(s) == 13:
        return int(s)
    if len(s) == 10:
        return int(s) * 1000
    raise _bad_time(text, f"a {len(s)}-digit number is neither 13-digit ms nor 10-digit seconds")


def _now(now_ms: int | None) -> int:
    return time.time_ns() // 1_000_000 if now_ms is None else now_ms


def _duration_ms(s: str) -> int | None:
    """Sum of number+unit pairs (``2h30m``), or None when ``s`` is not made of them only."""
    if not _DURATION.fullmatch(s):
        return None
    return sum(_scaled(n, unit) for n, unit in _PART.findall(s))


def _scaled(number: str, unit: str) -> int:
    """``number`` (digits, maybe a decimal point) of ``unit`` in whole ms, rounded half up;
    exact (integers, not float): ``0.1s`` is 100 ms, not 100.00000000000001."""
    whole, _, frac = number.partition(".")
    scale: int = 10 ** len(frac)
    return (int(whole + frac) * _UNIT_MS[unit] * 2 + scale) // (2 * scale)


def _iso_ms(s: str, text: str) -> int:
    from datetime import datetime, timedelta, timezone
    after = _DATE_THEN.match(s)
    if after is not None and after.group(1) not in ("", "T", "t", " "):
        sep, date = after.group(1), s[:after.start(1)]
        hint = (f"; a date at an offset needs a time: {date}T00:00{s[after.start(1):]}"
                if sep in "+-" and _is_date(date) else "")
        raise _bad_time(text, f"the date is followed by {sep!r}, not 'T' or a space and a time{hint}")
    try:
        # upper(): RFC 3339 allows a lower-case "t" and "z", fromisoformat does not.
        dt = datetime.fromisoformat(s.upper())
    except ValueError:
        raise _bad_time(text, "not a number, 'now', a relative time or an ISO-8601 date") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    # Timedelta floor division keeps exact integer ms; dt.timestamp() would go through a float.
    return (dt - datetime(1970, 1, 1, tzinfo=timezone.utc)) // timedelta(milliseconds=1)


def _is_date(text: str) -> bool:
    from datetime import date
    try:
        date.fromisoformat(text.upper())
    except ValueError:
        return False
    return True


def _shown(text: str) -> str:
    # repr keeps the message on one line whatever control characters the input holds.
    return repr(text if len(text) <= 40 else text[:37] + "...")


def _bad_time(text: str, reason: str) -> UsageError:
    return UsageError(f"bad time {_shown(text)}: {reason}; accepted: {TIME_HELP}")
