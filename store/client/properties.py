"""A message's properties from what a caller gives: the one place that checks and builds
tags, keys, user properties and the sharding key, for ``Producer``, ``TransactionProducer``,
``mqctl send`` and ``mqctl tx send`` alike.

No value may hold the property separators (``store.log.record.has_property_separator``: it could
forge another property, a unique key say), a tag must be selectable by a consumer's
expression (``store.names.tag_problem``), a key holds no space (keys are stored space
separated), and a user property is neither empty nor reserved
(``store.log.record.property_problem``).

Errors are :class:`~store.errors.InvalidPropertyError` naming the argument in the caller's
spelling (``arg_names``, as in :mod:`store.client.rules`)::

    tags 'a|b': a message has one tag, ...            (Python)
    --tag 'a|b': a message has one tag, ...           (mqctl send)
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from store.client.rules import ArgNames, spelling
from store.errors import InvalidPropertyError

UserProperties = Mapping[str, str] | Iterable[str]


def build_properties(*, tags: str | None = None, keys: str | Sequence[str] | None = None,
                     properties: UserProperties | None = None, sharding_key: str | None = None,
                     arg_names: ArgNames | None = None) -> dict[str, str]:
    """The stored properties of a message: the user ``properties``, ``TAGS``, ``KEYS`` (space
    separated; ``keys`` is one key or a sequence, blank ones dropped) and the sharding key.

    ``properties`` is a mapping, or ``NAME=VALUE`` strings as a command line gives them
    (``NAME:VALUE`` too); an error then quotes the string as given. Raises
    ``InvalidPropertyError`` for the first value that may not be stored."""
    from store.log.record import PROP_KEYS, PROP_SHARDING_KEY, PROP_TAGS
    from store.names import tag_problem
    said = spelling(arg_names)
    props = _user_properties(properties, said)
    key_list = _key_list(keys, said)
    for arg, name, value in [("tags", "tags", tags), *(("keys", "key", k) for k in key_list),
                             ("sharding_key", "sharding_key", sharding_key)]:
        if value is not None:
            _storable(value, arg, said[name])
    if tags:
        why = tag_problem(tags)
        if why:
            raise InvalidPropertyError(f"{said['tags']} {tags!r}: {why}", "tags", tags)
        props[PROP_TAGS] = tags
    parts = []
    for k in key_list:
        if " " in k.strip():
            raise InvalidPropertyError(said["key_with_spaces"].format(value=repr(k)), "keys", k)
        if k.strip():
            parts.append(k.strip())
    if parts:
        props[PROP_KEYS] = " ".join(parts)
    if sharding_key is not None:
        props[PROP_SHARDING_KEY] = sharding_key
    check_properties_room(props)   # refused now, naming this message, not by its batch's write
    return props


def _key_list(keys: object, said: Mapping[str, str]) -> list[str]:
    """``keys`` as a list: one key (a str) or a sequence of them; anything else (an int, a
    dict, bytes) is refused naming ``keys``, not left to fail deep in the send."""
    if keys is None or isinstance(keys, str):
        return [keys] if keys else []
    if isinstance(keys, Iterable) and not isinstance(keys, (bytes, bytearray, Mapping)):
        return list(keys)   # (each is checked to be a str by the caller)
    raise InvalidPropertyError(f"{said['keys']} must be a str or a list of str, not {type(keys).__name__}",
                               "keys", keys)


def check_properties_room(props: Mapping[str, str]) -> None:
    """``MessageTooLargeError`` when ``props`` do not fit a record (:func:`properties_room`)."""
    if 4 * sum(len(k) + len(v) for k, v in props.items()) < 16384:   # (at most 4 bytes a character)
        return   # what every message of sane size takes: no encoding
    if properties_room(props) < 0:
        from store.log.record import check_properties_size
        check_properties_size(_stored_size(props))


def _stored_size(props: Mapping[str, str]) -> int:
    """The properties' bytes as the write stores them: with the unique key it adds (a 32-digit
    message id), without the record's CRC property."""
    from store.log.record import UNIQ_KEY_PROPERTY_SIZE, encode_properties
    return len(encode_properties(dict(props))) + UNIQ_KEY_PROPERTY_SIZE


def properties_room(props: Mapping[str, str]) -> int:
    """Bytes left in a message's properties field for more properties (a sharding key, say)
    once the write adds its unique key; below 0 the write refuses the message
    (``MessageTooLargeError``: RocketMQ's 16-bit properties length)."""
    from store.log import format as F
    return F.MAX_PROPERTIES_SIZE - F.CRC_PROPERTY_SIZE - _stored_size(props)


