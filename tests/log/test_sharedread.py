"""A shared read without numpy (``store/log/sharedread.py``): a member of several queues
reads each window of the log once for all of them, below the backlog that pays for numpy's
import too, checking every record by the exact loop; what it serves equals each queue's own
pull, a damaged record is named and skipped, and numpy is not imported. (Full reads, every
column, are served together with the C check loop, and left to each queue's own pull without
it.)

Run in a child interpreter: this one may have numpy loaded already (other tests), and a
shared read with numpy loaded takes the array path."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from store.log import columns
from tests.procs import mqctl_env

CHILD = r"""
import json, sys
from pathlib import Path
import store
from store.log import columns, consumequeue
from store.log.messagestore import Store

root, size, damage = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"
if sys.argv[4] == "python":
    columns._native, columns.NATIVE = None, False
    consumequeue.take_entries = consumequeue.cut_entries
with store.Producer(root) as p:
    for i in range(0, 800, 40):
        p.send_many("T", [b"%05d" % j + b"x" * (size + j % 50) for j in range(i, i + 40)])
s = Store.open(root)
n = s.topic("T").queues
victim = None
if damage:   # flip a body byte of queue 1's tenth record: only its record CRC tells
    victim = s.pull_records("T", 1, 10, 1).phys[0]
    with open(s.commitlog.segment_path(0), "r+b") as fh:
        fh.seek(victim + 88 + 3)
        b = fh.read(1)
        fh.seek(victim + 88 + 3)
        fh.write(bytes([b[0] ^ 0xFF]))
out = {"served": 0, "equal": True, "damaged": [], "kinds": []}
# a full read (every column): served with the C loop, else left to each queue's own pull
full = s.pull_many("T", [(q, 0, 64, 1 << 20) for q in range(n)], True)
out["full_served"] = len(full)
out["full_equal"] = True
for q, c in full.items():
    own = s.pull_records("T", q, 0, len(c))
    out["full_equal"] &= [c.offsets, c.bodies, c.born, c.stored, c.props, c.phys, c.reconsume, c.damaged] == [
        own.offsets, own.bodies, own.born, own.stored, own.props, own.phys, own.reconsume, own.damaged]
out["native"] = columns.NATIVE
# bodies only (a raw consumer's reads), window by window
offsets = {q: 0 for q in range(n)}
got = {q: [] for q in range(n)}
while True:
    runs = s.pull_many("T", [(q, offsets[q], 64, 1 << 20) for q in range(n) if offsets[q] < s.max_offset("T", q)])
    if not runs:
        break
    out["served"] += len(runs)
    for q, c in runs.items():
        got[q] += [bytes(b) for b in c.bodies]
        out["kinds"] += sorted({type(b).__name__ for b in c.bodies})
        out["damaged"] += [[q, o] for o, _why in c.damaged]
        offsets[q] = c.next_offset
for q in range(n):
    own = s.pull_columns("T", q, 0, 10 ** 6)
    out["equal"] &= offsets[q] == s.max_offset("T", q) and got[q] == [bytes(b) for b in own.bodies]
out["numpy"] = "numpy" in sys.modules
print(json.dumps(out))
"""


def _child(tmp_path: Path, size: int, damage: bool = False, loop: str = "c") -> dict:
    p = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "s"), str(size), "1" if damage else "0", loop],
                       capture_output=True, text=True, env=mqctl_env(None), timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout)


@pytest.mark.parametrize("loop", ["c", "python"])
def test_small_records_of_several_queues_are_read_together_without_numpy(tmp_path: Path, loop: str) -> None:
    if loop == "c" and not columns.NATIVE:
        pytest.skip("the C check loop is not built")
    out = _child(tmp_path, 300, loop=loop)
    assert out["served"] > 0 and out["equal"] and not out["damaged"] and not out["numpy"]
    assert out["full_served"] == (8 if loop == "c" else 0) and out["full_equal"]


def test_big_bodies_come_as_views_from_a_shared_read(tmp_path: Path) -> None:
    out = _child(tmp_path, 3000)
    assert out["served"] > 0 and out["equal"]
    assert "memoryview" in out["kinds"]
    assert not out["numpy"]


def test_a_damaged_record_in_a_shared_read_is_named_and_skipped(tmp_path: Path) -> None:
    out = _child(tmp_path, 300, damage=True)
    # queue 1's offset 10 is left out, everything else equal to the own pulls, which skip it too
    assert out["damaged"] == [[1, 10]]
    assert out["equal"] and not out["numpy"]


WINDOWS = r"""
import json, sys
from pathlib import Path
import store
from store.log.messagestore import Store

root = Path(sys.argv[1])
with store.Producer(root) as p:   # 8 queues, 1,600 records of ~3 KiB: 5 MB of log
    for i in range(0, 1600, 100):
        p.send_many("T", [b"%05d" % j + b"y" * (3000 + j % 70) for j in range(i, i + 100)])
s = Store.open(root)
n = s.topic("T").queues
offsets = {q: 0 for q in range(n)}
got = {q: [] for q in range(n)}
reads = []
while True:
    runs = s.pull_many("T", [(q, offsets[q], 10 ** 6, 1 << 30) for q in range(n) if offsets[q] < s.max_offset("T", q)])
    if not runs:
        break
    spans = []
    for q, c in runs.items():
        ends = [s.pull_records("T", q, o, 1).phys[0] for o in (c.offsets[0], c.offsets[-1])]
        spans.append(ends[0])
        spans.append(ends[1] + len(c.bodies[-1]) + 200)
        got[q] += [bytes(b) for b in c.bodies]
        offsets[q] = c.next_offset
    reads.append(max(spans) - min(spans))
equal = all(offsets[q] == s.max_offset("T", q) and got[q] == [bytes(b) for b in s.pull_columns("T", q, 0, 10 ** 6).bodies]
            for q in range(n))
print(json.dumps({"reads": reads, "equal": equal, "numpy": "numpy" in sys.modules}))
"""


def test_a_shared_read_without_numpy_takes_the_log_in_windows_a_core_s_cache_holds(tmp_path: Path) -> None:
    # The exact loop checks its window record by record after the window was copied in: a
    # window of 2 MiB is read back from a core's own cache, one of 8 MiB is not (measured
    # 25 % slower). Every record is still served, once, equal to each queue's own pull.
    p = subprocess.run([sys.executable, "-c", WINDOWS, str(tmp_path / "s")], capture_output=True, text=True,
                       env=mqctl_env(None), timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout)
    assert out["equal"] and not out["numpy"]
    assert len(out["reads"]) >= 3 and max(out["reads"]) <= 2 * 1024 * 1024
