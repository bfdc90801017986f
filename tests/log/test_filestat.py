"""store/log/filestat.py: the two looks a writer takes at its files before every batch, in C
(``nativecheck.links_size``, ``nativecheck.stat_stamp``) exactly as their Python definitions."""
from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from store.log import filestat

nativecheck = pytest.importorskip("store.log.nativecheck")
if not hasattr(nativecheck, "links_size"):
    pytest.skip("nativecheck was built from an older source (pip install -e . again)", allow_module_level=True)

LINKS_SIZE = [filestat.links_size_py, nativecheck.links_size]
STAMP = [filestat.stamp_py, nativecheck.stat_stamp]


def test_the_store_uses_the_c_ones_where_built() -> None:
    assert filestat.links_size is nativecheck.links_size
    assert filestat.stamp is nativecheck.stat_stamp


@pytest.mark.parametrize("links_size", LINKS_SIZE, ids=["python", "c"])
def test_links_size_follows_appends_links_and_unlinks(tmp_path: Path, links_size) -> None:
    path = tmp_path / "seg"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        assert links_size(fd) == (1, 0)
        os.pwrite(fd, b"x" * 254, 0)
        assert links_size(fd) == (1, 254)
        os.link(path, tmp_path / "copy")
        assert links_size(fd) == (2, 254)
        os.unlink(path)
        os.unlink(tmp_path / "copy")
        assert links_size(fd) == (0, 254)   # (removed under the descriptor)
    finally:
        os.close(fd)
    with pytest.raises(OSError) as got:
        links_size(fd)   # (closed)
    assert got.value.errno == errno.EBADF


@pytest.mark.parametrize("stamp", STAMP, ids=["python", "c"])
def test_stamp_is_inode_mtime_ns_and_size_or_none(tmp_path: Path, stamp) -> None:
    path = tmp_path / "T.json"
    path.write_bytes(b"{}")
    os.utime(path, ns=(1_700_000_000_123_456_789, 1_700_000_000_987_654_321))
    st = os.stat(path)
    want = (st.st_ino, 1_700_000_000_987_654_321, 2)
    assert stamp(path) == stamp(str(path)) == want
    assert stamp(tmp_path / "missing.json") is None
    with pytest.raises(NotADirectoryError):
        stamp(path / "below-a-file")
    os.replace(tmp_path / "T.json", tmp_path / "old.json")
    (tmp_path / "T.json").write_bytes(b"{}")   # (a new file renamed into place: another inode)
    assert stamp(path) is not None and stamp(path) != want


UNTIMED = [filestat.untimed_py, getattr(nativecheck, "untimed_stat", filestat.untimed_py)]


def test_the_store_uses_the_c_untimed_look_where_built() -> None:
    assert filestat.untimed is nativecheck.untimed_stat


@pytest.mark.parametrize("untimed", UNTIMED, ids=["python", "c"])
def test_untimed_is_links_size_and_inode_of_a_descriptor_or_a_path(tmp_path: Path, untimed) -> None:
    path = tmp_path / "seg"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        ino = os.fstat(fd).st_ino
        assert untimed(fd) == untimed(path) == untimed(str(path)) == (1, 0, ino)
        os.pwrite(fd, b"x" * 254, 0)
        assert untimed(fd) == (1, 254, ino)
        os.unlink(path)
        assert untimed(fd) == (0, 254, ino)   # (removed under the descriptor)
    finally:
        os.close(fd)
    with pytest.raises(OSError) as got:
        untimed(fd)
    assert got.value.errno == errno.EBADF
    with pytest.raises(FileNotFoundError) as missing:
        untimed(path)
    assert missing.value.filename == path or missing.value.filename == str(path)


def test_the_c_untimed_look_asks_for_no_timestamp(tmp_path: Path) -> None:
    """What it is for, seen from outside: ``strace`` shows a ``statx`` whose mask holds no
    timestamp (on Linux >= 6.13 a look at ctime or mtime makes the next write of the file
    dirty its inode: an overwrite's fdatasync then waits for a journal commit)."""
    import shutil
    import subprocess
    import sys
    if shutil.which("strace") is None:
        pytest.skip("strace is not installed")
    path = tmp_path / "seg"
    path.write_bytes(b"x")
    cp = subprocess.run(["strace", "-f", "-e", "trace=statx", sys.executable, "-c",
                         "import sys; from store.log import nativecheck as n; n.untimed_stat(sys.argv[1])",
                         str(path)], capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0, cp.stderr
    [call] = [line for line in cp.stderr.splitlines() if str(path) in line]
    asked = call.split(", ")[3]   # statx(dirfd, path, flags, MASK, {result})
    assert set(asked.split("|")) == {"STATX_NLINK", "STATX_INO", "STATX_SIZE"}, call
