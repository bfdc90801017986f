"""The C check loop (store/log/nativecheck.c) against the Python loop of store/log/columns.py
under random damage of both files a bulk read trusts: bytes and fields of the commit log, and
the consume-queue entries that point into it (any offset and size a torn or damaged entry can
hold, up to 2**63 - 1). Both loops must serve the same records and columns, name the same
damage and end at the same next offset, for every ``max_bytes`` (0 included) and through the
shared reads of several queues; the C loop must never read outside its buffers (a crash here
is a test failure of the whole run)."""
from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from store.errors import StoreError
from store.log import columns, consumequeue
from store.log import format as F
from store.log.messagestore import Store
from store.log.record import Draft
from tests.log.storetestutil import open_store, read_queues

pytestmark = pytest.mark.skipif(not columns.NATIVE, reason="the C loop is not built")

QUEUES = 3
SEGMENT = 256 * 1024   # several segments: records outside a read's segment, segment ends
BIG = 2**63 - 1


def _build(root: Path) -> Store:
    s = open_store(root, commitlog_segment_size=SEGMENT)
    s.create_topic("T", QUEUES)
    s.create_topic("U", 1)
    rnd = random.Random(11)
    drafts = []
    for i in range(72):
        size = rnd.choice([0, 9, 300, 2047, 2048, 5000, 70000])
        props = {"KEYS": f"k{i}", "x": "y" * rnd.randrange(30)} if i % 3 else {}
        topic = "U" if i % 7 == 3 else "T"
        drafts.append(Draft(topic, rnd.randbytes(size), props, queue_id=0 if topic == "U" else i % QUEUES))
    for k in range(0, len(drafts), 12):
        s.put(drafts[k:k + 12])
    return s


def _files(s: Store) -> list[Path]:
    logs = sorted(s.commitlog.segment_path(0).parent.iterdir())
    return logs + [s.queue("T", q).segment_path(0) for q in range(QUEUES)]


def _read(s: Store, native: bool, monkeypatch: pytest.MonkeyPatch, max_bytes: int, count: int = 1000) -> list[object]:
    out = read_queues(s, "T", QUEUES, max_bytes, c_loop=native, monkeypatch=monkeypatch, count=count)
    if native:   # the shared read serves full runs only with the C loop
        for full in (False, True):
            try:
                runs = s.pull_many("T", [(q, 0, 1000, max(max_bytes, 1) * 4) for q in range(QUEUES)], full)
                owns = {q: s.pull_columns("T", q, 0, len(c.offsets) + len(c.damaged), max(max_bytes, 1) * 4,
                                          with_phys=True) for q, c in runs.items()}
            except StoreError:   # as each queue's own pull (compared above)
                continue
            for q, c in sorted(runs.items()):
                own = owns[q] if full else None
                out.append(("many", full, q, c.offsets, [bytes(b) for b in c.bodies], c.damaged))
                if own is not None:
                    assert (c.offsets, c.bodies, c.born, c.stored, c.props, c.phys, c.reconsume) == (
                        own.offsets, own.bodies, own.born, own.stored, own.props, own.phys, own.reconsume)
    return out


def _comparable(rows: list[object]) -> list[object]:
    return [r for r in rows if not (isinstance(r, tuple) and r[0] == "many")]


class Fuzzed(tuple[Store, dict[Path, bytes]]):
    """The store and its files' clean bytes (a short repr for hypothesis' failure reports)."""

    def __repr__(self) -> str:
        return "Fuzzed(store)"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Fuzzed:
    s = _build(tmp_path_factory.mktemp("fuzz") / "s")
    return Fuzzed((s, {p: p.read_bytes() for p in _files(s)}))


# a consume-queue entry's phys and size as damage leaves them: near the truth, or anything
_PHYS = st.one_of(st.integers(-300, 300).map(lambda d: ("delta", d)), st.integers(0, BIG).map(lambda v: ("set", v)),
                  st.integers(0, 400).map(lambda d: ("set", BIG - d)), st.sampled_from([("other", 0)]))
_SIZE = st.one_of(st.integers(-120, 120).map(lambda d: ("delta", d)),
                  st.integers(-2**31, 2**31 - 1).map(lambda v: ("set", v)),
                  st.sampled_from([("set", 110), ("set", 111), ("set", SEGMENT), ("set", SEGMENT + 1)]))
_LOG = st.tuples(st.integers(0, 10**9), st.sampled_from([0, 4, 12, 20, 28, 84, -1, -2, -20, -11, None]),
                 st.integers(0, 2**32 - 1))
_CQ = st.tuples(st.integers(0, QUEUES - 1), st.integers(0, 10**6), _PHYS, _SIZE)


