"""What an exactly-once stage's ``--exec`` handler printed, as the messages it sends on
(``mqctl consume SRC --exec CMD --to DST [--output json]``)."""
from __future__ import annotations

import base64
import binascii
import json as jsonlib
import os
from typing import TYPE_CHECKING, Any, Callable

from store.errors import StoreError

if TYPE_CHECKING:
    from store import Outcome
    from store import StoredMessage as Message

_ENVELOPE_ONLY = ("topic", "queueId", "queueOffset", "msgId", "offsetMsgId", "bornTimestamp", "storeTimestamp",
                  "reconsumeTimes", "commitLogOffset", "bornHost")


def parse_outputs(data: bytes, json: bool) -> list[Any]:
    """``--exec --to``: a handler's stdout as messages. Lines: each non-blank line is a body.
    ``--output json``: each non-blank line one object with ``body`` (``bodyEncoding``
    ``base64`` for bytes), ``keys``, ``tags``, ``shardingKey`` and ``properties``; the other
    fields of the ``consume --json`` envelope (where a message was) are ignored, so a handler
    may echo envelopes. ValueError names the line."""
    lines = data.split(b"\n")
    if not json:
        return [line for line in lines if line.strip()]
    out: list[Any] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = jsonlib.loads(line)
            if not isinstance(obj, dict):
                raise ValueError("not a JSON object")
            body = obj.get("body")
            if not isinstance(body, str):
                raise ValueError("'body' is missing or not a string")
            enc = obj.pop("bodyEncoding", None)
            if enc not in (None, "base64", "utf-8", "utf8"):
                raise ValueError(f"unknown bodyEncoding {enc!r}")
            obj["body"] = base64.b64decode(body, validate=True) if enc == "base64" else body.encode()
            for k in _ENVELOPE_ONLY:
                obj.pop(k, None)
        except (ValueError, binascii.Error) as exc:
            raise ValueError(f"line {n}: {exc}") from None
        out.append(obj)
    return out


def read_captured(fd: int) -> bytes:
    """Everything a handler wrote to its captured stdout (a file: read from its start)."""
    parts: list[bytes] = []
    pos = 0
    while True:
        chunk = os.pread(fd, 1 << 20, pos)
        if not chunk:
            return b"".join(parts)
        parts.append(chunk)
        pos += len(chunk)


def emit_outputs(emit: Callable[["Message", list[Any]], None], last: "Message", output: bytes,
                 json: bool) -> "Outcome":
    """A handler's stdout as the outputs of its batch (given with the batch's ``last``
    message, which settles it); output that cannot be read fails the batch (nothing of it is
    written), like a non-zero exit."""
    try:
        outs = parse_outputs(output, json)
    except ValueError as exc:
        return False, f"handler output {exc}"
    try:
        emit(last, outs)
    except StoreError as exc:
        return False, f"handler output: {exc}"
    return True, ""
