"""Fixtures for the power-loss suite (tests/power/): stores on LazyFS, cut at will.

``lazyfs_bin`` (session) builds LazyFS with ``shared/tools/lazyfs/build.sh`` and skips the
suite only when /dev/fuse is missing, the tests do not run as root, or the build lacks tools.
``power`` (per test) mounts a fresh LazyFS in the test's tmp dir and always unmounts it (and
kills every process the test started, by pid) at the end, whatever happened.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.power.powerlib import LazyFS, Power, find_lazyfs


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
def power(lazyfs_bin: Path, tmp_path: Path, request: pytest.FixtureRequest):
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
        # MQCTL_POWER_REPORT=FILE: one JSON line per test (cuts, acknowledged messages), for
        # the numbers a note reports; the assertions above already required 0 lost/skipped
        report = os.environ.get("MQCTL_POWER_REPORT")
        if report:
            with open(report, "a") as fh:
                fh.write(json.dumps({"test": request.node.name, "cuts": machine.cuts,
                                     "syncAcked": len(machine.ledger.acked),
                                     "asyncAcked": len(machine.ledger.async_acked)}) + "\n")
