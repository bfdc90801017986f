"""The PySpark data source (format ``mqctl``): batch and streaming reads and writes over a
store, the staging of writes, and shipping the code to executors.

The public entry points::

    from store.spark import register, local_session
    spark = local_session()          # or your own SparkSession, then register(spark)
    spark.read.format("mqctl").option("topic", "orders").load()

``register``, ``local_session`` and ``prepare_environment`` live in ``datasource.py``,
``ship_archive`` in ``ship.py``. They are resolved lazily (PEP 562), so importing
``store.spark`` (and ``store``) does not import PySpark.
"""
from __future__ import annotations

from typing import Any

_EXPORTS = {"register": "datasource", "local_session": "datasource",
            "prepare_environment": "datasource", "ship_archive": "ship"}

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
