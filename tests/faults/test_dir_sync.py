"""Deletions are made durable by their owners: after deleting files the owner fsyncs their
directory, and a directory sync that fails is said (a warning on stderr), never passed over —
the files are gone for every process, but a power cut may bring them back.

A directory fsync does not fail on a healthy disk, and ``chmod`` does not stop root, so the
failure is made by the C library itself: a small shared object preloaded into ``mqctl``
(``LD_PRELOAD``) makes ``fsync`` of one named directory fail with EIO; every other fsync is
the real one. Skipped where no C compiler is installed.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from store.layout import Layout
from store.log.index import KeyIndex
from store.log.messagestore import Store
from store.log.record import Draft
from store.log.settings import StoreSettings
from tests.log.test_retention import age_all
from tests.procs import KILLED, MQ, mqctl_env

_SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>
int fsync(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    const char *dir = getenv("TEST_FAIL_FSYNC_OF");
    struct stat a, b;
    if (dir && fstat(fd, &a) == 0 && stat(dir, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino) {
        errno = EIO;
        return -1;
    }
    return real(fd);
}
"""


@pytest.fixture(scope="module")
def failing_fsync(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the fsync shim")
    d = tmp_path_factory.mktemp("shim")
    (d / "failsync.c").write_text(_SHIM)
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(d / "failsync.so"), str(d / "failsync.c"), "-ldl"],
                   check=True, capture_output=True)
    return d / "failsync.so"


# Opens the store with small key-index files (as tests/log/test_retention.py does, so that the
# index has files to delete) and cleans it; warnings go to stderr.
_CLEAN = """
import sys
from store.log.index import KeyIndex
from store.log.messagestore import Store
from store.log.retention import clean
s = Store.open(sys.argv[1], warn=lambda m: print(m, file=sys.stderr))
s.engine.index = KeyIndex(s.layout.index_dir, slots=64, entries=40)
print(len(clean(s).files))
s.close()
"""


def _old_files(root: Path) -> None:
    """A store of several commit-log segments, consume-queue and index files, all old."""
    s = Store.open(root, create=True, warn=lambda _m: None, settings=StoreSettings(
        max_message_size=1024, commitlog_segment_size=8192, cq_segment_entries=20))
    s.engine.index = KeyIndex(s.layout.index_dir, slots=64, entries=40)
    try:
        s.create_topic("T", 1)
        for i in range(0, 200, 10):
            s.put([Draft("T", f"m{i + j:05d}-{'x' * 180}".encode(), {"KEYS": f"k{i + j}"}, queue_id=0)
                   for j in range(10)])
        age_all(s)
    finally:
        s.close()


@pytest.mark.parametrize("kind", ["commitlog", "consumequeue", "index"])
def test_clean_warns_when_a_directory_sync_fails(tmp_path: Path, failing_fsync: Path, kind: str) -> None:
    root = tmp_path / "store"
    _old_files(root)
    lay = Layout(root)
    where = {"commitlog": lay.commitlog_dir, "consumequeue": lay.queue_dir("T", 0), "index": lay.index_dir}[kind]
    before = sorted(p.name for p in where.iterdir())
    env = {**mqctl_env(None), "LD_PRELOAD": str(failing_fsync), "TEST_FAIL_FSYNC_OF": str(where)}
    res = subprocess.run([sys.executable, "-c", _CLEAN, str(root)], env=env, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    after = sorted(p.name for p in where.iterdir())
    assert 0 < len(after) < len(before), "the files went, the newest stayed"
    warned = [line for line in res.stderr.splitlines() if "could not sync directory" in line]
    assert warned == [f"could not sync directory {where} after deleting files from it (Input/output error): "
                      f"a power cut may bring them back"], res.stderr


def test_store_clean_says_so(tmp_path: Path, failing_fsync: Path) -> None:
    """The command passes the warning on, and exits 0: the clean was done."""
    mq = MQ(tmp_path / "store", tmp_path)
    _old_files(mq.root)
    where = Layout(mq.root).commitlog_dir
    res = mq.run("store", "clean", extra_env={"LD_PRELOAD": str(failing_fsync), "TEST_FAIL_FSYNC_OF": str(where)})
    assert res.returncode == 0, res.stderr
    assert f"could not sync directory {where} after deleting files" in res.stderr


# -- broadcast offsets (broadcastoffsets.BroadcastOffsetStore.delete) ------------------------------

def _broadcast_client(mq: MQ) -> Path:
    """Client ``second`` of broadcast group BC, its offsets written twice (so a ``.bak`` exists);
    the directory of its offsets."""
    mq.ok("init")
    mq.ok("topic", "create", "B", "--queues", "2")
    mq.send_lines("B", ["a", "b"])
    mq.ok("consume", "B", "-g", "BC", "--broadcast", "--client-id", "second", "--from", "first", "-e")
    mq.send_lines("B", ["c", "d"])
    mq.ok("consume", "B", "-g", "BC", "--broadcast", "--client-id", "second", "-e")
    d = Layout(mq.root).broadcast_offsets("second", "BC").parent
    assert {"offsets.json", "offsets.json.bak"} <= set(os.listdir(d))
    return d


def _shown(mq: MQ) -> dict[int, int]:
    rows = [json.loads(x) for x in mq.ok("offsets", "show", "-g", "BC", "--json").stdout.splitlines()]
    return {r["queueId"]: r["offset"] for r in rows if r["clientId"] == "second"}


def test_broadcast_offsets_deletion_killed_midway_leaves_them_whole(tmp_path: Path) -> None:
    """Killed after the ``.bak`` went: the offsets are still those committed (never an older
    ``.bak`` alone); the next delete finishes, and nothing of the client is left."""
    mq = MQ(tmp_path / "store", tmp_path)
    d = _broadcast_client(mq)
    before = _shown(mq)
    assert sum(before.values()) == 4
    res = mq.run("offsets", "delete", "-g", "BC", "--client-id", "second", "--yes",
                 failpoints="broadcast-delete-after-bak")
    assert res.returncode == KILLED, res.stderr
    assert "offsets.json" in os.listdir(d) and "offsets.json.bak" not in os.listdir(d)
    assert _shown(mq) == before
    mq.ok("offsets", "delete", "-g", "BC", "--client-id", "second", "--yes")
    assert _shown(mq) == {} and not d.exists()


def test_broadcast_offsets_deletion_warns_when_its_directory_sync_fails(tmp_path: Path,
                                                                        failing_fsync: Path) -> None:
    mq = MQ(tmp_path / "store", tmp_path)
    d = _broadcast_client(mq)
    res = mq.run("offsets", "delete", "-g", "BC", "--client-id", "second", "--yes",
                 extra_env={"LD_PRELOAD": str(failing_fsync), "TEST_FAIL_FSYNC_OF": str(d.parent)})
    assert res.returncode == 0, res.stderr
    assert not d.exists() and _shown(mq) == {}
    assert f"could not sync directory {d.parent} after removing BC from it" in res.stderr, res.stderr