def _user_properties(given: UserProperties | None, said: Mapping[str, str]) -> dict[str, str]:
    """The user properties, each checked; ``NAME=VALUE`` strings split first."""
    from store.log.record import property_problem
    if given is None:
        return {}
    if isinstance(given, Mapping):
        pairs = []
        for k, v in given.items():
            if type(v) is int:
                v = str(v)   # (an integer's decimal text is unambiguous: {"n": 5} from jq is "5")
            # else text only: str() would store None as "None", True as "True", a dict as its repr
            if not isinstance(k, str) or not isinstance(v, str):
                bad = k if not isinstance(k, str) else v
                raise InvalidPropertyError(f"{said['properties']} {k!r}: a property's name and value are "
                                           f"strings (or integers), not {_json_type(bad)}", "properties", k)
            pairs.append((k, k, v))
    elif isinstance(given, Iterable) and not isinstance(given, (str, bytes, bytearray)):
        pairs = []
        for item in given:
            if not isinstance(item, str):
                raise InvalidPropertyError(f"{said['properties']} {item!r}: expected a NAME=VALUE string, not "
                                           f"{type(item).__name__}", "properties", item)
            sep = "=" if "=" in item else (":" if ":" in item else None)
            if sep is None:
                raise InvalidPropertyError(f"{said['properties']} {item!r}: expected NAME=VALUE", "properties", item)
            name, value = item.split(sep, 1)
            pairs.append((item, name, value))
    else:
        raise InvalidPropertyError(f"{said['properties_arg']} must be a dict of str, not {type(given).__name__}",
                                   "properties", given)
    out: dict[str, str] = {}
    for shown, name, value in pairs:
        why = property_problem(name, value)
        if why is not None:
            raise InvalidPropertyError(f"{said['properties']} {shown!r}: {why}", "properties", shown)
        _encodable(name, "properties", f"{said['properties']} name")
        _encodable(value, "properties", f"{said['properties']} value")
        out[name] = value
    return out


def _json_type(value: object) -> str:
    """How a value that is not a string is named in an error: by its JSON name when it came
    from JSON (``null``, ``true``, an object), else by its Python type."""
    names = {type(None): "null", bool: "a boolean", int: "an integer", float: "a fractional number",
             dict: "an object", list: "an array"}
    return names.get(type(value), type(value).__name__)


def _storable(value: object, arg: str, name: str) -> None:
    """A text value that may be stored in a property, or ``InvalidPropertyError``."""
    from store.log.record import has_property_separator
    if not isinstance(value, str):
        raise InvalidPropertyError(f"{name} must be a str, not {type(value).__name__}", arg, value)
    if has_property_separator(value):
        raise InvalidPropertyError(f"{name} may not contain the control characters \\x01 or \\x02", arg, value)
    _encodable(value, arg, name)


def _encodable(value: str, arg: str, name: str) -> None:
    """Text UTF-8 can encode (no lone surrogate), or ``InvalidPropertyError``: properties are
    stored as UTF-8."""
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidPropertyError(f"{name} {value!r}: not text UTF-8 can encode ({exc.reason} at position "
                                       f"{exc.start})", arg, value) from None


def check_msg_id(msg_id: object, what: str = "msg_id") -> str:
    """A unique id a sender gives its message: a resend keeping the id of the message it
    repeats (RocketMQ's client keeps a message's UNIQ_KEY when it has one), so that
    ``--dedup`` consumers skip it. The shape ``store.log.record.UniqKeyGenerator`` makes, 32
    hex digits, returned in upper case as ids are stored and looked up; an offset id
    (``offsetMsgId``) is refused, as ``msg show`` would take it for that record's address.
    Anything else: ``BadInputError`` (exit 5, as any malformed input)."""
    from store.errors import BadInputError
    from store.log.record import decode_offset_msg_id, is_msg_id
    if not isinstance(msg_id, str) or not is_msg_id(msg_id):
        shown = repr(msg_id) if isinstance(msg_id, str) else f"a {type(msg_id).__name__}"
        raise BadInputError(f"{what} must be a message id (32 hex digits, as consume --json's msgId), not {shown}")
    if decode_offset_msg_id(msg_id) is not None:
        raise BadInputError(f"{what} {msg_id!r} is an offset message id (offsetMsgId), not a message's unique id")
    return msg_id.upper()
