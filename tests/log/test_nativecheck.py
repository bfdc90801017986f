"""The check loop in C (store/log/nativecheck.c) serves exactly what the Python loop of
store/log/columns.py serves: the same records, fields and bodies, the same damage named at the
same offsets, whatever byte of the log is damaged, in runs cut by ``max_bytes``, with records
outside a read, big bodies as views, and records big enough to be checked without the GIL."""
from __future__ import annotations

import random
import shutil
import subprocess
import sys
import sysconfig
import zlib
from contextlib import closing
from pathlib import Path

import pytest

from store.log import columns, consumequeue, spans
from store.log.format import CQ_ENTRY
from store.log.messagestore import Store
from store.log.record import Draft
from tests.log.storetestutil import damage_named, loops_agree_on, one_queue_of_many, open_store, read_queues

QUEUES = 3


def test_the_c_loop_is_built_where_a_compiler_is() -> None:
    """`pip install` builds it when it can; a silent fallback would hide a broken build."""
    header = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if not (shutil.which("cc") or shutil.which("gcc")) or not header.exists():
        pytest.skip("no C compiler or Python headers: the store reads with the Python loop")
    assert columns.NATIVE, "store/log/nativecheck.c was not built: run `pip install -e .` again and read its output"


@pytest.mark.skipif(not columns.NATIVE, reason="the C loop is not built")
@pytest.mark.parametrize("n", [0, 1, 7, 64, 1000, 4096, 70000])
def test_its_crc_is_zlib_s(n: int) -> None:
    from store.log.nativecheck import crc32
    data = random.Random(n).randbytes(n)
    assert crc32(data) == zlib.crc32(data)
    assert crc32(memoryview(data)[3:]) == zlib.crc32(data[3:])


def _store(root: Path) -> Store:
    s = open_store(root)
    s.create_topic("T", QUEUES)
    s.create_topic("U", 1)
    rnd = random.Random(7)
    drafts = []
    for i in range(60):
        size = rnd.choice([0, 5, 300, 2047, 2048, 5000, 70000])
        props = {"KEYS": f"k{i}", "TAGS": "t", "x": "y" * rnd.randrange(40)} if i % 4 else {}
        topic = "U" if i % 11 == 5 else "T"   # another topic's records in between
        drafts.append(Draft(topic, rnd.randbytes(size), props, queue_id=0 if topic == "U" else i % QUEUES))
    s.put(drafts[:30])
    s.put(drafts[30:])
    return s


def _read_all(s: Store, native: bool, monkeypatch: pytest.MonkeyPatch, max_bytes: int) -> list[object]:
    return read_queues(s, "T", QUEUES, max_bytes, c_loop=native, monkeypatch=monkeypatch)


# not a module-wide pytestmark: that would skip test_the_c_loop_is_built_where_a_compiler_is
# too, exactly when it must fail
needs_c = pytest.mark.skipif(not columns.NATIVE, reason="the C loop is not built")


@needs_c
@pytest.mark.parametrize("max_bytes", [1, 6000, 100_000, 4 << 20])
@pytest.mark.parametrize("shape", ["3 queues", "16 interleaved"])
def test_an_intact_log_reads_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shape: str,
                                      max_bytes: int) -> None:
    build, queues = (_store, QUEUES) if shape == "3 queues" else (_interleaved, MANY)
    with closing(build(tmp_path / "s")) as s:
        want = read_queues(s, "T", queues, max_bytes, c_loop=False, monkeypatch=monkeypatch)
        assert read_queues(s, "T", queues, max_bytes, c_loop=True, monkeypatch=monkeypatch) == want
        assert not any(map(damage_named, want))


@needs_c
@pytest.mark.parametrize("seed", range(12))
def test_any_damaged_byte_is_found_and_named_as_the_python_loop_names_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest, seed: int) -> None:
    s = _store(tmp_path / "s")
    request.addfinalizer(s.close)
    seg = s.commitlog.segment_path(0)
    clean = seg.read_bytes()
    rnd = random.Random(seed)
    damaged = 0
    for _ in range(8):
        data = bytearray(clean)
        at = rnd.randrange(len(data))
        data[at] ^= 1 << rnd.randrange(8)
        seg.write_bytes(bytes(data))
        for max_bytes in (6000, 4 << 20):
            want = _read_all(s, False, monkeypatch, max_bytes)
            assert _read_all(s, True, monkeypatch, max_bytes) == want, f"byte {at} of the log"
            damaged += any(map(damage_named, want))
    assert damaged >= 8   # most bytes of the log are in a record of T