def _damage(clean: dict[Path, bytes], s: Store, log_hits: list[tuple[int, int | None, int]],
            cq_hits: list[tuple[int, int, tuple[str, int], tuple[str, int]]]) -> None:
    files = dict((p, bytearray(b)) for p, b in clean.items())
    cqs = [s.queue("T", q).segment_path(0) for q in range(QUEUES)]
    entries = [list(F.CQ_ENTRY.iter_unpack(clean[p])) for p in cqs]
    records = [e for q in entries for e in q if e[1] > 0]
    for pick, field, value in log_hits:
        phys, size, _tags = records[pick % len(records)]
        seg = s.commitlog.segment_path(phys - phys % SEGMENT)
        data, at = files[seg], phys % SEGMENT
        if field is None:   # one bit anywhere in the record
            data[at + value % size] ^= 1 << (value % 8)
        else:               # a field (or the CRC property's bytes from the end) set to any value
            pos = at + field if field >= 0 else at + size + field
            data[pos:pos + 4] = value.to_bytes(4, "big")[:len(data[pos:pos + 4])]
    for q, k, (pk, pv), (sk, sv) in cq_hits:
        k %= len(entries[q])
        phys, size, tags = entries[q][k]
        phys = phys + pv if pk == "delta" else pv if pk == "set" else records[pv % len(records)][0]
        size = size + sv if sk == "delta" else sv
        F.CQ_ENTRY.pack_into(files[cqs[q]], k * F.CQ_ENTRY.size, max(min(phys, BIG), -2**63),
                             max(min(size, 2**31 - 1), -2**31), tags)
    for p, b in files.items():
        p.write_bytes(bytes(b))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(log_hits=st.lists(_LOG, max_size=3), cq_hits=st.lists(_CQ, max_size=3),
       max_bytes=st.sampled_from([0, 1, 3000, 60_000, 4 << 20]), count=st.sampled_from([2, 5, 1000]))
def test_both_loops_read_any_damage_alike(store: Fuzzed, monkeypatch: pytest.MonkeyPatch,
                                          log_hits: list[tuple[int, int | None, int]],
                                          cq_hits: list[tuple[int, int, tuple[str, int], tuple[str, int]]],
                                          max_bytes: int, count: int) -> None:
    s, clean = store
    try:
        _damage(clean, s, log_hits, cq_hits)
        want = _read(s, False, monkeypatch, max_bytes, count)
        assert _comparable(_read(s, True, monkeypatch, max_bytes, count)) == want
    finally:
        for p, b in clean.items():
            p.write_bytes(b)


@pytest.mark.parametrize("phys", [BIG - 100, BIG - 2**31, 2**62])
def test_an_entry_pointing_near_2_to_the_63_is_damage_not_a_crash(
        store: Fuzzed, monkeypatch: pytest.MonkeyPatch, phys: int) -> None:
    """phys - lo + size overflowed int64 in the C loop's bounds test: it read far outside the
    read (a segfault) instead of handing the entry back. (A run of 3 entries: all but the
    damaged one in the first segment, so the read is not cut before it.)"""
    s, clean = store
    try:
        _damage(clean, s, [], [(0, 1, ("set", phys), ("set", 350))])
        want = _read(s, False, monkeypatch, 4 << 20, 3)
        assert _comparable(_read(s, True, monkeypatch, 4 << 20, 3)) == want
    finally:
        for p, b in clean.items():
            p.write_bytes(b)


_I64 = st.integers(-2**63, 2**63 - 1)
_SMALL_OR_ANY = st.one_of(st.integers(-1, 1 << 21), _I64)
_ENTRY_FIELDS = st.tuples(st.one_of(st.integers(0, 1 << 20), _I64),
                          st.one_of(st.integers(1, 5000), st.integers(-2**31, 2**31 - 1)), _I64)


@pytest.mark.skipif(not columns.NATIVE, reason="the C loop is not built")
@settings(max_examples=300, deadline=None)
@given(entries=st.lists(_ENTRY_FIELDS, max_size=40), tail=st.binary(max_size=19), lo=_SMALL_OR_ANY,
       limit=_SMALL_OR_ANY, max_bytes=_SMALL_OR_ANY, ordered=st.booleans())
def test_cut_entries_in_c_takes_any_entries_as_the_python_loop_does(
        entries: list[tuple[int, int, int]], tail: bytes, lo: int, limit: int, max_bytes: int,
        ordered: bool) -> None:
    from store.log.nativecheck import cut_entries as c_cut
    raw = b"".join(F.CQ_ENTRY.pack(*e) for e in entries) + tail
    assert c_cut(raw, lo, limit, max_bytes, ordered) == consumequeue.cut_entries(raw, lo, limit, max_bytes, ordered)
