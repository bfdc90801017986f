"""Fixtures for the store's unit tests (tests/store/).

There is deliberately no ``__init__.py`` here: a package named ``store`` under ``tests/``
would shadow the real ``store`` package in ``sys.modules``. Test files carry a ``store_``
prefix instead, so they cannot clash with test modules elsewhere; helpers are in
``storetestutil.py``.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterator

import pytest

from store.broker import Store

sys.path.insert(0, str(Path(__file__).resolve().parent))  # for ``import storetestutil``
from storetestutil import open_store  # noqa: E402


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def warnings() -> list[str]:
    return []


@pytest.fixture
def store(root: Path, warnings: list[str]) -> Iterator[Store]:
    s = open_store(root, warnings)
    yield s
    s.close()
