"""Spark data source ``mqctl``: topics of a store as DataFrames, batch and streaming.

Usage (PySpark >= 4.2 and pyarrow are an optional extra: ``pip install 'mqctl[spark]'``)::

    from store.spark.datasource import register
    register(spark)
    df = spark.read.format("mqctl").option("store", DIR).option("topic", "orders").load()
    df.write.format("mqctl").mode("append").option("store", DIR).option("topic", "copy").save()

Columns (:data:`SCHEMA`): ``topic`` string, ``queueId`` int, ``queueOffset`` bigint, ``msgId``
string (the unique key, as ``consume --json`` prints it), ``keys`` array<string>, ``tags``
string, ``properties`` map<string,string> (user properties only), ``body`` binary,
``bornTimestamp`` and ``storeTimestamp`` timestamps. ``keys`` is an array because the store
keeps a list of keys and ``consume --json`` prints a list; ``write`` accepts either form.

Reading (``read`` and ``readStream``) goes through the bulk reads of ``store.log.arraycolumns`` (numpy,
a whole run of a queue at once) with ``store.log.columns.pull_columns`` as the exact fallback: one
Spark partition per (topic, queue) unless ``minPartitions`` asks for more, rows handed to Spark
as Arrow record batches holding only the columns of the read's schema (a user schema such as
``body BINARY`` is how to read less: Python sources get no column pruning). A record that fails its CRC
raises :class:`~store.errors.DataError`; nothing damaged is ever returned.

Options (keys are case-insensitive; every value is a string; an option no mode knows fails,
naming the valid ones):

==========================  =========================================================
``store`` (or ``load(p)``)   the store directory (required); it must exist...
``create``                   ...unless ``true``: then a missing store is created
``topic``                    ``*`` (every user topic; the default for reads) or a comma
                             list; for writes one topic (else a ``topic`` column)
``startingOffsets``          ``earliest`` | ``latest`` | JSON ``{"T":{"0":5}}`` | a time in
                             the CLI's grammar (13-digit ms, 10-digit s, ``now``, ``-1h``,
                             ISO-8601; no offset means UTC).
                             Batch default ``earliest``; stream default ``latest``.
``endingOffsets``            batch only: ``latest`` (default) | ``earliest`` | JSON | time
``tags``                     tag filter ``A || B`` (``*`` = all)
``minPartitions``            cut queues into at least this many partitions
                             (default: one per queue)
``maxMessagesPerTrigger``    stream only: cap on messages per micro-batch
``waitForTopic``             stream only: ``true`` lets a named topic not exist yet (else
                             the stream fails: a misspelled topic would never have data)
``failOnDataLoss``           ``true`` (default): fail when retention removed messages the
                             read was due to read, or a stream's queue is not the one its
                             checkpoint counted (its topic made again); ``false``: skip
                             them, read such a queue from its start, with a warning
``shape``                    ``kafka``: Kafka's columns (:mod:`store.spark.kafka`), read
                             and write
``subscribe``, ``maxOffsetsPerTrigger``, ``startingTimestamp``, ``endingTimestamp``: Kafka's
                             names for ``topic``, ``maxMessagesPerTrigger`` and a time
``flush``                    write only: ``async`` (default) or ``sync`` (fsync)
``sinkId``                   writeStream only: the idempotency ledger's name (default:
                             the query id in ``checkpointLocation/metadata``)
==========================  =========================================================

In offset JSON, ``-2`` means earliest and ``-1`` latest; a queue it does not name starts at
its earliest offset (``startingOffsets``) or ends at its latest (``endingOffsets``). A time
resolves per queue with :meth:`Store.search_offset`: the first message stored at or after it.

Writing (``write`` and ``writeStream``, append only: ``.mode("append")``): columns ``body``
(string or binary), optional ``keys`` (comma-separated string or array), ``tags``,
``shardingKey``, ``queueId``, ``properties`` (map), ``topic`` (when no ``topic`` option) and
``bornTimestamp``; the other columns of :data:`SCHEMA` are ignored, so a DataFrame read from
one store can be written to another. Each task validates its rows and stages them under
``STORE/spark-staging/<job>/`` (directories 0700, files 0600; see :mod:`store.spark.staging`
for the owner record and the sweep of what killed jobs leave); nothing is visible until the
job commits, when the driver publishes the staged rows with :meth:`Store.put` in chunks of
about 20 ms each, taking the store's write lock per chunk (:func:`store.spark.write.publish`),
so other writers wait for one chunk at most. A failed job's ``abort`` removes the staging.

A streaming sink commits each micro-batch exactly once, keyed by (sink id, batch id), with a
ledger ``STORE/spark-sinks/<sinkId>.json`` (``lastBatchId``, and while a batch is published
``publishing``, ``done`` and ``digest``): see :mod:`store.spark.sink`. A replay after a crash
mid-publish skips the recorded part without key-index lookups.

Modules: this one registers the source and builds sessions; :mod:`store.spark.schema` holds the
columns, :mod:`store.spark.read` the read options and readers, :mod:`store.spark.write` row
validation, staging and the batch writer, :mod:`store.spark.sink` the streaming sink and its
ledger. Other code imports from here only what is defined here (``__all__``).

These modules must never import ``mqctl``: the store is usable without the CLI.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Mapping

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.types import StructType

from store.errors import UsageError
from store.spark.errors import traceback_conf
from store.spark.jvm import add_to_session, build_jar
from store.spark.kafka import KAFKA_SCHEMA, check_kafka_write, write_schema
from store.spark.options import (
    ALL_READ_OPTIONS,
    ReadOptions,
    check_options,
    open_store,
    parse_shape,
    select_topics,
    store_option,
)
from store.spark.read import MqctlReader, MqctlStreamReader
from store.spark.schema import SCHEMA
from store.spark.ship import ship_code_to
from store.spark.sink import MqctlStreamWriter, default_sink_id
from store.spark.write import WRITE_OPTIONS, MqctlWriter, WriteOptions, check_write_schema

STREAM_WRITE_OPTIONS = (*WRITE_OPTIONS, "sinkid", "checkpointlocation")

FORMAT_NAME = "mqctl"

# The Spark session settings of the reference recipe (local mode, quiet, small). Not the quick
# compiler (-XX:TieredStopAtLevel=1): in local mode the executors run in the driver's JVM, so
# every job ran on it (JSON 11.3 s instead of 4.2 s, Parquet 0.98 s instead of 0.74 s). Not the
# Unix-socket transport to Python workers either: its daemon printed BrokenPipeError
# tracebacks in normal runs, and batch reads no longer go through Python workers.
SESSION_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.extraJavaOptions": "-XX:+UseSerialGC",
}
# Only for local masters: a cluster keeps Spark's defaults (sized for many cores).
LOCAL_CONF: dict[str, str] = {"spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2"}


# -- registration and sessions ----------------------------------------------------------------

def register(spark: Any, ship_code: bool = False) -> None:
    """Make ``format("mqctl")`` available to ``spark`` (one registration per session).

    Spark's Python processes import this module by name, so the ``store`` package must be
    importable by the workers' Python (``PYSPARK_PYTHON``) *and* by the driver-side Python
    processes that plan reads and streams. Either install mqctl there (``pip install
    mqctl[spark]``, or a wheel from ``pip wheel .``), or pass ``ship_code=True``: the ``store``
    package and its pure-Python dependencies (portalocker, sortedcontainers) are zipped once
    per content into a cache directory (see :mod:`store.spark.ship`), sent to the executors with
    ``addPyFile``, and put on the ``PYTHONPATH`` Spark gives its driver-side planners (which do
    not see ``addPyFile`` files). pyarrow and numpy must still be installed on the workers.
    Under Spark Connect ``ship_code`` is refused: install mqctl on the server instead.

    With a JDK, ``format("mqctl")`` is the JVM reader (:mod:`store.spark.jvm`: compiled once,
    then cached) for batch reads, and this Python source, registered as ``mqctl_python``,
    serves writes and streams through it (and reads given ``.option("reader", "python")``).
    Without one, this source is ``mqctl`` itself.
    """
    if ship_code:
        ship_code_to(spark)
    # the Python reader serves topic/queueId predicates itself (MqctlReader.pushFilters),
    # which PySpark allows only with this set
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    jar = build_jar() if use_jvm() else None
    if jar is not None and add_to_session(spark, jar):
        spark.conf.set("spark.mqctl.python", sys.executable)
        spark.conf.set("spark.mqctl.pythonpath", str(Path(__file__).resolve().parents[2]))
        spark.dataSource.register(MqctlPythonSource)
    else:
        spark.dataSource.register(MqctlDataSource)


def use_jvm() -> bool:
    """The JVM reader unless ``MQCTL_SPARK_READER=python``."""
    return os.environ.get("MQCTL_SPARK_READER", "").strip().lower() != "python"


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
    conf = {"spark.master": master, "spark.app.name": "mqctl", **SESSION_CONF, **traceback_conf(),
            **(LOCAL_CONF if master.startswith("local") else {}), "spark.log.level": log_level}
    conf.update(extra or {})
    return _with_jar(conf)


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


def _with_jar(conf: dict[str, str]) -> dict[str, str]:
    """``conf`` with the JVM reader's jar in ``spark.jars`` (read when the JVM starts)."""
    jar = build_jar() if use_jvm() else None
    if jar is not None:
        jars = [j for j in conf.get("spark.jars", "").split(",") if j]
        conf["spark.jars"] = ",".join([*jars, str(jar)])
    return conf


