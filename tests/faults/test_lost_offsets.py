"""The clustering offset table beyond reading: both copies of ``config/consumerOffset.json``
unreadable as a whole (no group name left in them) and no offsets journal. The groups the
store knows from their directories must not vanish without a word: ``store check`` names
them, and ``store recover`` (which starts the table empty) says whose offsets it lost; the
groups stay known."""
from __future__ import annotations

from tests.procs import MQ


def test_groups_whose_offsets_no_copy_holds_are_named_by_check_and_recover(mq: MQ) -> None:
    mq.ok("topic", "create", "T", "--queues", "2")
    mq.ok("send", "T", "a")
    mq.ok("consume", "T", "-g", "billing", "--from", "first", "-e")
    mq.ok("consume", "T", "-g", "audit", "--from", "first", "-e", "--broadcast")   # (its own offsets)
    config = mq.root / "config"
    for name in ("consumerOffset.json", "consumerOffset.json.bak"):
        (config / name).write_bytes(b"\x00garbage")
    (config / "consumerOffset.log").unlink()
    res = mq.run("store", "check")
    assert res.returncode == 1, res
    named = [ln for ln in res.out.splitlines() if "the committed offsets of group billing are in no readable copy" in ln]
    assert len(named) == 1 and "audit" not in named[0], res.out
    res = mq.run("store", "recover")
    assert res.returncode == 0, res
    assert "the table starts empty: the committed offsets of group billing are lost" in res.stderr, res
    assert mq.run("store", "check").returncode == 0
    assert mq.run("progress", "-g", "billing").returncode == 0   # still a group the store knows
