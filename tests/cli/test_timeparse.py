"""The one time grammar of every time flag and the duration grammar, with a fixed clock."""
from __future__ import annotations

import calendar
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from store.errors import UsageError
from store.timeparse import MAX_TIME_MS, format_age, format_time, parse_duration, parse_time
from tests.procs import MQ


def utc_ms(y: int, mo: int, d: int, h: int = 0, mi: int = 0, s: int = 0, ms: int = 0) -> int:
    # calendar.timegm, not the code under test, decides what the right answer is.
    return calendar.timegm((y, mo, d, h, mi, s)) * 1000 + ms


NOW = utc_ms(2026, 11, 21, 10, 0, 0)
HOUR = 3_600_000


@pytest.mark.parametrize("text, expected", [
    ("1795255200123", 1795255200123),                 # 13 digits: ms
    ("1795255200", 1795255200000),                    # 10 digits: seconds
    ("0000000000", 0),
    ("now", NOW),
    ("NOW", NOW),
    ("  now  ", NOW),
    ("-1h", NOW - HOUR),
    ("-15m", NOW - 15 * 60_000),
    ("-2h30m", NOW - 2 * HOUR - 30 * 60_000),
    ("-90s", NOW - 90_000),
    ("-1d", NOW - 24 * HOUR),
    ("-500ms", NOW - 500),
    ("-1H", NOW - HOUR),
    ("2026-11-21", utc_ms(2026, 11, 21)),
    ("2026-11-21T10:00:00", utc_ms(2026, 11, 21, 10)),   # no offset: UTC
    ("2026-11-21T10:00:00Z", utc_ms(2026, 11, 21, 10)),
    ("2026-11-21t10:00:00z", utc_ms(2026, 11, 21, 10)),  # RFC 3339 allows lower case
    ("2026-11-21 10:00:00.123+02:00", utc_ms(2026, 11, 21, 8, 0, 0, 123)),
    ("2026-11-21T10:00:00-05:30", utc_ms(2026, 11, 21, 15, 30)),
    ("2026-11-21T10:00:00.999999Z", utc_ms(2026, 11, 21, 10, 0, 0, 999)),  # µs truncated
    ("1970-01-01T00:00:00Z", 0),
])
def test_parse_time_accepts_every_form(text: str, expected: int) -> None:
    assert parse_time(text, now_ms=NOW) == expected


@pytest.mark.parametrize("text", [
    "", "   ", "12345", "123456789", "12345678901", "12345678901234",  # wrong digit counts
    "-90", "-", "-1x", "-1h-", "+1h", "1h", "yesterday", "2026-13-01", "2026-11-21T25:00",
    "1969-12-31T23:59:59Z", "0001-01-01", "²²²²²²²²²²", "now-1h", "20261121",
])
def test_parse_time_rejects_with_examples_of_every_form(text: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_time(text, now_ms=NOW)
    message = str(info.value)
    assert "\n" not in message
    assert info.value.exit_code == 2
    for example in ("1732183200123", "1732183200", "now", "-15m", "-2h30m", "2026-11-21",
                    "2026-11-21T10:00:00Z", "+02:00", "no offset means UTC"):
        assert example in message


def test_time_without_offset_is_utc_whatever_the_local_zone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        assert parse_time("2026-11-21T10:00:00") == utc_ms(2026, 11, 21, 10)
        assert parse_time("2026-11-21") == utc_ms(2026, 11, 21)
    finally:
        monkeypatch.undo()
        time.tzset()


def test_wrong_digit_count_says_which_lengths_work() -> None:
    with pytest.raises(UsageError, match="12-digit number is neither 13-digit ms nor 10-digit"):
        parse_time("123456789012")


def test_relative_time_too_far_back_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="outside 1970-01-01"):
        parse_time("-99999999d", now_ms=NOW)


def test_now_without_a_pinned_clock_is_the_current_time() -> None:
    before = time.time_ns() // 1_000_000
    got = parse_time("now")
    assert before <= got <= time.time_ns() // 1_000_000


