"""Fixtures for the power-loss suite (tests/power/): stores on LazyFS, cut at will.

``lazyfs_bin`` (session) builds LazyFS with ``shared/tools/lazyfs/build.sh`` and skips the
suite only when /dev/fuse is missing, the tests do not run as root, or the build lacks tools.
``power`` (per test) mounts a fresh LazyFS in the test's tmp dir and always unmounts it (and
kills every process the test started, by pid) at the end, whatever happened.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from powerlib import LazyFS, Power, find_lazyfs  # noqa: E402


@pytest.fixture(scope="session")
def lazyfs_bin() -> Path:
    try:
        binary, why = find_lazyfs()
    except RuntimeError as exc:
        pytest.fail(str(exc))
    if binary is None:
        pytest.skip(why)
    return binary


@pytest.fixture
def power(lazyfs_bin: Path, tmp_path: Path):
    work = tmp_path / "work"
    work.mkdir()
    fs = LazyFS(lazyfs_bin, tmp_path / "lazyfs")
    machine = Power(fs, work)
    try:
        fs.start()
        yield machine
    finally:
        try:
            machine.kill_all()
        finally:
            fs.close()
