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
    # kcat's tokens, with kcat's meaning
    ("%t", b"orders"),
    ("%p", b"3"),
    ("%o", b"42"),
    ("%k", b"k1 k2"),
    ("%s", b"caf\xc3\xa9 \xff\x00raw"),       # raw bytes, not decoded
    ("%S", b"11"),
    ("%R", b"\x00\x00\x00\x0b"),              # kcat's 4-byte big-endian length
    ("%T", b"1795255200123"),                   # the store timestamp, as kcat's %T
    ("%h", b"region=eu"),                       # user properties only, as --json's
    # mqctl's own
    ("%g", b"paid"),
    ("%i", b"AB12"),                            # the unique key: --json's msgId
    ("%I", offset_msg_id(4096).encode()),       # the offset id: --json's offsetMsgId
    ("%r", b"2"),
    ("%B", b"1795255199000"),
    ("%D", b"2026-11-21T10:00:00.123Z"),
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
    tpl = compile_template(r"%t/%p@%o key=%k tag=%g 100%% é\t%S:%s\n")
    assert tpl.render(message()) == (
        b"orders/3@42 key=k1 k2 tag=paid 100% \xc3\xa9\t11:caf\xc3\xa9 \xff\x00raw\n")


def test_missing_optional_fields_render_empty() -> None:
    bare = message(properties={})
    assert compile_template("[%k][%g][%h]").render(bare) == b"[][][]"
    # without a unique key, the message id is the offset id (as --json's msgId)
    assert compile_template("%i").render(bare) == offset_msg_id(4096).encode()


def test_template_is_reusable_across_messages() -> None:
    tpl = compile_template("%o:%s\n")
    assert tpl.render(message(queue_offset=1, body=b"a")) == b"1:a\n"
    assert tpl.render(message(queue_offset=2, body=b"bb")) == b"2:bb\n"


def test_empty_template_renders_nothing() -> None:
    assert compile_template("").render(message()) == b""


def test_h_shows_user_properties_only_like_json() -> None:
    from store.client.envelope import envelope
    m = message(properties={"TAGS": "t", "KEYS": "k", "UNIQ_KEY": "U", "__SHARDINGKEY": "s",
                            "RETRY_TOPIC": "orders", "a": "1", "b": "2"})
    assert compile_template("%h").render(m) == b"a=1,b=2"
    assert envelope(m)["properties"] == {"a": "1", "b": "2"}


def test_d_is_local_time_or_utc_with_the_root_flag() -> None:
    from store.timeparse import format_local
    assert compile_template("%d").render(message()) == format_local(STORE_TS).encode()
    assert compile_template("%d", utc=True).render(message()) == b"2026-11-21T10:00:00.123Z"


@pytest.mark.parametrize("fmt, first", [
    ("%z", "--format: unknown token %z (tokens: %t topic, %p queue id, "),
    ("body %v\n", "--format: unknown token %v (tokens: "),
    ("%q", "--format: unknown token %q (tokens: "),
    ("%u", "--format: unknown token %u (tokens: "),
    ("%\x07", "--format: unknown token %\\x07 (tokens: "),
    ("%", "--format: a lone % at the end (%% prints a percent sign; tokens: "),
    ("abc%", "--format: a lone % at the end"),
    (r"\q", r"--format: unknown escape \q (escapes: \n \t \r \0 \\ \xNN)"),
    (r"\x4", r"--format: \x needs two hex digits, as in \x41"),
    (r"\xzz", r"--format: \x needs two hex digits"),
    ("\\", "--format: a lone \\ at the end"),
])
def test_a_bad_token_or_escape_names_itself(fmt: str, first: str) -> None:
    with pytest.raises(UsageError) as info:
        compile_template(fmt)
    text = str(info.value)
    assert info.value.exit_code == 2
    assert text.startswith(first), text
    assert repr(fmt) not in text and "\n" not in text     # never the template's Python repr
    if "token" in first or "lone %" in first:
        for token in ("%t", "%p", "%o", "%k", "%s", "%S", "%R", "%T", "%h", "%g", "%i", "%I",
                      "%r", "%B", "%d", "%D", "%%"):
            assert f"{token} " in text


def test_the_help_lists_every_token_and_escape() -> None:
    for token in ("%t", "%p", "%o", "%k", "%s", "%S", "%R", "%T", "%h", "%g", "%i", "%I",
                  "%r", "%B", "%d", "%D", "%%", r"\n", r"\t", r"\r", r"\\", r"\xNN"):
        assert token in FORMAT_HELP


def test_a_lone_surrogate_in_the_format_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="^--format: not valid text"):
        compile_template("a\ud800%s")


def bare_word(text: str) -> bool:
    return text.isascii() and text.replace("-", "").replace("_", "").isalnum()


@given(st.text().filter(lambda t: "%" not in t and "\\" not in t and not bare_word(t)))
def test_plain_text_renders_as_its_utf8(text: str) -> None:
    assert compile_template(text).render(message()) == text.encode("utf-8")


@pytest.mark.parametrize("word", ["jsno", "xml", "RAW", "csv_2", "text-only"])
def test_a_bare_word_is_a_mistyped_format_not_a_template(word: str) -> None:
    """``--format jsno`` printed "jsno" for every message (and committed them): a bare word
    is no template anyone means, so it is refused naming the choices."""
    with pytest.raises(UsageError, match=f"^--format '{word}': not raw, json or a template"):
        compile_template(word)
    assert compile_template(word + " %o\\n").render(message()) == word.encode() + b" 42\n"


def test_argv_bytes_that_are_not_utf8_come_back_unchanged() -> None:
    arg = b"\xfe|%o".decode("utf-8", "surrogateescape")  # how Python decodes such an argv
    assert compile_template(arg).render(message()) == b"\xfe|42"


# characters() includes lone surrogates, which plain st.text() leaves out.
@given(st.text(alphabet="%\\xtpoRsSkTgiIhdDBrn0aF9 ", max_size=30) | st.text(st.characters()))
def test_compile_raises_only_usage_error(text: str) -> None:
    try:
        tpl = compile_template(text)
    except UsageError:
        return
    assert isinstance(tpl.render(message()), bytes)
