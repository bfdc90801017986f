"""Suite-wide setup: compile the project's modules once, before any test starts ``mqctl``.

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

import pytest

ROOT = Path(__file__).resolve().parents[1]


def pytest_sessionstart(session: pytest.Session) -> None:
    for package in ("mqctl", "store"):
        compileall.compile_dir(ROOT / package, quiet=1)
