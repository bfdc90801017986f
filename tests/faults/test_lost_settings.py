"""``store.json`` and its ``.bak`` both unreadable: every command fails (exit 5) and says to
run ``mqctl store recover``, which rebuilds the file from what the store shows (the segment
sizes from the segments' names, the other settings at their defaults, each said), so that the
store is readable again with nothing lost; where the segments cannot tell, it refuses,
saying what to do. ``store check`` stays read-only."""
from __future__ import annotations

import json
from pathlib import Path

from tests.procs import MQ, one_error

N = 3000


def _small_segments(mq: MQ) -> dict:
    mq.ok("init", "--max-message-size", "1KiB", "--segment-size", "70000")
    mq.ok("send", "t", input="".join(f"message-{i:05d}\n" for i in range(N)))
    assert len(list((mq.root / "commitlog").iterdir())) > 2
    settings = json.loads((mq.root / "store.json").read_bytes())
    for name in ("store.json", "store.json.bak"):
        (mq.root / name).write_bytes(b"junk\n")
    return settings


def test_lost_store_json_is_rebuilt_by_recover_from_the_segments(tmp_path: Path) -> None:
    mq = MQ(tmp_path / "small", tmp_path)
    before = _small_segments(mq)
    for args in (("store", "check"), ("consume", "t", "-g", "g", "-e")):
        msg = one_error(mq.run(*args), 5)
        assert "store.json" in msg and "mqctl store recover" in msg, msg
    assert (mq.root / "store.json").read_bytes() == b"junk\n"   # (check changed nothing)
    res = mq.run("store", "recover")
    assert res.returncode == 0, res
    assert "rebuilt from the store's files" in res.stderr and "segment size 70000 (from the segments' names)" \
        in res.stderr, res
    after = json.loads((mq.root / "store.json").read_bytes())
    assert after["commitlogSegmentSize"] == before["commitlogSegmentSize"] == 70000, after
    assert after["cqSegmentEntries"] == before["cqSegmentEntries"], after
    assert json.loads((mq.root / "store.json.bak").read_bytes()) == after
    mq.check_clean()
    assert len(mq.ok("consume", "t", "-g", "g", "--from", "first", "-e").stdout.split()) == N


def test_segments_that_cannot_tell_the_size_are_refused_with_what_to_do(tmp_path: Path) -> None:
    mq = MQ(tmp_path / "small", tmp_path)
    _small_segments(mq)
    segs = sorted((mq.root / "commitlog").iterdir())
    segs[1].rename(segs[1].with_name(f"{int(segs[1].name) + 10:020d}"))   # (steps now disagree)
    msg = one_error(mq.run("store", "recover"), 5)
    assert "commit-log segment size cannot be told" in msg and "put back a copy of store.json" in msg, msg
    assert (mq.root / "store.json").read_bytes() == b"junk\n"
