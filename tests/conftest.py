"""Suite-wide setup and the fixtures every test directory shares.

Fixtures: ``root`` (a store path that does not exist yet), ``warnings`` (collects the store's
warnings), ``store`` (a store opened there, closed after the test), ``layout`` (its file
layout) and ``mq`` (``tests.procs.MQ``: real ``mqctl`` processes on that store, killed when
the test ends). A directory's own ``conftest.py`` may narrow one (``tests/faults`` does).

Setup: compile the project's modules once, before any test starts ``mqctl``.

The multi-process tests start ``mqctl`` processes by the hundred. This sandbox and its CI set
``PYTHONDONTWRITEBYTECODE=1``, so without cached bytecode every one of them compiles each
module it imports again: about a third of a ``send``'s start-up. The variable only stops
imports from *writing* ``__pycache__``; they still read it, so compiling once here is enough.
(pip compiles the installed dependencies itself; an editable install leaves the project's own
modules to the first import.)
"""
from __future__ import annotations

import compileall
from pathlib import Path
from typing import Iterator

import pytest

from store import Store
from store.layout import Layout
from tests.procs import MQ

ROOT = Path(__file__).resolve().parents[1]


def pytest_sessionstart(session: pytest.Session) -> None:
    for package in ("mqctl", "store"):
        compileall.compile_dir(ROOT / package, quiet=1)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def warnings() -> list[str]:
    return []


@pytest.fixture
def store(root: Path, warnings: list[str]) -> Iterator[Store]:
    s = Store.open(root, create=True, warn=warnings.append)
    yield s
    s.close()


@pytest.fixture
def layout(root: Path) -> Layout:
    return Layout(root)


@pytest.fixture
def mq(tmp_path: Path) -> Iterator[MQ]:
    env = MQ(tmp_path / "store", tmp_path)
    env.ok("init")
    try:
        yield env
    finally:
        env.cleanup()
