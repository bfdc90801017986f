"""Suite-wide setup and the fixtures every test directory shares.

Fixtures: ``root`` (a store path that does not exist yet), ``warnings`` (collects the store's
warnings), ``store`` (a store opened there with ``store_settings``, closed after the test),
``layout`` (its file layout) and ``mq`` (``tests.procs.MQ``: real ``mqctl`` processes on a
store made by ``mqctl init``, or copied from ``mq_template``; killed when the test ends).

``store_settings`` and ``mq_template`` are the two knobs: a module whose tests all want other
settings, or all start from one prepared store, overrides that fixture and keeps ``store`` and
``mq`` themselves (``tests/log/test_retention.py``, ``tests/faults/test_corruption.py``).

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
import os
import shutil
import signal
from pathlib import Path
from typing import Iterator

import pytest
from hypothesis import settings

from store import Store, StoreSettings
from store.layout import Layout
from tests.procs import MQ

ROOT = Path(__file__).resolve().parents[1]

# No deadline for a property test's examples (Hypothesis's default is 200 ms each): the suite
# must pass beside CPU hogs, where a 0.1 ms example once took 256 ms (test_allocate.py).
settings.register_profile("loaded", deadline=None)
settings.load_profile("loaded")


def pytest_sessionstart(session: pytest.Session) -> None:
    for package in ("mqctl", "store"):
        compileall.compile_dir(ROOT / package, quiet=1)
    # A suite started in the background of a script (``cmd &``) inherits SIGINT ignored, and
    # every process it starts would too: a test's Ctrl-C (SIGINT) to ``mqctl top`` was then
    # ignored, as a shell's background job ignores it. The processes get a terminal's default.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session", autouse=True)
def spark_scratch(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Spark's scratch directories (blockmgr-*, spark-*/userFiles) go where the suite's own
    temp files go: a JVM the tests kill cannot remove its own, and they piled up in /tmp run
    after run. Every Spark the suite starts, in this process or in an ``mqctl`` it runs, reads
    ``SPARK_LOCAL_DIRS``."""
    if "SPARK_LOCAL_DIRS" not in os.environ:
        os.environ["SPARK_LOCAL_DIRS"] = str(tmp_path_factory.mktemp("spark-local", numbered=False))


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def warnings() -> list[str]:
    return []


@pytest.fixture
def store_settings() -> StoreSettings | None:
    """The settings ``store`` creates its store with (None: the defaults)."""
    return None


@pytest.fixture
def store(root: Path, warnings: list[str], store_settings: StoreSettings | None) -> Iterator[Store]:
    s = Store.open(root, create=True, settings=store_settings, warn=warnings.append)
    yield s
    s.close()


@pytest.fixture
def layout(root: Path) -> Layout:
    return Layout(root)


@pytest.fixture
def mq_template() -> Path | None:
    """A store ``mq`` starts from, copied (None: a new one, ``mqctl init``)."""
    return None


@pytest.fixture
def mq(tmp_path: Path, mq_template: Path | None) -> Iterator[MQ]:
    env = MQ(tmp_path / "store", tmp_path)
    if mq_template is None:
        env.ok("init")
    else:
        shutil.copytree(mq_template, env.root)
    try:
        yield env
    finally:
        env.cleanup()
