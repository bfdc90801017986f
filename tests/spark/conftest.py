"""Fixtures of the Spark tests: one session for all of them (starting a JVM costs seconds),
and the reader serving ``format("mqctl")`` for tests that run against both."""
from __future__ import annotations

from typing import Any, Iterator

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    pytest.importorskip("pyspark")
    import store.spark.datasource as S
    session = S.local_session(log_level="OFF")
    yield session
    session.stop()


@pytest.fixture(params=["jvm", "python"])
def via(request: pytest.FixtureRequest) -> str:
    """Which reader serves ``format("mqctl")``: the JVM one, or the Python one."""
    return str(request.param)
