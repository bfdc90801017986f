"""How ``mqctl query`` prints Spark rows: NDJSON (times in ms since the epoch, binary as
UTF-8 text or base64 beside a ``<name>Encoding`` field, as ``consume --json``) or a table for
people (times local, or UTC with ``--utc``)."""
from __future__ import annotations

import base64
import datetime as dt
import decimal
import json as jsonlib
from typing import Any, Callable, Iterable

JSON_LINES_PER_WRITE = 1000


def column_kinds(df: Any) -> list[str]:
    """``local`` for TIMESTAMP columns (PySpark returns them as naive local times), ``utc``
    for TIMESTAMP_NTZ, ``value`` for the rest."""
    from pyspark.sql.types import TimestampNTZType, TimestampType
    return ["local" if isinstance(f.dataType, TimestampType) else
            "utc" if isinstance(f.dataType, TimestampNTZType) else "value"
            for f in df.schema.fields]


def _time_ms(kind: str, value: Any) -> int | None:
    if value is None:
        return None
    return _local_ms(value) if kind == "local" else _utc_ms(value)


def _local_ms(value: dt.datetime) -> int:
    # PySpark hands TIMESTAMP values to Python as naive local times.
    return int(round(value.timestamp() * 1000))


def _utc_ms(value: dt.datetime) -> int:
    return int(round(value.replace(tzinfo=dt.timezone.utc).timestamp() * 1000))


def _json_value(value: Any) -> Any:
    """A collected value as plain JSON (rows and maps become objects, bytes text or base64)."""
    from pyspark.sql import Row
    if isinstance(value, Row):
        return {k: _json_value(v) for k, v in value.asDict().items()}
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    if isinstance(value, (bytes, bytearray)):
        return _text_or_base64(bytes(value))[0]
    if isinstance(value, dt.datetime):
        return _local_ms(value) if value.tzinfo is None else int(value.timestamp() * 1000)
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    return value


def _text_or_base64(data: bytes) -> tuple[str, bool]:
    try:
        return data.decode("utf-8"), False
    except UnicodeDecodeError:
        return base64.b64encode(data).decode("ascii"), True


def _unique_names(names: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for name in names:
        n = seen.get(name, 0)
        seen[name] = n + 1
        out.append(name if n == 0 else f"{name}_{n + 1}")
    return out


def json_row(names: list[str], kinds: list[str], row: Iterable[Any]) -> dict[str, Any]:
    """One result row as an NDJSON object: times in ms since the epoch; a binary value that is
    not UTF-8 is base64 with ``<name>Encoding: "base64"`` beside it (as ``consume --json``)."""
    obj: dict[str, Any] = {}
    for name, kind, value in zip(names, kinds, row):
        if kind != "value":
            obj[name] = _time_ms(kind, value)
        elif isinstance(value, (bytes, bytearray)):
            text, b64 = _text_or_base64(bytes(value))
            obj[name] = text
            if b64:
                obj[f"{name}Encoding"] = "base64"
        else:
            obj[name] = _json_value(value)
    return obj


def emit_json(df: Any, before_output: Callable[[], None] = lambda: None) -> None:
    """The rows of ``df`` as NDJSON on stdout, written as they arrive; ``before_output`` runs
    before the first write."""
    from mqctl.output import json_line, write_records
    names = _unique_names(df.columns)
    kinds = column_kinds(df)
    chunk: list[bytes] = []
    started = False
    for row in df.toLocalIterator(prefetchPartitions=True):
        chunk.append(json_line(json_row(names, kinds, row)))
        if len(chunk) >= JSON_LINES_PER_WRITE:
            if not started:
                before_output()
                started = True
            write_records(chunk)
            chunk = []
    if chunk:
        if not started:
            before_output()
        write_records(chunk)


def human_value(value: Any) -> Any:
    """A collected value as table text (None stays None: the table shows ``-``)."""
    from pyspark.sql import Row
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray)):
        text, b64 = _text_or_base64(bytes(value))
        return f"base64:{text}" if b64 else text
    if isinstance(value, Row):
        return jsonlib.dumps(_json_value(value), ensure_ascii=False)
    if isinstance(value, dict):
        return ",".join(f"{k}={human_value(v)}" for k, v in value.items()) or None
    if isinstance(value, (list, tuple)):
        return [human_value(v) for v in value]
    return value


def emit_table(df: Any, utc: bool, before_output: Callable[[], None] = lambda: None) -> None:
    """The rows of ``df`` as a table for people; ``before_output`` runs once they are all
    collected, before the table is printed."""
    from mqctl.output import Output
    from store import format_local
    kinds = column_kinds(df)
    rows = []
    for row in df.collect():
        cells: dict[str, Any] = {}
        for i, (kind, value) in enumerate(zip(kinds, row)):
            ms = _time_ms(kind, value) if kind != "value" else None
            cells[str(i)] = format_local(ms, utc) if ms is not None else human_value(value if kind == "value" else None)
        rows.append(cells)
    before_output()
    out = Output()
    if not rows:   # like every other listing: a line on stderr, nothing on stdout
        out.info(f"no rows (columns: {', '.join(df.columns)})")
        return
    out.table(rows, [(str(i), n) for i, n in enumerate(df.columns)])
