"""The delay scheduler reads when a parked message is due from its consume-queue entry's tag
code (RocketMQ's trick), which is derived data: a damaged code never delivers a message early
and never holds a level back past what its record says (real files; one code changed by hand).

Before, one flipped high bit in the code of a level's first message held it, and every later
message of that level, back for years; a code flipped down delivered a message an hour early."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

import pytest

from store import names
from store.client.clocks import DelayClock
from store.log import format as F
from store.log import schedule
from store.log.format import FREE_QUEUE
from store.log.messagestore import Store
from store.log.record import PROP_DELIVER_MS, Draft
from store.log.schedule import LEVEL_MS, delay_draft, deliver_due, next_due

LEVEL = 2          # 5 s: queue 1 of the schedule topic


def _park(store: Store, bodies: list[bytes], level: int = LEVEL, now: int = 1_000_000) -> None:
    store.create_topic("T", 1)
    store.put([delay_draft(Draft("T", b, queue_id=0), (level, LEVEL_MS[level - 1]), store, now_ms=now)
               for b in bodies])


def _code(store: Store, qid: int, entry: int, change: Callable[[int], int]) -> None:
    path = store.layout.queue_dir(names.SCHEDULE_TOPIC, qid) / F.segment_name(0)
    with open(path, "r+b") as fh:
        fh.seek(entry * F.CQ_ENTRY_SIZE)
        phys, size, code = F.CQ_ENTRY.unpack(fh.read(F.CQ_ENTRY_SIZE))
        fh.seek(entry * F.CQ_ENTRY_SIZE)
        fh.write(F.CQ_ENTRY.pack(phys, size, change(code)))


def _delivered(root: Path) -> list[bytes]:
    with Store.open(root) as s:
        return [m.body for m in s.iter_queue("T", 0, 0)]


def test_a_code_flipped_years_ahead_holds_nothing_back(root: Path) -> None:
    with Store.open(root, create=True) as store:
        _park(store, [b"first", b"second"])
        _code(store, LEVEL - 1, 0, lambda c: c ^ (1 << 45))   # ~1,100 years later
    with Store.open(root) as store:
        due = 1_000_000 + LEVEL_MS[LEVEL - 1]
        assert next_due(store) == due
        assert deliver_due(store, now_ms=due - 1) == 0
        assert deliver_due(store, now_ms=due) == 2
    assert _delivered(root) == [b"first", b"second"]


def test_a_code_flipped_down_delivers_nothing_early(root: Path) -> None:
    with Store.open(root, create=True) as store:
        _park(store, [b"first", b"second"])
        _code(store, LEVEL - 1, 0, lambda c: 0)   # the first says "due since 1970"
        parked = list(store.iter_queue(names.SCHEDULE_TOPIC, LEVEL - 1, 0))
        due = int(parked[0].properties[PROP_DELIVER_MS])
    with Store.open(root) as store:
        assert deliver_due(store, now_ms=due - 1) == 0
    with Store.open(root) as store:
        assert deliver_due(store, now_ms=due) == 2
    assert _delivered(root) == [b"first", b"second"]


def test_a_code_flipped_ahead_over_a_damaged_record_holds_nothing_back(root: Path) -> None:
    """The record that would say when it is due cannot be read either: the entry is passed
    over, saying why, and the level's later messages go (they waited behind it for good)."""
    with Store.open(root, create=True) as store:
        _park(store, [b"first", b"second"])
        _code(store, LEVEL - 1, 0, lambda c: c ^ (1 << 45))
        phys, size, _code_ = F.CQ_ENTRY.unpack(
            (store.layout.queue_dir(names.SCHEDULE_TOPIC, LEVEL - 1) / F.segment_name(0)).read_bytes()[:F.CQ_ENTRY_SIZE])
    with open(root / "commitlog" / F.segment_name(0), "r+b") as fh:   # one byte of its body
        fh.seek(phys + size - 40)
        b = fh.read(1)
        fh.seek(phys + size - 40)
        fh.write(bytes([b[0] ^ 0xFF]))
    warned: list[str] = []
    with Store.open(root, warn=warned.append) as store:
        assert deliver_due(store, now_ms=1_000_000 + LEVEL_MS[LEVEL - 1]) == 2
    assert _delivered(root) == [b"second"]
    assert any("delay scheduler: skipping" in w and "CRC" in w for w in warned), warned


@pytest.mark.parametrize("level", [18, 0], ids=["level", "free"])
def test_a_code_flipped_down_wakes_no_pass_until_its_record_is_due(
        root: Path, monkeypatch: pytest.MonkeyPatch, level: int) -> None:
    """A code flipped down (the entry says due since 1970, its record in two hours): once a
    pass has read the record, the next delivery time is the record's, so a waiting consumer's
    delay clock runs no pass at its wake-ups until then. Before, the next time came from the
    code again: a pass at every wake-up (each 0.2 s), each reading the record to find it not due."""
    qid = FREE_QUEUE if level == 0 else level - 1
    with Store.open(root, create=True) as store:
        store.create_topic("T", 1)
        store.put([delay_draft(Draft("T", b, queue_id=0), (level, LEVEL_MS[17]), store)
                   for b in (b"first", b"second")])
        _code(store, qid, 0, lambda c: 0)
        due = int(next(store.iter_queue(names.SCHEDULE_TOPIC, qid, 0)).properties[PROP_DELIVER_MS])
        assert due > int(time.time() * 1000) + 3_600_000
    passes: list[int] = []
    real = schedule._pass

    def counted(*a: Any) -> int:
        passes.append(1)
        return real(*a)
    monkeypatch.setattr(schedule, "_pass", counted)
    with Store.open(root) as store:
        clock, at = DelayClock(store), 0.0
        for _ in range(20):   # the consumer loop's wake-ups, each when the clock asks for one
            clock.deliver(at)
            at = clock.at
        assert (len(passes), next_due(store)) == (1, due)
    assert _delivered(root) == []
