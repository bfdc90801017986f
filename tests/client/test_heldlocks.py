"""store/heldlocks.py: who holds a flock, read from /proc/locks without taking any lock."""
from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

from store.heldlocks import HeldLocks

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/locks"), reason="needs Linux /proc/locks")


def test_held_follows_the_kernel_table(tmp_path: Path) -> None:
    path = tmp_path / "a.lock"
    path.write_bytes(b"")
    assert HeldLocks().held(path) is False
    with open(path, "rb") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        assert HeldLocks().held(path) is True
        fcntl.flock(f, fcntl.LOCK_UN)
        assert HeldLocks().held(path) is False
    assert HeldLocks().held(tmp_path / "gone.lock") is None


def test_without_the_table_the_pid_decides(tmp_path: Path) -> None:
    path = tmp_path / "b.lock"
    path.write_bytes(b"")
    held = HeldLocks(str(tmp_path / "no-such-table"))
    assert held.available is False
    assert held.held(path, os.getpid()) is True
    assert held.held(path, None) is False
    assert held.held(path, 2**22 + 12345) is False