def _as_written(schema: StructType, opts: WriteOptions) -> StructType:
    """The store's columns a write's DataFrame becomes (Kafka's, with ``shape`` kafka)."""
    if opts.shape != "kafka":
        return schema
    check_kafka_write(schema)
    return write_schema(schema)


def _reject_overwrite(overwrite: bool) -> None:
    if overwrite:
        raise UsageError('mqctl topics are append-only: use .mode("append") '
                         '(or .outputMode("append") for a stream)')


# -- the data source --------------------------------------------------------------------------

class MqctlDataSource(DataSource):
    """``format("mqctl")`` for read, readStream, write and writeStream."""

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> StructType:
        # Called when a read or readStream is loaded (not for writes): refuse an option no
        # mode knows, and a missing store, before a stream starts and fails in the background.
        check_options(self.options, ALL_READ_OPTIONS, "read or readStream")
        if self.options.get("create", "").strip().lower() not in ("true", "1", "yes"):
            open_store(store_option(self.options), False, recover=False).close()
        return KAFKA_SCHEMA if parse_shape(self.options) == "kafka" else SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = ReadOptions.parse(self.options, stream=False)
        opts.open_store().close()
        return MqctlReader(opts, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        opts = ReadOptions.parse(self.options, stream=True)
        with opts.open_store() as store:
            # A misspelled topic would otherwise be an empty stream forever.
            select_topics(store, opts.topics, must_exist=not opts.wait_for_topic)
        return MqctlStreamReader(opts, schema)

    def writer(self, schema: StructType, overwrite: bool) -> MqctlWriter:
        _reject_overwrite(overwrite)
        opts = WriteOptions.parse(self.options)
        check_write_schema(_as_written(schema, opts), opts.topic)
        open_store(opts.store, opts.create).close()
        return MqctlWriter(opts)

    def streamWriter(self, schema: StructType, overwrite: bool) -> MqctlStreamWriter:
        _reject_overwrite(overwrite)
        opts = WriteOptions.parse(self.options, STREAM_WRITE_OPTIONS, "writeStream")
        check_write_schema(_as_written(schema, opts), opts.topic)
        open_store(opts.store, opts.create).close()
        return MqctlStreamWriter(opts, default_sink_id(self.options))


class MqctlPythonSource(MqctlDataSource):
    """The same source under the name the JVM reader hands writes and streams to."""

    @classmethod
    def name(cls) -> str:
        return "mqctl_python"


__all__ = ["register", "local_session", "session_conf", "prepare_environment", "MqctlDataSource"]