def test_a_build_of_an_older_source_is_not_used() -> None:
    """An editable install keeps its old build when the C source changes: one that does not
    speak this source's interface leaves the reads to the Python loop."""
    probe = ("import sys, types\n"
             "stale = types.ModuleType('store.log.nativecheck')\n"
             "stale.INTERFACE, stale.check_run = 0, None\n"
             "sys.modules['store.log.nativecheck'] = stale\n"
             "from store.log import columns\n"
             "from store.log import consumequeue\n"
             "print(columns.NATIVE, columns._native, consumequeue.take_entries is consumequeue.cut_entries)\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "None", "True"]


def _entries(rng: random.Random, n: int) -> bytes:
    """n raw consume-queue entries, mostly in log order, some out of order, invalid or near
    the limits of their fields."""
    out, phys = [], rng.randrange(0, 1 << 40)
    for _ in range(n):
        size = rng.choice([rng.randrange(1, 70000), 0, -1, 2**31 - 1])
        p = rng.choice([phys] * 8 + [phys - 1, -1, 2**63 - 1, 2**63 - 2**31])
        out.append(CQ_ENTRY.pack(p, size, rng.randrange(-2**63, 2**63)))
        phys = max(phys, p) + max(size, 0) if p >= 0 and p < 2**62 else phys
    return b"".join(out)


@needs_c
@pytest.mark.parametrize("seed", range(40))
def test_cut_entries_in_c_takes_what_the_python_loop_takes(seed: int) -> None:
    from store.log.nativecheck import cut_entries as c_cut
    rng = random.Random(seed)
    raw = _entries(rng, rng.randrange(0, 60))
    raw += raw[:rng.randrange(0, 20)]   # a torn entry at the end is not one
    first = CQ_ENTRY.unpack_from(raw)[0] if len(raw) >= 20 else 0
    for lo in (0, max(first, 0), 2**63 - 1):
        for limit in (0, min(lo + rng.randrange(0, 1 << 20), 2**63 - 1), 2**63 - 1):
            for max_bytes in (-5, 0, 1, rng.randrange(1, 1 << 22), 2**63 - 1):
                for ordered in (False, True):
                    want = consumequeue.cut_entries(raw, lo, limit, max_bytes, ordered)
                    assert c_cut(raw, lo, limit, max_bytes, ordered) == want
                    assert c_cut(memoryview(raw), lo, limit, max_bytes, ordered) == want


@needs_c
def test_cut_entries_in_c_refuses_what_does_not_fit_in_64_bits() -> None:
    from store.log.nativecheck import cut_entries as c_cut
    with pytest.raises(OverflowError):
        c_cut(b"", 0, 2**63, 1, False)
    with pytest.raises(TypeError):
        c_cut(b"", 0, 1, 1)  # type: ignore[call-arg]
    assert consumequeue.take_entries is c_cut


# -- a queue among many: its own records read, those close together with one read --------------

MANY = 16


def _interleaved(root: Path) -> Store:
    """A topic of MANY queues whose records interleave in the log as a producer's round robin
    leaves them (other queues' records between any two of one queue's), with runs of one
    queue's records side by side and gaps both under and over what one read spans."""
    s = open_store(root)
    s.create_topic("T", MANY)
    rnd = random.Random(11)
    drafts, q = [], 0
    for i in range(700):
        q = q if rnd.random() < 0.2 else (q + 1) % MANY   # some runs of one queue
        size = rnd.choice([0, 40, 100, 100, 100, 700, 2048, 5000])
        drafts.append(Draft("T", rnd.randbytes(size), {"KEYS": f"k{i}"} if i % 3 else {}, queue_id=q))
    s.put(drafts[:350])
    s.put(drafts[350:])
    return s


@needs_c
def test_a_queue_among_many_is_read_by_its_own_records() -> None:
    """(What the tests below compare: the C loop reads the records outside the span.)"""
    entries = [(i * 16 * 200, 200, 0) for i in range(100)]   # one queue's records of 16 interleaved
    got, lo, span = spans.fetch_span(_FakeLog(), entries, 4 << 20, own_reads=True)
    assert (got, lo, span) == (entries, 0, b"")


class _FakeLog:
    segment_size = 64 << 20

    def segment_of(self, offset: int) -> int:
        return offset - offset % self.segment_size

    def read_bytes(self, offset: int, size: int) -> bytes:
        raise AssertionError("a sparse run is not read as one span")


@needs_c
@pytest.mark.parametrize("seed", range(4))
def test_a_queue_among_many_names_any_damaged_byte_or_cut_tail_as_the_python_loop_does(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest, seed: int) -> None:
    s = _interleaved(tmp_path / "s")
    request.addfinalizer(s.close)
    clean = s.commitlog.segment_path(0).read_bytes()
    rnd = random.Random(seed)
    damaged = 0
    for k in range(6):
        data = bytearray(clean)
        if k == 0:
            del data[rnd.randrange(len(data) // 2, len(data)):]   # the log cut short under its entries
        else:
            at = rnd.randrange(len(data))
            data[at] ^= 1 << rnd.randrange(8)
        damaged += loops_agree_on(s, bytes(data), MANY, monkeypatch, f"change {k}")
    assert damaged >= 4


@needs_c
@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs /proc/self/io")
def test_a_member_holding_one_queue_of_many_reads_its_own_records_not_the_log_between(
        tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """400-byte bodies, 16 queues: 8 KiB of other queues' records between two of its own, more
    than a read of its own costs to copy (nativecheck.c's GATHER_GAP)."""
    s = open_store(tmp_path / "s")
    request.addfinalizer(s.close)
    got, own, used = one_queue_of_many(s, MANY, b"x" * 400, 300)
    assert len(got.bodies) == 300 and not got.damaged
    assert used < 2 * own, f"read {used} bytes for {own} bytes of records"   # the span between: 16 times
