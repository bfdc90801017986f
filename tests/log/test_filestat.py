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