@pytest.mark.parametrize("text, expected", [
    ("500ms", 500), ("30s", 30_000), ("5m", 300_000), ("2h", 2 * HOUR), ("3d", 72 * HOUR),
    ("72h", 72 * HOUR), ("1h30m", 90 * 60_000), ("1d2h3m4s5ms", 93_784_005),
    ("10", 10_000), ("0", 0), (" 2H ", 2 * HOUR),
    ("1.5s", 1_500), ("1.5h", 90 * 60_000), ("0.1s", 100), ("2.5", 2_500), ("1.0005s", 1_001),
])
def test_parse_duration(text: str, expected: int) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", [
    "", "-5s", "5 m", "h", "5w", "1h 30m", "ms", "١٠", "9" * 16, "1.s", ".5s", "1..5s", "1.5.5s",
])
def test_parse_duration_rejects_with_examples(text: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_duration(text)
    assert "500ms, 30s, 1.5s, 5m, 2h, 3d, 1h30m" in str(info.value)
    assert "bare number is seconds" in str(info.value)


@pytest.mark.parametrize("ms, text", [
    (0, "1970-01-01T00:00:00.000Z"),
    (utc_ms(2026, 11, 21, 10, 0, 0, 123), "2026-11-21T10:00:00.123Z"),
    (MAX_TIME_MS, "9999-12-31T23:59:59.999Z"),
])
def test_format_time(ms: int, text: str) -> None:
    assert format_time(ms) == text


@pytest.mark.parametrize("delta, text", [
    (0, "0ms"), (999, "999ms"), (3_000, "3s"), (3_999, "3s"), (59_999, "59s"),
    (125_000, "2m05s"), (3_599_000, "59m59s"), (3_720_000, "1h02m"),
    (86_399_000, "23h59m"), (86_400_000 * 3 + 4 * HOUR, "3d04h"), (-125_000, "-2m05s"),
])
def test_format_age(delta: int, text: str) -> None:
    assert format_age(delta) == text


@given(st.text(st.characters()))  # lone surrogates included
def test_parse_time_raises_only_usage_error_on_any_text(text: str) -> None:
    try:
        got = parse_time(text, now_ms=NOW)
    except UsageError:
        return
    assert 0 <= got <= MAX_TIME_MS


# Text built from the grammar's own characters reaches the deeper branches far more often
# than arbitrary Unicode does.
@given(st.text(alphabet="0123456789-:.+TZtz nowmshd", max_size=40))
def test_parse_time_raises_only_usage_error_on_grammar_like_text(text: str) -> None:
    try:
        got = parse_time(text, now_ms=NOW)
    except UsageError:
        return
    assert 0 <= got <= MAX_TIME_MS


@given(st.text(alphabet="0123456789mshd -.", max_size=40) | st.text(st.characters()))
def test_parse_duration_raises_only_usage_error(text: str) -> None:
    try:
        assert parse_duration(text) >= 0
    except UsageError:
        pass


@given(st.integers(min_value=0, max_value=MAX_TIME_MS))
def test_format_time_round_trips_through_parse_time(ms: int) -> None:
    assert parse_time(format_time(ms)) == ms


@given(st.integers(min_value=0, max_value=10 * 365 * 86_400_000))
def test_format_age_reads_back_as_a_duration_truncated_to_its_last_unit(ms: int) -> None:
    back = parse_duration(format_age(ms))
    last_unit = 1 if ms < 1000 else 1000 if ms < HOUR else 60_000 if ms < 24 * HOUR else HOUR
    assert 0 <= ms - back < last_unit


@pytest.mark.parametrize(("text", "same_as"), [
    ("@2026-11-30", "2026-11-30"), ("@1764460800000", "1764460800000"), ("@1764460800", "1764460800"),
    ("@2026-11-30T10:00:00Z", "2026-11-30T10:00:00Z"), ("s@1764460800000", "1764460800000"),
    ("s@0", "0000000000000"), (" @2026-11-30 ", "2026-11-30"),
])
def test_from_takes_rpk_and_kcat_time_markers(text: str, same_as: str) -> None:
    """``-o @TIME`` (rpk) and ``-o s@MS`` (kcat: ms since the epoch) are times, as ``-o TIME``."""
    from mqctl.consumerun import start_position
    assert start_position(text, no_group=False) == ("timestamp", parse_time(same_as), None)
    where, ts, _ = start_position("@-1h", no_group=True)
    assert where == "timestamp" and abs(ts - (time.time() - 3600) * 1000) < 60_000


@pytest.mark.parametrize("text", ["@", "@first", "@nonsense", "s@", "s@-1h", "s@1.5", "@@1764460800"])
def test_from_refuses_a_marked_time_that_is_no_time(text: str) -> None:
    from mqctl.consumerun import start_position
    with pytest.raises(UsageError, match="--from/-o also takes"):
        start_position(text, no_group=True)


def test_a_time_without_an_offset_is_utc_and_a_command_says_what_it_read(mq: MQ) -> None:
    """The tester's case: in Tokyo, the local time ``consume`` prints for a message, copied into
    ``--from``, is read as UTC (as every zone-less ISO time is), 9 h later: nothing was delivered, the
    group started at the queue's end, and nothing said why (the help did not say it is UTC).
    Now the help says so, and a zone-less time where local time is not UTC, or a time in the
    future, is warned about with what it was read as (C3.3); with its offset it is local."""
    import re
    mq.ok("topic", "create", "T", "--queues", "1")
    mq.send_lines("T", ["m1"])
    [env] = mq.ok("consume", "T", "--no-group", "-o", "first", "-e", "--json").json_lines()
    ts = env["storeTimestamp"]
    local = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ts // 1000 + 9 * 3600)) + f".{ts % 1000:03d}"
    tokyo = {"TZ": "JST-9"}   # (a POSIX zone: no zone database needed)
    shown = mq.ok("consume", "T", "--no-group", "-o", "first", "-e", "-f", "%d %s\\n", extra_env=tokyo)
    assert shown.out == f"{local} m1\n"
    read_as = format_time(ts + 9 * HOUR)
    for argv in (("consume", "T", "-g", "G", "--from", local, "-e"),
                 ("offsets", "reset", "-g", "G", "--topic", "T", "--to-time", local)):
        res = mq.ok(*argv, extra_env=tokyo)
        flag = argv[-2] if argv[0] == "offsets" else "--from"
        [line] = [ln for ln in res.stderr.splitlines() if f"{flag} {local}" in ln]
        assert line.startswith(
            f"mqctl: warning: {flag} {local}: read as UTC (no offset given): {read_as}, "
            f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime((ts + 9 * HOUR) // 1000 + 9 * 3600))}"
            f".{ts % 1000:03d} local time (UTC+09:00); write {local}+09:00 for local time; {read_as} is "), line
        assert re.search(r"is 8h5\dm in the future: nothing stored is that late$", line), line
    assert mq.ok("consume", "T", "-g", "G", "--from", local, "-e", extra_env=tokyo).stdout == b""   # (as read)
    res = mq.ok("consume", "T", "-g", "G2", "--from", local + "+09:00", "-e", extra_env=tokyo)
    assert (res.out, res.stderr) == ("m1\n", "")
    utc = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ts // 1000)) + f".{ts % 1000:03d}"
    res = mq.ok("consume", "T", "-g", "G3", "--from", utc, "-e", extra_env={"TZ": "UTC0"})
    assert (res.out, res.stderr) == ("m1\n", "")   # (local time is UTC: read as meant, nothing said)
    helptext = " ".join(mq.ok("consume", "--help").out.split())
    assert "ISO-8601, without offset = UTC, not local time" in helptext


@pytest.mark.parametrize("text", ["2026-11-30+01:00", "2026-11-30-05:00", "20261130+0100", "2026-11-30X01:00",
                                  "2025-W48+01:00", "2026-W48-1+01:00", "2026W481+0100", "2026-W48-1X10:00",
                                  "2025-11-24\n10:00", "2026-13-45+01:00"])
def test_a_date_followed_by_anything_but_a_time_is_refused(text: str) -> None:
    """``fromisoformat`` takes any character between a date and a time, so "2026-11-30+01:00"
    (a date at an offset, as the warning below used to suggest) was read as 01:00 UTC; ISO-8601
    puts a time after "T" (RFC 3339 also a space). Refused now, with the spelling that works."""
    with pytest.raises(UsageError) as info:
        parse_time(text, now_ms=NOW)
    message = str(info.value)
    assert "not 'T' or a space and a time" in message and "\n" not in message, message
    if text in ("2026-11-30+01:00", "2026-11-30-05:00"):
        assert f"needs a time: {text[:10]}T00:00{text[10:]}" in message, message
    if text == "2025-W48+01:00":
        assert "needs a time: 2025-W48T00:00+01:00" in message, message
    if text == "2026-13-45+01:00":   # (no date: no spelling of it to suggest)
        assert "needs a time" not in message, message


def test_the_warning_for_a_zoneless_date_suggests_a_spelling_that_means_local_midnight(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """In Berlin, ``--from 2026-11-30`` warned "write 2026-11-30+01:00 for local time", which
    was read as 01:00 UTC (02:00 local), and then warned again suggesting "+01:00+01:00"."""
    from store.timeparse import time_note
    monkeypatch.setenv("TZ", "CET-1")   # (a POSIX zone: no zone database needed)
    time.tzset()
    try:
        ms = parse_time("2026-11-30", now_ms=NOW)
        note = time_note("2026-11-30", ms, now_ms=NOW)
        assert note is not None and "write 2026-11-30T00:00+01:00 for local time" in note, note
        suggested = parse_time("2026-11-30T00:00+01:00", now_ms=NOW)
        assert suggested == utc_ms(2026, 11, 29, 23)   # local midnight
        assert "read as UTC" not in (time_note("2026-11-30T00:00+01:00", suggested, now_ms=NOW) or "")
        week = time_note("2025-W48", parse_time("2025-W48", now_ms=NOW), now_ms=NOW)   # (an ISO week date)
        assert week is not None and "write 2025-W48T00:00+01:00 for local time" in week, week
    finally:
        monkeypatch.undo()
        time.tzset()


@pytest.mark.parametrize("word", ["FIRST", "Last", "Earliest", "END", "Beginning"])
def test_from_words_are_taken_in_any_case(word: str) -> None:
    """``--from FIRST`` was "bad time 'FIRST'" (exit 2) while ``now`` is taken in any case."""
    from mqctl.consumerun import start_position
    assert start_position(word, False) == start_position(word.lower(), False)
