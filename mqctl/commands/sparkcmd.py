"""``mqctl query`` (SQL over topics) and ``mqctl export`` (a topic to Parquet or JSON files).

Both run Spark in-process through ``store.spark.datasource`` (PySpark is an optional extra): every
topic is a temporary view named after the topic, read by the ``mqctl`` data source. Spark
starts quietly (see ``mqctl/sparkutil.py``) and takes a few seconds to do so; rows are printed
by ``mqctl/sparkrows.py``. The jobs themselves (views, the query, the export) are
``mqctl/sparkjobs.py``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, Optional

import typer

from mqctl.options import JsonOpt, complete_topic, state
from mqctl.output import say
from mqctl.sparkjobs import export_topic, run_query, snapshot, view_topics

MasterOpt = Annotated[str, typer.Option(
    "--master", metavar="URL", help="Spark master: local[N] (default local[2]), spark://HOST:PORT, yarn…")]
ConfOpt = Annotated[Optional[list[str]], typer.Option(
    "--conf", metavar="KEY=VALUE", help="Extra Spark setting (repeatable), e.g. spark.driver.memory=2g.")]

QUERY_HELP = """Run Spark SQL over the store's topics.

Every topic is a view named after it; names with characters SQL does not allow in
identifiers (%, |, -) need backquotes. Columns: topic, queueId, queueOffset, msgId, keys,
tags, properties, body (binary: use CAST(body AS STRING)), bornTimestamp, storeTimestamp.
Times in the table are local (--utc for UTC); --json gives them in ms since the epoch. Spark
takes a few seconds to start; a progress bar shows on a terminal.

Examples:
  mqctl query "SELECT tags, count(*) AS n FROM orders GROUP BY tags"
  mqctl query 'SELECT CAST(body AS STRING) FROM `orders-eu` LIMIT 5'
  mqctl query "SELECT msgId, keys FROM orders" --json"""

EXPORT_HELP = """Write a topic's messages to Parquet or JSON files.

Spark writes part files into DIR. Parquet keeps Spark's types (body binary, timestamps).
JSON writes one object per line in the shape `consume --json` prints (body as UTF-8 text or
base64 with bodyEncoding, times in ms), so `mqctl send OTHER --input json` sends them again.
The export is a snapshot: messages sent while it runs are not included. A progress bar shows
on a terminal.

Examples:
  mqctl export orders --out /data/orders
  mqctl export orders --out orders-json --format json
  cat orders-json/*.json | mqctl send orders-copy --input json"""


def register(app: typer.Typer) -> None:
    app.command("query", help=QUERY_HELP)(query)
    app.command("export", help=EXPORT_HELP)(export)


def query(
    ctx: typer.Context,
    sql: Annotated[str, typer.Argument(metavar="SQL", help="A Spark SQL statement.", show_default=False)],
    topic: Annotated[Optional[list[str]], typer.Option(
        "--topic", metavar="TOPIC", autocompletion=complete_topic,
        help="Only these topics become views (repeatable or comma separated).")] = None,
    all_: Annotated[bool, typer.Option(
        "--all", "-a", help="Also make views of system topics (%RETRY%…, %DLQ%…).")] = False,
    master: MasterOpt = "local[2]",
    conf: ConfOpt = None,
    json: JsonOpt = False,
) -> None:
    from mqctl import sparkutil
    st = state(ctx)
    store = st.store()
    topics = view_topics(store, topic, all_)
    extra = sparkutil.parse_conf(conf)
    with sparkutil.session(master, extra) as spark:
        run_query(spark, str(store.root.resolve()), topics, sql, json, utc=st.utc)


def export(
    ctx: typer.Context,
    topic: Annotated[str, typer.Argument(metavar="TOPIC", help="Topic to export.", autocompletion=complete_topic,
                                         show_default=False)],
    out: Annotated[Path, typer.Option("--out", metavar="DIR", help="Output directory (Spark writes part files).",
                                      show_default=False)],
    format_: Annotated[Literal["parquet", "json"], typer.Option("--format", "-f", help="File format.")] = "parquet",
    overwrite: Annotated[bool, typer.Option(
        "--overwrite", help="Replace DIR if it already holds files.")] = False,
    master: MasterOpt = "local[2]",
    conf: ConfOpt = None,
) -> None:
    from mqctl import sparkutil
    from mqctl.output import plural
    from store import validate_any_topic
    from store.errors import ConflictError
    validate_any_topic(topic)
    out = out.expanduser()
    if out.exists() and not out.is_dir():
        raise ConflictError(f"{out} exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise ConflictError(f"{out} is not empty (give --overwrite to replace it)")
    store = state(ctx).store()
    _can_make(out)
    ending, count = snapshot(store, topic)
    extra = sparkutil.parse_conf(conf)
    with sparkutil.session(master, extra) as spark:
        export_topic(spark, str(store.root.resolve()), topic, ending, out.resolve(), format_)
    say(f"exported {plural(count, 'message')} of {topic} to {out} ({format_})")


def _can_make(out: Path) -> None:
    """Fail before Spark starts where ``out`` cannot be made (a parent that is a file, no
    permission, a read-only file system): Spark would fail only inside its job, after its
    start, in one long line. The directories made to find out are removed again."""
    from store.errors import StoreIOError
    missing = []
    at = out.absolute()
    while not at.exists() and at != at.parent:
        missing.append(at)
        at = at.parent
    made: list[Path] = []
    try:
        for d in reversed(missing):
            d.mkdir()
            made.append(d)
    except OSError as exc:
        raise StoreIOError(f"cannot create {out}: {exc.strerror or exc}") from None
    finally:
        for d in reversed(made):
            try:
                d.rmdir()
            except OSError:
                pass
