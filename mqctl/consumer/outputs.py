"""What an exactly-once stage's ``--exec`` handler printed, as the messages it sends on
(``mqctl consume SRC --exec CMD --to DST [--output json]``)."""
from __future__ import annotations

import binascii
import json as jsonlib
import os
from typing import TYPE_CHECKING, Any, Callable

from mqctl.msgargs import ENVELOPE_PLACE_FIELDS, REPORT_FIELDS, json_body
from store.errors import StoreError

if TYPE_CHECKING:
    from store import Outcome
    from store import StoredMessage as Message

# What a stage's output line may carry besides what it is: where an echoed envelope was, and
# what msg show / dlq list --json add to it
_IGNORED = ENVELOPE_PLACE_FIELDS | REPORT_FIELDS | {"queueId", "bodyEncoding"}


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
            body = json_body(obj)
        except (ValueError, binascii.Error) as exc:
            raise ValueError(f"line {n}: {exc}") from None
        out.append({**{k: v for k, v in obj.items() if k not in _IGNORED}, "body": body})
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


def emit_outputs(emit: Callable[[Message, list[Any]], None], last: Message, output: bytes,
                 json: bool) -> Outcome:
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
