"""The PySpark data source (format ``mqctl``): batch and streaming reads and writes over a
store, the staging of writes, and shipping the code to executors.

A Spark program uses it through these names (each resolved on first use: ``import store.spark``
does not import PySpark)::

    import store.spark
    spark = store.spark.local_session()             # or your session, then register(spark)
    df = spark.read.format("mqctl").option("store", DIR).option("topic", "orders").load()

``local_session``, ``register``, ``prepare_environment`` and ``session_conf`` are in
``store/spark/datasource.py`` (its docstring: columns, options, streaming), ``ship_archive``
(the code zipped for executors) in ``ship.py``; ``SCHEMA`` is the columns' Spark schema;
``mqctl_errors`` (a ``with`` block raising the store's error in place of Spark's exception
carrying it) and ``store_error`` (that error, found in the exception) in ``errors.py``.
"""
from __future__ import annotations

from typing import Any

_EXPORTS = {
    "local_session": "datasource", "register": "datasource", "prepare_environment": "datasource",
    "session_conf": "datasource", "ship_archive": "ship",
    "SCHEMA": "schema", "SCHEMA_DDL": "schema",
    "mqctl_errors": "errors", "store_error": "errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module 'store.spark' has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(f".{mod}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
