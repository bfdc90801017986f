"""The one property builder (store/client/properties.py): what it stores, what it refuses, and
how its errors name the argument in each caller's spelling (Python or the command line)."""
from __future__ import annotations

import pytest

from mqctl.argnames import ARG_FLAGS
from mqctl.msgargs import message_properties
from store.client.properties import build_properties
from store.errors import InvalidPropertyError, UsageError


def test_builds_tags_keys_user_properties_and_sharding_key() -> None:
    props = build_properties(tags="paid", keys=[" k1 ", "", "k2"], properties={"a": "1"}, sharding_key="s")
    assert props == {"a": "1", "TAGS": "paid", "KEYS": "k1 k2", "__SHARDINGKEY": "s"}
    assert build_properties(keys="k1", properties=["x=1", "y:2"]) == {"x": "1", "y": "2", "KEYS": "k1"}
    assert build_properties(tags="", keys=[]) == {}


@pytest.mark.parametrize(("kwargs", "arg", "python", "cli"), [
    ({"tags": "a|b"}, "tags", "tags 'a|b': a message has one tag", "--tag 'a|b': a message has one tag"),
    ({"tags": "a\x01"}, "tags", "tags may not contain the control characters",
     "--tag may not contain the control characters"),
    ({"keys": ["a b"]}, "keys", "a key may not contain spaces: 'a b'", "--keys: a key may not contain spaces"),
    ({"keys": ["a\x02"]}, "keys", "a key may not contain the control", "--keys may not contain the control"),
    ({"sharding_key": "s\x01"}, "sharding_key", "sharding_key may not contain", "--sharding-key may not contain"),
    ({"properties": {"TAGS": "x"}}, "properties", "property 'TAGS': the name is reserved for the store",
     "--property 'TAGS': the name is reserved for the store"),
    ({"properties": ["novalue"]}, "properties", "property 'novalue': expected NAME=VALUE",
     "--property 'novalue': expected NAME=VALUE"),
])
def test_errors_name_the_argument_in_the_callers_spelling(kwargs: dict[str, object], arg: str, python: str,
                                                          cli: str) -> None:
    with pytest.raises(InvalidPropertyError) as exc:
        build_properties(**kwargs)  # type: ignore[arg-type]
    assert str(exc.value).startswith(python) and exc.value.arg == arg and exc.value.exit_code == 2
    with pytest.raises(UsageError) as exc2:
        build_properties(arg_names=ARG_FLAGS, **kwargs)  # type: ignore[arg-type]
    assert str(exc2.value).startswith(cli)


def test_a_cli_property_error_quotes_the_pair_as_given() -> None:
    with pytest.raises(InvalidPropertyError, match=r"^--property 'TAGS=x': ") as exc:
        message_properties(["ok=1", "TAGS=x"], None, None, None)
    assert exc.value.value == "TAGS=x"


def test_the_command_line_splits_keys_on_commas() -> None:
    assert message_properties(["a=1"], "t", "k1, k2,", "s") == {"a": "1", "TAGS": "t", "KEYS": "k1 k2",
                                                                 "__SHARDINGKEY": "s"}
    with pytest.raises(InvalidPropertyError, match="^--sharding-key may not"):
        message_properties([], None, None, "s\x02")


def test_a_non_text_value_is_refused() -> None:
    with pytest.raises(InvalidPropertyError, match="^tags must be a str, not int"):
        build_properties(tags=5)  # type: ignore[arg-type]


@pytest.mark.parametrize("props", [{"x": None}, {"x": True}, {"x": 5.0}, {"x": {"y": "1"}}, {1: "v"}])
def test_a_property_name_or_value_that_is_not_a_string_is_refused(props: dict) -> None:
    """Never stored as str() of it ("None", "True", a dict's repr)."""
    with pytest.raises(InvalidPropertyError, match="a property's name and value are strings"):
        build_properties(properties=props)


def test_an_integer_value_is_its_decimal_text() -> None:
    assert build_properties(properties={"n": 5, "m": -7})["n"] == "5"


@pytest.mark.parametrize("kwargs", [{"tags": "t\udc80"}, {"keys": ["k\udc80"]}, {"sharding_key": "\udc80"},
                                    {"properties": {"a": "\udc80"}}, {"properties": {"\udc80": "a"}}])
def test_text_utf8_cannot_encode_is_refused_not_left_to_fail_in_the_write(kwargs: dict[str, object]) -> None:
    """A lone surrogate (``os.fsdecode`` of bytes that were not UTF-8) in a property: an
    InvalidPropertyError naming the argument, not a UnicodeEncodeError from the write."""
    with pytest.raises(InvalidPropertyError, match="not text UTF-8 can encode"):
        build_properties(**kwargs)  # type: ignore[arg-type]
    assert build_properties(tags="tä", keys=["ké"], properties={"é": "ü"}, sharding_key="ß")["TAGS"] == "tä"


def test_a_str_body_utf8_cannot_encode_and_a_tx_id_that_is_no_str_are_usage_errors(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import store
    with store.Producer(tmp_path / "s") as p:
        for send in (lambda: p.send("t", "a\udc80"), lambda: p.send_many("t", [b"x", "a\udc80"])):
            with pytest.raises(UsageError, match="give binary data as bytes"):
                send()
        assert p.send("t", "héllo").topic == "t"
    with store.TransactionProducer(tmp_path / "s") as tp:
        for bad in (None, 5):
            with pytest.raises(UsageError, match="a transaction id must be a str"):
                tp.commit(bad)  # type: ignore[arg-type]
    with store.Consumer("t", group="g", path=tmp_path / "s", start_from="first") as c:
        assert [m.text for m in c.messages(exit_at_end=True)] == ["héllo"]
