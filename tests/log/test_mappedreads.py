"""A long sparse run (a member holding one queue of many) is read by the C check loop through a
mapping of the segment, each record's own bytes copied out of it (store/log/nativecheck.c,
``map_run``): it serves what the Python loop serves, damaged and cut records included; a page
that fails while it is read (the segment truncated after the mapping was made) is caught and
the record handed back to the Python loop, which names it; any other SIGBUS still ends the
process as it did."""
from __future__ import annotations

import ast
import os
import random
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from store.log import columns
from store.log.messagestore import Store
from store.log.record import Draft
from tests.log.storetestutil import loops_agree_on, one_queue_of_many, open_store

pytestmark = pytest.mark.skipif(not columns.NATIVE, reason="the C loop is not built")

MANY = 16
RUN = 300   # records of each queue: over nativecheck.c's MAP_MIN_RECORDS (256)
REPO = Path(__file__).resolve().parents[2]


def _sparse(root: Path, batch: int = MANY * RUN // 2) -> Store:
    """MANY queues whose records a round robin interleaves: each queue's run is sparse and long
    enough to be mapped; small records, some big enough to be handed out as views."""
    s = open_store(root)
    s.create_topic("T", MANY)
    rnd = random.Random(5)
    drafts = [Draft("T", rnd.randbytes(rnd.choice([0, 40, 100, 100, 100, 700, 2048, 5000])),
                    {"KEYS": f"k{i}"} if i % 3 else {}, queue_id=i % MANY) for i in range(MANY * RUN)]
    for at in range(0, len(drafts), batch):
        s.put(drafts[at:at + batch])
    return s


def _killed_by_sigbus(script: str, tmp_path: Path, request: pytest.FixtureRequest,
                      how: str) -> subprocess.CompletedProcess[str]:
    """Run ``script`` on a sparse store (its args: the store, ``how``, a scratch path) in a child
    that must end of SIGBUS; the timeout only stops a child spinning on one."""
    s = _sparse(tmp_path / "s")
    request.addfinalizer(s.close)
    try:
        child = subprocess.run([sys.executable, "-c", script, str(tmp_path / "s"), how, str(tmp_path / "other")],
                               cwd=REPO, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"the child spun on a SIGBUS ({how})") from e
    assert child.returncode == -signal.SIGBUS, (child.returncode, child.stdout, child.stderr[-2000:])
    assert "survived" not in child.stdout
    return child


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs /proc/self/io")
def test_a_long_sparse_run_is_read_through_a_mapping_that_does_not_outlive_the_read(
        tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """100-byte bodies, 16 queues: read_gather copied 16 times a run's own bytes (the log between
    its records); mapped, the read copies nothing through read(2), and leaves no mapping."""
    s = open_store(tmp_path / "s")
    request.addfinalizer(s.close)
    got, own, used = one_queue_of_many(s, MANY, b"x" * 100, 1000)
    assert len(got.bodies) == 1000 and not got.damaged and got.bodies[999] == b"x" * 100
    assert used < own // 4, f"read {used} bytes for {own} bytes of records"
    seg = str(s.commitlog.segment_path(0))
    assert seg not in Path("/proc/self/maps").read_text(), "a mapping outlived the read"


@pytest.mark.parametrize("seed", range(3))
def test_a_mapped_run_names_any_damaged_byte_or_cut_tail_as_the_python_loop_does(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest, seed: int) -> None:
    """The segment is damaged, or cut (mid-record, or at a page boundary) before the read: the
    mapping stops at the file's end, and what lies past it is handed back and named."""
    s = _sparse(tmp_path / "s")
    request.addfinalizer(s.close)
    clean = s.commitlog.segment_path(0).read_bytes()
    rnd = random.Random(seed)
    damaged = 0
    for k in range(5):
        data = bytearray(clean)
        # (cut in its last 1 %: the store takes ~15 ms to name each record past a cut)
        if k == 0:
            del data[rnd.randrange(len(data) - len(data) // 100, len(data)):]
        elif k == 1:
            del data[rnd.randrange(len(data) - len(data) // 100, len(data)) & ~4095:]
        else:
            for _ in range(3):
                data[rnd.randrange(len(data))] ^= 1 << rnd.randrange(8)
        damaged += loops_agree_on(s, bytes(data), MANY, monkeypatch, f"change {k}")
    assert damaged >= 4


_READ_ALL = """
import os, sys, pytest
from store.log.messagestore import Store
from tests.log.storetestutil import read_queues
s = Store.open(sys.argv[1])
s.pull_bodies("T", 0, 0, 1)   # (queue 0's end seen, with the log whole: the cut comes after)
if len(sys.argv) > 3:
    os.truncate(sys.argv[3], int(sys.argv[4]))
print(repr(read_queues(s, "T", 16, 4 << 20, c_loop=sys.argv[2] == "c", monkeypatch=pytest.MonkeyPatch())))
"""


def test_a_page_that_fails_while_mapped_hands_the_record_back_to_be_named(tmp_path: Path) -> None:
    """The segment truncated between the mapping and the read (by the module's test hook,
    MQCTL_TEST_TRUNCATE_AFTER_MAP, as another process could): the copy out of a page past the
    new end raises SIGBUS, which the loop catches; the reader lives, and reads and names what
    follows as the Python loop does (on a copy of the store) when the log is cut at the same
    point after the queue's end was seen: the records past the cut named as short reads."""
    _sparse(tmp_path / "s", batch=MANY).close()
    shutil.copytree(tmp_path / "s", tmp_path / "copy")
    seg = tmp_path / "s" / "commitlog" / "00000000000000000000"
    cut = (seg.stat().st_size * 9 // 10) & ~4095   # (few records past it: each takes ~15 ms to name)
    env = dict(os.environ, MQCTL_TEST_TRUNCATE_AFTER_MAP=f"{seg}:{cut}")
    mapped = subprocess.run([sys.executable, "-c", _READ_ALL, str(tmp_path / "s"), "c"], cwd=REPO, env=env,
                            capture_output=True, text=True)
    assert mapped.returncode == 0, (mapped.returncode, mapped.stderr[-2000:])
    python = subprocess.run([sys.executable, "-c", _READ_ALL, str(tmp_path / "copy"), "python",
                             str(tmp_path / "copy" / "commitlog" / "00000000000000000000"), str(cut)],
                            cwd=REPO, capture_output=True, text=True, check=True)
    assert mapped.stdout == python.stdout
    first = ast.literal_eval(python.stdout)[0]
    assert first[:3] == ("bodies", 0, False) and 100 < len(first[3]) < RUN and "truncated" in first[5][0][1]


_FOREIGN_FAULT = """
import faulthandler, mmap, os, sys
from store.log.messagestore import Store
s = Store.open(sys.argv[1])
when = sys.argv[2]
if when == "before":
    faulthandler.enable()
assert len(s.pull_bodies("T", 3, 0, 1000).bodies) == 300   # (a mapped read: the handler is ours)
if when == "after":
    faulthandler.enable()   # replaces ours, which the next read installs again, over it
    assert len(s.pull_bodies("T", 3, 0, 1000).bodies) == 300
path = sys.argv[3]
with open(path, "wb") as f:
    f.write(b"y" * 8192)
with open(path, "rb") as f:
    m = mmap.mmap(f.fileno(), 8192, prot=mmap.PROT_READ)
os.truncate(path, 0)
print(m[4096])   # a SIGBUS outside the loop's guarded copy
print("survived")
"""


@pytest.mark.parametrize("faulthandler", ["none", "before", "after"])
def test_a_sigbus_elsewhere_still_ends_the_process(tmp_path: Path, request: pytest.FixtureRequest,
                                                   faulthandler: str) -> None:
    """The loop's SIGBUS handler hands a fault not its own to the handler before it: the default
    (the process dies by SIGBUS), or faulthandler's (its report, then the default), whether it
    was there before the loop's handler or replaced it since."""
    s = _sparse(tmp_path / "s")
    request.addfinalizer(s.close)
    child = subprocess.run([sys.executable, "-c", _FOREIGN_FAULT, str(tmp_path / "s"), faulthandler,
                            str(tmp_path / "other")], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert child.returncode == -signal.SIGBUS, (child.returncode, child.stdout, child.stderr[-2000:])
    assert "survived" not in child.stdout
    if faulthandler != "none":
        assert "Bus error" in child.stderr


# The end of a child script: a SIGBUS of the child's own (sys.argv[2] "kill": sent to itself;
# "fault": a page of a file mapped and cut, sys.argv[3]), which must end it.
_SIGBUS_OF_ITS_OWN = """
import mmap, os, signal, sys, time
if sys.argv[2] == "kill":
    os.kill(os.getpid(), signal.SIGBUS)
    time.sleep(5)
else:
    with open(sys.argv[3], "wb") as f:
        f.write(b"y" * 8192)
    with open(sys.argv[3], "rb") as f:
        m = mmap.mmap(f.fileno(), 8192, prot=mmap.PROT_READ)
    os.truncate(sys.argv[3], 0)
    print(m[4096])
print("survived")
"""

_STALE = """
import faulthandler, mmap, os, signal, sys
from store.log.messagestore import Store
s = Store.open(sys.argv[1])
assert len(s.pull_bodies("T", 3, 0, 1000).bodies) == 300   # a mapped read
faulthandler.enable()                                       # (over whatever the read left)
assert len(s.pull_bodies("T", 3, 0, 1000).bodies) == 300
faulthandler.disable()                                      # faulthandler's handler is gone
""" + _SIGBUS_OF_ITS_OWN


@pytest.mark.parametrize("how", ["fault", "kill"])
def test_a_sigbus_after_faulthandler_came_and_went_still_ends_the_process(
        tmp_path: Path, request: pytest.FixtureRequest, how: str) -> None:
    """Mapped reads before and after faulthandler.enable(), then faulthandler.disable(): a
    SIGBUS (a fault, or kill -BUS) kills the process. (The handler used to stay installed,
    refreshed at each read, and hand a foreign SIGBUS to the one it had seen last, faulthandler's,
    gone by then: a fault repeated for ever, a kill was swallowed.) The timeout only stops a
    spinning child."""
    _killed_by_sigbus(_STALE, tmp_path, request, how)


_HOOKED = """
import os, sys
from store.log.messagestore import Store
s = Store.open(sys.argv[1])
print(len(s.pull_bodies("T", 3, 0, 1000).bodies), os.path.getsize(sys.argv[2]))
"""


@pytest.mark.parametrize("value", ["{seg}:", "{seg}:abc", "{seg}:12x", ":0", "{seg}", "{other}:0"])
def test_a_malformed_or_foreign_truncate_hook_value_truncates_nothing(
        tmp_path: Path, request: pytest.FixtureRequest, value: str) -> None:
    """MQCTL_TEST_TRUNCATE_AFTER_MAP acts only on <path>:<digits> naming the segment mapped: a
    malformed value (no length, not a number) or another file's path truncates nothing (a bare
    ``path:`` used to truncate the segment to 0)."""
    s = _sparse(tmp_path / "s")
    request.addfinalizer(s.close)
    seg = s.commitlog.segment_path(0)
    other = tmp_path / "other"
    other.write_bytes(b"z" * 100)
    size = seg.stat().st_size
    env = dict(os.environ, MQCTL_TEST_TRUNCATE_AFTER_MAP=value.format(seg=seg, other=other))
    child = subprocess.run([sys.executable, "-c", _HOOKED, str(tmp_path / "s"), str(seg)], cwd=REPO, env=env,
                           capture_output=True, text=True, check=True)
    assert child.stdout.split() == ["300", str(size)]
    assert other.stat().st_size == 100


# A reader thread pulls queue 3 for ever; the main thread holds the GIL from the moment it sees
# the loop's handler installed (the reader is then inside a batch of copies, which it cannot leave
# without the GIL: sys.setswitchinterval keeps it from being taken) until it has done ``then``.
_IN_A_BATCH = """
import ctypes, faulthandler, os, signal, sys, threading, time
import store.log.nativecheck as nativecheck
from store.log.messagestore import Store
sys.setswitchinterval(1000)
s = Store.open(sys.argv[1])
sigaction = ctypes.PyDLL(None).sigaction   # (PyDLL: called with the GIL held)
sigaction.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
buf = ctypes.create_string_buffer(512)
ours = []
for line in open("/proc/self/maps"):
    if line.rstrip().endswith(os.path.basename(nativecheck.__file__)):
        ours.append(tuple(int(x, 16) for x in line.split()[0].split("-")))
def installed():   # the loop's handler is SIGBUS's now
    assert sigaction(signal.SIGBUS, None, buf) == 0
    at = int.from_bytes(buf.raw[:8], sys.byteorder)
    return any(a <= at < b for a, b in ours)
pulls, stop = [0], False
def pull():
    while not stop:
        assert len(s.pull_bodies("T", 3, 0, 1000).bodies) == 300
        pulls[0] += 1
reader = threading.Thread(target=pull, daemon=True)
reader.start()
def in_a_batch(then, pulls_at_most=None):
    start = pulls[0]
    while not installed():
        if pulls_at_most is not None and pulls[0] - start >= pulls_at_most:
            break   # (no batch installs the handler any more)
        time.sleep(0)
    then()
fd = sys.stderr.fileno()
"""

_DISPLACED = _IN_A_BATCH + """
in_a_batch(lambda: faulthandler.enable(file=fd))   # it takes ours for the one it replaced
in_a_batch(faulthandler.disable, pulls_at_most=3)
stop = True
reader.join()
own = sum(size for _phys, size, _tags in s.queue("T", 3).read_entries(0, 1000))
before = int(open("/proc/self/io").read().split("rchar:")[1].split()[0])
assert len(s.pull_bodies("T", 3, 0, 1000).bodies) == 300
print(int(open("/proc/self/io").read().split("rchar:")[1].split()[0]) - before - own, flush=True)
""" + _SIGBUS_OF_ITS_OWN


@pytest.mark.skipif(not Path("/proc/self/io").exists() or sys.byteorder != "little" or os.uname().machine
                    != "x86_64", reason="reads struct sigaction as glibc lays it out on x86_64, and /proc/self/io")
@pytest.mark.parametrize("how", ["fault", "kill"])
def test_a_handler_installed_over_ours_during_a_batch_leaves_sigbus_to_it(
        tmp_path: Path, request: pytest.FixtureRequest, how: str) -> None:
    """faulthandler.enable() while another thread copies a batch (ours installed): faulthandler
    keeps ours as the one it replaced, so the loop leaves SIGBUS alone from then on (and reads
    without mapping); after faulthandler.disable() during a later pull, a SIGBUS (a fault, or
    kill -BUS) kills the process. (The loop used to install ours again over faulthandler's at
    the next batch and restore faulthandler's after it: once disabled, faulthandler's handler
    returned from a fault for ever and swallowed a kill.) The timeout only stops a spinning child."""
    child = _killed_by_sigbus(_DISPLACED, tmp_path, request, how)
    assert int(child.stdout.split()[0]) >= 0, "read through a mapping: ours was installed again"


_FORKED = _IN_A_BATCH + """
child = []
def fork():
    child.append(os.fork())
    if child[0] == 0:   # (the reader is not here: its batch never ends)
        s2 = Store.open(sys.argv[1])
        assert len(s2.pull_bodies("T", 3, 0, 1000).bodies) == 300
        print(installed(), flush=True)
        faulthandler.enable(file=fd)
        assert len(s2.pull_bodies("T", 3, 0, 1000).bodies) == 300
        faulthandler.disable()
        assert len(s2.pull_bodies("T", 3, 0, 1000).bodies) == 300
        os.kill(os.getpid(), signal.SIGBUS)
        time.sleep(5)
        os._exit(7)
in_a_batch(fork)
stop = True
reader.join()
_, status = os.waitpid(child[0], 0)
print(os.waitstatus_to_exitcode(status))
"""


@pytest.mark.skipif(not Path("/proc/self/maps").exists() or sys.byteorder != "little" or os.uname().machine
                    != "x86_64", reason="reads struct sigaction as glibc lays it out on x86_64")
def test_a_child_forked_during_a_batch_leaves_sigbus_as_it_was(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """A fork while another thread copies a batch: the child has no such thread, so no batch in
    progress: its reads install and remove ours around their own batches, faulthandler comes and
    goes, and kill -BUS kills it. (The child used to count the parent's batch for ever: ours
    stayed installed, took faulthandler's for the one it replaced, and swallowed the kill.)"""
    s = _sparse(tmp_path / "s")
    request.addfinalizer(s.close)
    child = subprocess.run([sys.executable, "-c", _FORKED, str(tmp_path / "s")],
                           cwd=REPO, capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, (child.returncode, child.stdout, child.stderr[-2000:])
    assert child.stdout.split() == ["False", str(-signal.SIGBUS)], child.stderr[-2000:]
