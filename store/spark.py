"""Spark data source ``mqctl``: topics of a store as DataFrames, batch and streaming.

Usage (PySpark >= 4.2 and pyarrow are an optional extra: ``pip install 'mqctl[spark]'``)::

    from store.spark import register
    register(spark)
    df = spark.read.format("mqctl").option("store", DIR).option("topic", "orders").load()
    df.write.format("mqctl").mode("append").option("store", DIR).option("topic", "copy").save()

Columns (:data:`SCHEMA`): ``topic`` string, ``queueId`` int, ``queueOffset`` bigint, ``msgId``
string (the unique key, as ``consume --json`` prints it), ``keys`` array<string>, ``tags``
string, ``properties`` map<string,string> (user properties only), ``body`` binary,
``bornTimestamp`` and ``storeTimestamp`` timestamps. ``keys`` is an array because the store
keeps a list of keys and ``consume --json`` prints a list; ``write`` accepts either form.

Reading (``read`` and ``readStream``) goes through :meth:`Store.pull`: one Spark partition per
(topic, queue), rows handed to Spark as Arrow record batches. A record that fails its CRC
raises :class:`~store.errors.DataError`; nothing damaged is ever returned.

Options (keys are case-insensitive; every value is a string):

==========================  =========================================================
``store`` (or ``load(p)``)   the store directory (required)
``topic``                    ``*`` (every user topic; the default for reads) or a comma
                             list; for writes one topic (else a ``topic`` column)
``startingOffsets``          ``earliest`` | ``latest`` | JSON ``{"T":{"0":5}}`` | a time
                             (13-digit ms, 10-digit s, ISO-8601; no offset means UTC).
                             Batch default ``earliest``; stream default ``latest``.
``endingOffsets``            batch only: ``latest`` (default) | ``earliest`` | JSON | time
``tags``                     tag filter ``A || B`` (``*`` = all)
``maxMessagesPerTrigger``    stream only: cap on messages per micro-batch
``flush``                    write only: ``async`` (default) or ``sync`` (fsync)
``sinkId``                   writeStream only: the idempotency ledger's name (default:
                             the query id in ``checkpointLocation/metadata``)
==========================  =========================================================

In offset JSON, ``-2`` means earliest and ``-1`` latest; a queue it does not name starts at
its earliest offset (``startingOffsets``) or ends at its latest (``endingOffsets``). A time
resolves per queue with :meth:`Store.search_offset`: the first message stored at or after it.

Writing (``write`` and ``writeStream``, append only): columns ``body`` (string or binary),
optional ``keys`` (comma-separated string or array), ``tags``, ``shardingKey``, ``queueId``,
``properties`` (map), ``topic`` (when no ``topic`` option) and ``bornTimestamp``; the other
columns of :data:`SCHEMA` are ignored, so a DataFrame read from one store can be written to
another. Each task validates its rows and stages them under ``STORE/spark-staging/<job>/``
(directories 0700, files 0600); nothing is visible until the job commits, when the driver
publishes the staged rows with :meth:`Store.put` while holding the store's write lock (so the
batch lands contiguously and other writers wait). A failed job's ``abort`` removes the staging.

A streaming sink commits each micro-batch exactly once, keyed by (sink id, batch id), with a
ledger ``STORE/spark-sinks/<sinkId>.json``: before publishing batch N it records
``publishing: N``, after publishing ``lastBatchId: N``. Batch ids at or below ``lastBatchId``
are skipped. Each message of a streamed batch gets a deterministic unique key (a digest of the
sink id, the batch id, the message's content and its occurrence number among identical
messages of the batch), so when Spark replays batch N after a crash *during* its publish
(the ledger still says ``publishing: N``), the messages already stored are found through the
key index and skipped. The replayed batch must hold the same messages, which Spark guarantees
for deterministic queries over replayable sources such as this one.

Modules: this one registers the source and builds sessions; :mod:`store.sparkschema` holds the
columns, :mod:`store.sparkread` the read options and readers, :mod:`store.sparkwrite` row
validation, staging and the batch writer, :mod:`store.sparksink` the streaming sink and its
ledger. The names other code imports from here are re-exported.

These modules must never import ``mqctl``: the store is usable without the CLI.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Mapping

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.types import StructType

from .broker import Store
from .errors import UsageError
from .sparkread import (
    ColumnPlan, MqctlReader, MqctlStreamReader, ReadOptions, fair_share, parse_offsets, parse_tags,
)
from .sparkschema import COLUMNS, SCHEMA, SCHEMA_DDL
from .sparksink import SINKS_DIR, MqctlStreamWriter, SinkLedger, commit_stream_batch, default_sink_id
from .sparkwrite import (
    STAGING_DIR, MqctlWriter, StagedPart, WriteOptions, check_write_schema, write_staged,
)

FORMAT_NAME = "mqctl"

# The Spark session settings of the reference recipe (local mode, quiet, small and fast).
SESSION_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
}
# Only for local masters: a cluster keeps Spark's defaults (sized for many cores).
LOCAL_CONF: dict[str, str] = {"spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2"}


# -- registration and sessions ----------------------------------------------------------------

def register(spark: Any, ship_code: bool = False) -> None:
    """Make ``format("mqctl")`` available to ``spark`` (one registration per session).

    Executors import this module by name, so the ``store`` package must be importable there:
    installed in the workers' Python (``PYSPARK_PYTHON``), or, with ``ship_code``, zipped and
    sent with ``SparkContext.addPyFile`` (pyarrow must still be installed on the workers).
    """
    if ship_code:
        spark.sparkContext.addPyFile(_zip_store_package())
    spark.dataSource.register(MqctlDataSource)


def _zip_store_package() -> str:
    import tempfile
    import zipfile
    pkg = Path(__file__).resolve().parent
    fd, path = tempfile.mkstemp(prefix="mqctl-store-", suffix=".zip")
    os.close(fd)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for f in sorted(pkg.glob("*.py")):
            zf.write(f, f"store/{f.name}")
    return path


def prepare_environment(local: bool = True) -> None:
    """Environment the Spark launcher reads, unless already set: workers run this
    interpreter (so they can import ``store``); a local session binds to loopback. A cluster
    whose workers run another interpreter sets ``PYSPARK_PYTHON`` itself."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if local:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def session_conf(master: str = "local[2]", log_level: str = "ERROR",
                 extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The settings :func:`local_session` uses, for callers that build sessions themselves."""
    conf = {"spark.master": master, "spark.app.name": "mqctl", **SESSION_CONF,
            **(LOCAL_CONF if master.startswith("local") else {}), "spark.log.level": log_level}
    conf.update(extra or {})
    return conf


def local_session(master: str = "local[2]", log_level: str = "ERROR",
                  extra: Mapping[str, str] | None = None) -> Any:
    """A SparkSession configured by the reference recipe, with the data source registered."""
    from pyspark.sql import SparkSession
    prepare_environment(local=master.startswith("local"))
    builder = SparkSession.builder
    for key, value in session_conf(master, log_level, extra).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark


def _reject_overwrite(overwrite: bool) -> None:
    if overwrite:
        raise UsageError("mqctl topics are append-only: use mode('append') "
                         "(or outputMode('append') for a stream)")


# -- the data source --------------------------------------------------------------------------

class MqctlDataSource(DataSource):
    """``format("mqctl")`` for read, readStream, write and writeStream."""

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> StructType:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return MqctlReader(ReadOptions.parse(self.options, stream=False), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return MqctlStreamReader(ReadOptions.parse(self.options, stream=True), schema)

    def writer(self, schema: StructType, overwrite: bool) -> MqctlWriter:
        _reject_overwrite(overwrite)
        opts = WriteOptions.parse(self.options)
        check_write_schema(schema, opts.topic)
        Store.open(opts.store, create=True).close()
        return MqctlWriter(opts)

    def streamWriter(self, schema: StructType, overwrite: bool) -> MqctlStreamWriter:
        _reject_overwrite(overwrite)
        opts = WriteOptions.parse(self.options)
        check_write_schema(schema, opts.topic)
        Store.open(opts.store, create=True).close()
        return MqctlStreamWriter(opts, default_sink_id(self.options))


__all__ = ["register", "local_session", "session_conf", "prepare_environment", "MqctlDataSource",
           "SCHEMA", "SCHEMA_DDL", "COLUMNS",
           # re-exported from the modules that own them, for code that imports them from here
           "ColumnPlan", "fair_share", "parse_offsets", "parse_tags",
           "STAGING_DIR", "StagedPart", "WriteOptions", "write_staged",
           "SINKS_DIR", "SinkLedger", "commit_stream_batch"]
