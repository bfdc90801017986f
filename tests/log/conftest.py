"""Fixtures of the storage engine's unit tests: which check loop bulk reads use."""
from __future__ import annotations

import pytest

from store.log import columns
from tests.log.storetestutil import without_c_loop


@pytest.fixture
def python_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bulk reads without the C loop (store/log/nativecheck.c), as an install without a
    compiler reads: the Python loop, and numpy's array check for big backlogs."""
    without_c_loop(monkeypatch)


@pytest.fixture(params=["c", "python"])
def each_loop(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run the test with the C loop, then with the Python loop alone."""
    if request.param == "python":
        request.getfixturevalue("python_loop")
    elif not columns.NATIVE:
        pytest.skip("the C check loop is not built here (tests/log/test_nativecheck.py says why)")
    return str(request.param)
