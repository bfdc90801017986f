"""Errors of the ``mqctl`` source as a data engineer reads them: the store's message first and
whole, not the last line but one of a Spark wrapping.

Spark wraps what a Python data source raises (``[PYTHON_DATA_SOURCE_ERROR] Failed to ...:``
and the Python traceback) and what the JVM reader raises (``Py4JJavaError: An error occurred
while calling o62.count.``); both keep the store's ``store.errors.<Class>: <message>`` line.
:func:`store_error` finds it again, and :func:`mqctl_errors` raises it in place of the Spark
exception::

    from store.spark.errors import mqctl_errors
    with mqctl_errors():
        df = spark.read.format("mqctl").option("store", d).option("topic", "t").load()
        df.count()        # raises store.errors.TopicNotFoundError: topic 't' does not exist

The Spark exception stays the cause (``__cause__``) when ``MQCTL_SPARK_TRACEBACK=1`` asks for
tracebacks; so do Spark's own Python tracebacks, which :func:`traceback_conf` otherwise turns
off for mqctl's sessions.
"""
from __future__ import annotations

import os
import re
from contextlib import contextmanager
from typing import Iterator

from store import errors as E

_STORE_ERROR = re.compile(r"store\.errors\.([A-Za-z]+): ([^\n]*)")
TRACEBACK_ENV = "MQCTL_SPARK_TRACEBACK"


def tracebacks_wanted() -> bool:
    return os.environ.get(TRACEBACK_ENV, "").strip().lower() in ("1", "true", "yes")


def traceback_conf() -> dict[str, str]:
    """Session settings: Python errors of data sources (and UDFs) as their message alone,
    unless ``MQCTL_SPARK_TRACEBACK=1``."""
    hide = "false" if tracebacks_wanted() else "true"
    return {"spark.sql.execution.pyspark.udf.hideTraceback.enabled": hide}


def store_error(exc: BaseException) -> E.StoreError | None:
    """The store's error an exception out of Spark carries (the innermost one: a stream's
    failure names its cause last), as its own class; None when it carries none."""
    if isinstance(exc, E.StoreError):
        return exc
    found = _STORE_ERROR.findall(str(exc))
    if not found:
        return None
    name, message = found[-1]
    return E.from_text(name, message.strip())


@contextmanager
def mqctl_errors() -> Iterator[None]:
    """Raise the store's error in place of a Spark exception that carries one."""
    try:
        yield
    except E.StoreError:
        raise
    except Exception as exc:
        err = store_error(exc)
        if err is None:
            raise
        if tracebacks_wanted():
            raise err from exc
        raise err from None
