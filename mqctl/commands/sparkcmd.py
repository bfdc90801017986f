"""``mqctl query`` (SQL over topics) and ``mqctl export`` (a topic to Parquet or JSON files).

Both run Spark in-process through ``store.spark.datasource`` (PySpark is an optional extra): every
topic is a temporary view named after the topic, read by the ``mqctl`` data source. Spark
starts quietly (see ``mqctl/sparkutil.py``) and takes a few seconds to do so.
"""
from __future__ import annotations

import base64
import datetime as dt
import decimal
import json as jsonlib
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Iterable, Optional

import typer

from mqctl.options import JsonOpt, state

if TYPE_CHECKING:
    from store.log.broker import Store

MasterOpt = Annotated[str, typer.Option(
    "--master", metavar="URL", help="Spark master: local[N] (default local[2]), spark://HOST:PORT, yarn…")]
ConfOpt = Annotated[Optional[list[str]], typer.Option(
    "--conf", metavar="KEY=VALUE", help="Extra Spark setting (repeatable), e.g. spark.driver.memory=2g.")]
JSON_LINES_PER_WRITE = 1000

QUERY_HELP = """Run Spark SQL over the store: every topic is a view named after the topic.

Names with characters SQL does not allow in identifiers (%, |, -) need backquotes.
Columns: topic, queueId, queueOffset, msgId, keys, tags, properties, body (binary: use
CAST(body AS STRING)), bornTimestamp, storeTimestamp.

Examples:
  mqctl query "SELECT tags, count(*) AS n FROM orders GROUP BY tags ORDER BY n DESC"
  mqctl query "SELECT CAST(body AS STRING) AS body FROM \\`orders-eu\\` LIMIT 5" --json
"""

EXPORT_HELP = """Write a topic's messages to DIR as Parquet (default) or JSON-lines files.

Parquet keeps Spark's types (body binary, timestamps). JSON writes one object per line in the
shape `consume --json` prints (body as UTF-8 text or base64 with bodyEncoding, times in ms),
so `cat DIR/*.json | mqctl send OTHER --input json` sends the messages again. The export is a
snapshot: messages sent while it runs are not included.
"""


def register(app: typer.Typer) -> None:
    app.command("query", help=QUERY_HELP)(query)
    app.command("export", help=EXPORT_HELP)(export)


# -- query -----------------------------------------------------------------------------------

def query(
    ctx: typer.Context,
    sql: Annotated[str, typer.Argument(help="A Spark SQL statement.")],
    topic: Annotated[Optional[list[str]], typer.Option(
        "--topic", "-t", help="Only these topics become views (repeatable or comma separated).")] = None,
    all_: Annotated[bool, typer.Option(
        "--all", "-a", help="Also make views of system topics (%RETRY%…, %DLQ%…).")] = False,
    master: MasterOpt = "local[2]",
    conf: ConfOpt = None,
    json: JsonOpt = False,
) -> None:
    from mqctl import sparkutil
    store = state(ctx).store()
    topics = view_topics(store, topic, all_)
    extra = sparkutil.parse_conf(conf)
    with sparkutil.session(master, extra) as spark:
        run_query(spark, str(store.root.resolve()), topics, sql, json)


def run_query(spark: Any, root: str, topics: list[str], sql: str, json: bool) -> None:
    """Make the views, run ``sql`` and print its rows (NDJSON or a table) on stdout."""
    for line in register_views(spark, root, topics):
        _stderr(f"mqctl: warning: {line}")
    df = spark.sql(sql)
    if json:
        _emit_json(df)
    else:
        _emit_table(df)


def view_topics(store: "Store", wanted: list[str] | None, system: bool) -> list[str]:
    """The topics that become views: ``--topic`` ones (they must exist), else every user
    topic (and system topics with ``--all``)."""
    from store.names import is_system_topic, validate_any_topic
    existing = store.topics()
    if wanted:
        names = [n.strip() for item in wanted for n in item.split(",") if n.strip()]
        for name in names:
            validate_any_topic(name)
            store.topic(name)
        return sorted(set(names))
    return sorted(t for t in existing if system or not is_system_topic(t))


def quote_identifier(name: str) -> str:
    """A topic name as a SQL identifier: backquoted (topic names never hold a backquote)."""
    return "`" + name.replace("`", "``") + "`"


