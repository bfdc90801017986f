"""The Spark jobs of ``mqctl query`` and ``mqctl export``: every topic a temporary view read by
the ``mqctl`` data source (``store.spark.datasource``), the query's rows printed (by
``mqctl/sparkrows.py``), a topic written up to a snapshot of its queues' ends. PySpark is
imported by the caller's session (``mqctl/sparkutil.py``), never here."""
from __future__ import annotations

import json as jsonlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mqctl.output import say

if TYPE_CHECKING:
    from store import Store


def run_query(spark: Any, root: str, topics: list[str], sql: str, json: bool, utc: bool = False) -> None:
    """Make the views, run ``sql`` and print its rows (NDJSON or a table, times local or with
    ``utc`` in UTC) on stdout."""
    was_sensitive = spark.conf.get(CASE_SENSITIVE, "false")
    try:
        for line in register_views(spark, root, topics):
            say(f"mqctl: warning: {line}")
        from mqctl.sparkrows import emit_json, emit_table
        from mqctl.sparkutil import output_starts
        df = spark.sql(sql)
        if json:
            emit_json(df, output_starts)
        else:
            emit_table(df, utc, output_starts)
    finally:   # (a caller's own session, in-process, is left as it was)
        spark.conf.set(CASE_SENSITIVE, was_sensitive)


def view_topics(store: Store, wanted: list[str] | None, system: bool) -> list[str]:
    """The topics that become views: ``--topic`` ones (they must exist), else every user
    topic (and system topics with ``--all``)."""
    from store import is_system_topic, validate_any_topic
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


CASE_SENSITIVE = "spark.sql.caseSensitive"


def register_views(spark: Any, root: str, topics: list[str]) -> list[str]:
    """One temporary view per topic, named after it; returns warnings. Spark's catalogue folds
    names to lower case unless ``spark.sql.caseSensitive``: where two topics' names differ only
    in case (topic names are case-sensitive), the session is made case-sensitive, so that each
    name reaches its own topic and never another's (column names then too: the warning says so)."""
    from store.spark import SCHEMA
    folded: dict[str, list[str]] = {}
    for name in topics:
        folded.setdefault(name.lower(), []).append(name)
    clashes = [names for names in folded.values() if len(names) > 1]
    warnings = []
    if clashes:
        spark.conf.set(CASE_SENSITIVE, "true")
        pairs = "; ".join(" and ".join(repr(n) for n in sorted(names)) for names in clashes)
        warnings.append(f"topics {pairs} differ only in case: names in this query (views and columns) "
                        f"are case-sensitive (--topic picks the views)")
    for name in topics:
        df = spark.read.format("mqctl").schema(SCHEMA).option("store", root).option("topic", name).load()
        df.createOrReplaceTempView(quote_identifier(name))
    return warnings


JSON_EXPORT_COLUMNS = (
    "topic", "queueId", "queueOffset", "msgId", "keys", "tags", "properties",
    "CASE WHEN is_valid_utf8(body) THEN CAST(body AS STRING) ELSE base64(body) END AS body",
    "CASE WHEN is_valid_utf8(body) THEN NULL ELSE 'base64' END AS bodyEncoding",
    "unix_millis(bornTimestamp) AS bornTimestamp",
    "unix_millis(storeTimestamp) AS storeTimestamp",
)


def export_topic(spark: Any, root: str, topic: str, ending: str, out: Path, fmt: str) -> None:
    """Write ``topic`` up to ``ending`` (offset JSON) to ``out`` as ``parquet`` or ``json``;
    an existing ``out`` (already checked by the caller) is replaced."""
    df = (spark.read.format("mqctl").option("store", root).option("topic", topic)
          .option("startingOffsets", "earliest").option("endingOffsets", ending).load())
    if fmt == "json":
        df = df.selectExpr(*JSON_EXPORT_COLUMNS)
    df.write.mode("overwrite" if out.exists() else "errorifexists").format(fmt).save(str(out))


def snapshot(store: Store, topic: str) -> tuple[str, int]:
    """``endingOffsets`` JSON pinning every queue's current end, and the message count."""
    cfg = store.topic(topic)
    ends = {str(q): store.max_offset(topic, q) for q in range(cfg.queues)}
    count = sum(e - store.min_offset(topic, int(q)) for q, e in ends.items())
    return jsonlib.dumps({topic: ends}), count
