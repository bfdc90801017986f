"""A store whose creation stopped half-way — a full disk, a kill -9 — is made by the next
command that may create one, once there is room: it once stayed "not empty and not an mqctl
store" for good (``send``, ``init``: exit 2; ``store recover``: exit 3) and only ``rm -rf``
got out. A directory holding anything a creation does not make stays refused, untouched.

The full disk is a real one (a small tmpfs, see ``faultutil.small_tmpfs``: skipped where
``mount`` is not allowed); the kills are failpoints (``store/log/preflight.py``).
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults.faultutil import fill_fs, small_tmpfs
from tests.procs import KILLED, MQ, one_error


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    yield from small_tmpfs(tmp_path, "2m")


def _tree(root: Path) -> list[tuple[str, bytes]]:
    return sorted((str(p.relative_to(root)), p.read_bytes() if p.is_file() else b"") for p in root.rglob("*"))


@pytest.mark.parametrize("pages", range(5))
def test_a_creation_stopped_by_a_full_disk_is_finished_once_there_is_room(
        small_fs: Path, tmp_path: Path, pages: int) -> None:
    """``send`` into a new store on a full disk (each page count stops the creation at another
    of its writes: a tmpfs takes a page per small file): one error line; a command that may
    not create says the creation did not finish (exit 3); once there is room ``send`` makes
    the store and sends, and the store checks clean."""
    m = MQ(small_fs / "store", tmp_path)
    page = os.sysconf("SC_PAGE_SIZE")
    try:
        (small_fs / "spare").write_bytes(b"\0" * (pages * page) if pages else b"")
        fill_fs(small_fs)
        (small_fs / "spare").unlink()   # exactly that many pages free
        res = m.run("send", "t", "hello")
        if res.returncode:
            assert "no space left on device" in one_error(res, 1, allow_info=True), res
            recover = m.run("store", "recover")   # (0 where store.json.bak was written)
            if recover.returncode:
                one_error(recover, 3, f"{m.root} is a store whose creation did not finish")
        (small_fs / "filler").unlink()
        m.ok("send", "t", "hello")
        assert [e["body"] for e in m.drain("t", "G")].count("hello") >= 1
        m.check_clean()
    finally:
        m.cleanup()


def test_init_finishes_a_creation_a_full_disk_stopped(small_fs: Path, tmp_path: Path) -> None:
    """The black-box case: the checkpoint could not be written (left empty), no store.json;
    ``init`` once room is made creates the store with the settings it is asked for."""
    m = MQ(small_fs / "store", tmp_path)
    try:
        fill_fs(small_fs)
        assert "no space left on device" in one_error(m.run("init"), 1)
        assert (m.root / "checkpoint").exists() and not (m.root / "store.json").exists()
        (small_fs / "filler").unlink()
        m.ok("init", "--max-message-size", "4KiB")
        m.ok("send", "t", "hello")
        assert [e["body"] for e in m.drain("t", "G")] == ["hello"]
        m.check_clean()
    finally:
        m.cleanup()


@pytest.mark.parametrize("point", ["store-create-after-dirs", "store-create-before-settings"])
@pytest.mark.parametrize("command", ["send", "init"])
def test_a_creation_killed_half_way_is_finished_by_the_next_command(tmp_path: Path, point: str,
                                                                    command: str) -> None:
    """kill -9 while the store is made (its directories made, or all but its store.json):
    the next ``send`` or ``init`` makes it, and the store checks clean."""
    m = MQ(tmp_path / "store", tmp_path)
    try:
        assert m.run("send", "t", "first", failpoints=point).returncode == KILLED
        assert m.root.is_dir() and not (m.root / "store.json").exists()
        if command == "init":
            m.ok("init")
        m.ok("send", "t", "second")
        assert [e["body"] for e in m.drain("t", "G")] == ["second"]
        m.check_clean()
    finally:
        m.cleanup()


def test_a_half_made_store_beside_a_users_file_stays_refused(tmp_path: Path) -> None:
    """What a killed creation left, and a file it does not make: not a store (exit 2, as
    before), and nothing in the directory changed."""
    m = MQ(tmp_path / "store", tmp_path)
    try:
        assert m.run("init", failpoints="store-create-before-settings").returncode == KILLED
        (m.root / "notes.txt").write_text("mine")
        before = _tree(m.root)
        one_error(m.run("send", "t", "x"), 2, f"{m.root} is not empty and is not an mqctl store")
        one_error(m.run("init"), 2, f"{m.root} is not empty and is not an mqctl store")
        one_error(m.run("store", "recover"), 3, f"{m.root} is not an mqctl store")
        assert _tree(m.root) == before
    finally:
        m.cleanup()