def register_views(spark: Any, root: str, topics: list[str]) -> list[str]:
    """One temporary view per topic, named after it; returns warnings for names that only
    differ in case (Spark's catalogue would let the later view replace the earlier)."""
    from store.spark.schema import SCHEMA
    warnings = []
    seen: dict[str, str] = {}
    for name in topics:
        other = seen.get(name.lower())
        if other is not None:
            warnings.append(f"topics {other!r} and {name!r} differ only in case; "
                            f"the view {name} is not created (use --topic to pick one)")
            continue
        seen[name.lower()] = name
        df = spark.read.format("mqctl").schema(SCHEMA).option("store", root).option("topic", name).load()
        df.createOrReplaceTempView(quote_identifier(name))
    return warnings


def _stderr(line: str) -> None:
    import sys
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


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


def _emit_json(df: Any) -> None:
    from mqctl.output import json_line, write_records
    names = _unique_names(df.columns)
    kinds = column_kinds(df)
    chunk: list[bytes] = []
    for row in df.toLocalIterator(prefetchPartitions=True):
        chunk.append(json_line(json_row(names, kinds, row)))
        if len(chunk) >= JSON_LINES_PER_WRITE:
            write_records(chunk)
            chunk = []
    if chunk:
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


def _emit_table(df: Any) -> None:
    from mqctl.output import Output
    from store.timeparse import format_time
    kinds = column_kinds(df)
    rows = []
    for row in df.collect():
        cells: dict[str, Any] = {}
        for i, (kind, value) in enumerate(zip(kinds, row)):
            ms = _time_ms(kind, value) if kind != "value" else None
            cells[str(i)] = format_time(ms) if ms is not None else human_value(value if kind == "value" else None)
        rows.append(cells)
    Output().table(rows, [(str(i), n) for i, n in enumerate(df.columns)])


# -- export ----------------------------------------------------------------------------------

JSON_EXPORT_COLUMNS = (
    "topic", "queueId", "queueOffset", "msgId", "keys", "tags", "properties",
    "CASE WHEN is_valid_utf8(body) THEN CAST(body AS STRING) ELSE base64(body) END AS body",
    "CASE WHEN is_valid_utf8(body) THEN NULL ELSE 'base64' END AS bodyEncoding",
    "unix_millis(bornTimestamp) AS bornTimestamp",
    "unix_millis(storeTimestamp) AS storeTimestamp",
)


def export(
    ctx: typer.Context,
    topic: Annotated[str, typer.Argument(help="Topic to export.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output directory (Spark writes part files).")],
    format_: Annotated[str, typer.Option("--format", "-f", help="parquet or json.")] = "parquet",
    overwrite: Annotated[bool, typer.Option(
        "--overwrite", help="Replace DIR if it already holds files.")] = False,
    master: MasterOpt = "local[2]",
    conf: ConfOpt = None,
) -> None:
    from mqctl import sparkutil
    from store.errors import ConflictError, UsageError
    from store.names import validate_any_topic
    fmt = format_.lower()
    if fmt not in ("parquet", "json"):
        raise UsageError(f"--format must be parquet or json, not {format_!r}")
    validate_any_topic(topic)
    out = out.expanduser()
    if out.exists() and not out.is_dir():
        raise ConflictError(f"{out} exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise ConflictError(f"{out} is not empty (give --overwrite to replace it)")
    store = state(ctx).store()
    ending, count = snapshot(store, topic)
    extra = sparkutil.parse_conf(conf)
    with sparkutil.session(master, extra) as spark:
        export_topic(spark, str(store.root.resolve()), topic, ending, out.resolve(), fmt)
    _stderr(f"exported {count} message{'s' if count != 1 else ''} of {topic} to {out} ({fmt})")


def export_topic(spark: Any, root: str, topic: str, ending: str, out: Path, fmt: str) -> None:
    """Write ``topic`` up to ``ending`` (offset JSON) to ``out`` as ``parquet`` or ``json``;
    an existing ``out`` (already checked by the caller) is replaced."""
    df = (spark.read.format("mqctl").option("store", root).option("topic", topic)
          .option("startingOffsets", "earliest").option("endingOffsets", ending).load())
    if fmt == "json":
        df = df.selectExpr(*JSON_EXPORT_COLUMNS)
    df.write.mode("overwrite" if out.exists() else "errorifexists").format(fmt).save(str(out))


def snapshot(store: "Store", topic: str) -> tuple[str, int]:
    """``endingOffsets`` JSON pinning every queue's current end, and the message count."""
    cfg = store.topic(topic)
    ends = {str(q): store.max_offset(topic, q) for q in range(cfg.queues)}
    count = sum(e - store.min_offset(topic, int(q)) for q, e in ends.items())
    return jsonlib.dumps({topic: ends}), count
