"""kcat-style --format templates: every token, every escape, and the errors."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mqctl.template import FORMAT_HELP, compile_template
from store.errors import UsageError
from store.log.record import Message, offset_msg_id

STORE_TS = 1795255200123  # 2026-11-21T10:00:00.123Z


def message(**over: object) -> Message:
    fields: dict = dict(
        topic="orders", queue_id=3, queue_offset=42, commitlog_offset=4096, size=0,
        body=b"caf\xc3\xa9 \xff\x00raw", born_timestamp=1795255199000,
        store_timestamp=STORE_TS, reconsume_times=2,
        properties={"TAGS": "paid", "KEYS": "k1 k2", "UNIQ_KEY": "AB12", "region": "eu"},
    )
    fields.update(over)
    return Message(**fields)


@pytest.mark.parametrize("fmt, expected", [
    ("%t", b"orders"),
    ("%q", b"3"),
    ("%p", b"3"),
    ("%o", b"42"),
    ("%k", b"k1 k2"),
    ("%T", b"paid"),
    ("%s", b"caf\xc3\xa9 \xff\x00raw"),       # raw bytes, not decoded
    ("%S", b"11"),
    ("%i", offset_msg_id(4096).encode()),
    ("%u", b"AB12"),
    ("%h", b"TAGS=paid,KEYS=k1 k2,UNIQ_KEY=AB12,region=eu"),
    ("%d", b"1795255200123"),
    ("%D", b"2026-11-21T10:00:00.123Z"),
    ("%b", b"1795255199000"),
    ("%r", b"2"),
    ("%%", b"%"),
])
def test_each_token(fmt: str, expected: bytes) -> None:
    assert compile_template(fmt).render(message()) == expected


@pytest.mark.parametrize("fmt, expected", [
    (r"\n", b"\n"), (r"\t", b"\t"), (r"\r", b"\r"), (r"\0", b"\0"), ("\\\\", b"\\"),
    (r"\x41", b"A"), (r"\xff", b"\xff"), (r"\x00", b"\0"), (r"\xFf", b"\xff"),
    (r"\x25", b"%"), (r"\x25s", b"%s"),   # an escaped percent is a literal, not a token
])
def test_each_escape(fmt: str, expected: bytes) -> None:
    assert compile_template(fmt).render(message()) == expected


def test_tokens_literals_and_escapes_together() -> None:
    tpl = compile_template(r"%t/%q@%o key=%k tag=%T 100%% é\t%S:%s\n")
    assert tpl.render(message()) == (
        b"orders/3@42 key=k1 k2 tag=paid 100% \xc3\xa9\t11:caf\xc3\xa9 \xff\x00raw\n")


def test_missing_optional_fields_render_empty() -> None:
    bare = message(properties={})
    assert compile_template("[%k][%T][%u][%h]").render(bare) == b"[][][][]"


def test_template_is_reusable_across_messages() -> None:
    tpl = compile_template("%o:%s\n")
    assert tpl.render(message(queue_offset=1, body=b"a")) == b"1:a\n"
    assert tpl.render(message(queue_offset=2, body=b"bb")) == b"2:bb\n"


def test_empty_template_renders_nothing() -> None:
    assert compile_template("").render(message()) == b""


@pytest.mark.parametrize("fmt, named", [
    ("%x", "'%x'"), ("body %v\n", "'%v'"), ("%", "lone '%'"), ("abc%", "lone '%'"),
    (r"\q", r"'\q'"), (r"\x4", r"'\x'"), (r"\xzz", r"'\xzz'"), ("\\", "lone '\\'"),
])
def test_unknown_token_or_escape_is_a_usage_error_listing_valid_ones(fmt: str, named: str) -> None:
    with pytest.raises(UsageError) as info:
        compile_template(fmt)
    message_text = str(info.value)
    assert info.value.exit_code == 2
    assert named in message_text
    assert FORMAT_HELP in message_text
    for token in ("%t", "%q", "%p", "%o", "%k", "%T", "%s", "%S", "%i", "%u", "%h", "%d",
                  "%D", "%b", "%r", "%%", r"\xNN"):
        assert token in message_text


def test_a_lone_surrogate_in_the_format_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="not valid text"):
        compile_template("a\ud800%s")


@given(st.text().filter(lambda t: "%" not in t and "\\" not in t))
def test_plain_text_renders_as_its_utf8(text: str) -> None:
    assert compile_template(text).render(message()) == text.encode("utf-8")


def test_argv_bytes_that_are_not_utf8_come_back_unchanged() -> None:
    arg = b"\xfe|%o".decode("utf-8", "surrogateescape")  # how Python decodes such an argv
    assert compile_template(arg).render(message()) == b"\xfe|42"


# characters() includes lone surrogates, which plain st.text() leaves out.
@given(st.text(alphabet="%\\xtqposSkTiuhdDbrn0aF9 ", max_size=30) | st.text(st.characters()))
def test_compile_raises_only_usage_error(text: str) -> None:
    try:
        tpl = compile_template(text)
    except UsageError:
        return
    assert isinstance(tpl.render(message()), bytes)
