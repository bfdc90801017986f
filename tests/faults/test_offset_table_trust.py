"""Which of the clustering offset table (``config/consumerOffset.json``) and its journal
(``config/consumerOffset.log``) wins when they disagree. The journal is the log, the table a
file derived from it: a table nobody vouches for (its crc taken out, whatever ``journalEnd``
it names) is never used over the journal, by readers or by ``store recover``, which writes it
again; a trusted table readers use is what ``store recover`` writes the journal again from.
Either way ``store check`` reports the disagreement until ``store recover``, then exits 0."""
from __future__ import annotations

import json

from store import fsutil
from tests.procs import MQ

TABLE = "config/consumerOffset.json"


def _consumed_four_of_ten(mq: MQ) -> None:
    mq.ok("topic", "create", "t", "--queues", "1")
    mq.send_lines("t", [f"m{i}" for i in range(10)])
    got = mq.ok("consume", "t", "-g", "g", "--from", "first", "-c", "4").stdout.split()
    assert got == [b"m0", b"m1", b"m2", b"m3"], got


def _offset(mq: MQ) -> tuple[int, str]:
    res = mq.ok("offsets", "show", "-g", "g", "--json")
    return res.json_lines()[0]["offset"], res.stderr


def _edit(mq: MQ, offset: int, *, crc: bool) -> None:
    path = mq.root / TABLE
    obj = json.loads(path.read_bytes())
    assert obj["offsetTable"]["t@g"] == {"0": 4} and "journalEnd" in obj, obj
    del obj["crc"]
    obj["offsetTable"]["t@g"]["0"] = offset
    path.write_text(json.dumps(fsutil.with_crc(obj) if crc else obj))
    path.with_name(path.name + ".bak").unlink(missing_ok=True)


def test_a_table_without_its_crc_is_not_used_over_the_journal_and_recover_converges(mq: MQ) -> None:
    """It was used as it was (offset 1: m1..m3 delivered again; a larger one skips messages),
    ``store check`` reported 'disagrees with the offsets journal' and ``store recover`` left
    it, so check failed for ever."""
    _consumed_four_of_ten(mq)
    _edit(mq, 1, crc=False)
    offset, err = _offset(mq)
    assert offset == 4, "the journal says 4: the table without its crc is not vouched for"
    assert "consumerOffset.json is damaged; offsets come from the offsets journal" in err, err
    res = mq.run("store", "check")
    assert res.returncode == 1 and "no crc field" in res.out, res
    assert mq.ok("store", "recover").returncode == 0
    mq.check_clean()
    table = json.loads((mq.root / TABLE).read_bytes())
    assert fsutil.crc_problem(table) is None and table["offsetTable"]["t@g"] == {"0": 4}, table
    assert _offset(mq) == (4, "")
    got = mq.ok("consume", "t", "-g", "g", "-e").stdout.split()
    assert got == [f"m{i}".encode() for i in range(4, 10)], got


def test_a_table_without_its_crc_and_no_journal_is_an_older_versions_and_is_used(mq: MQ) -> None:
    _consumed_four_of_ten(mq)
    _edit(mq, 2, crc=False)
    (mq.root / "config" / "consumerOffset.log").unlink()
    assert _offset(mq) == (2, "")
    mq.check_clean()
    got = mq.ok("consume", "t", "-g", "g", "-e").stdout.split()
    assert got == [f"m{i}".encode() for i in range(2, 10)], got
    table = json.loads((mq.root / TABLE).read_bytes())
    assert fsutil.crc_problem(table) is None, "the first write gives it its crc"
    mq.check_clean()


def test_a_trusted_table_that_disagrees_with_its_journal_is_what_recover_keeps(mq: MQ) -> None:
    """Readers use the snapshot (they read the journal only past its journalEnd); recover
    wrote nothing, so check reported it for ever. Now recover writes the journal from it."""
    _consumed_four_of_ten(mq)
    _edit(mq, 6, crc=True)
    assert _offset(mq) == (6, "")
    res = mq.run("store", "check")
    assert res.returncode == 1 and "disagrees with the offsets journal" in res.out, res
    res = mq.ok("store", "recover")
    assert "replays to other offsets than" in res.stderr, res   # (said, not done silently)
    mq.check_clean()
    assert _offset(mq) == (6, "")
    got = mq.ok("consume", "t", "-g", "g", "-e").stdout.split()
    assert got == [f"m{i}".encode() for i in range(6, 10)], got


def test_zeros_in_the_synced_middle_of_the_journal_are_damage_check_reports(mq: MQ) -> None:
    """A KiB of zeros written over the middle of ``consumerOffset.log`` passed ``store check``:
    zeros before valid records were taken for what a power cut leaves, but the table's
    ``journalEnd`` says the journal was synced up to there, which no power cut zeroes. Readers
    (the table holds those commits) and ``store recover`` (the journal written again from the
    table) keep every offset; the journal alone vouches for them again after it."""
    mq.ok("topic", "create", "T", "--queues", "32")
    mq.send_lines("T", [f"m{i}" for i in range(320)])
    for group in "abcd":
        mq.ok("consume", "T", "-g", group, "--from", "first", "-e")
    log = mq.root / "config" / "consumerOffset.log"
    data = bytearray(log.read_bytes())
    assert len(data) > 2048 and json.loads((mq.root / TABLE).read_bytes())["journalEnd"] == len(data) - 16
    data[512:1536] = bytes(1024)
    log.write_bytes(bytes(data))
    want = {g: mq.offsets(g, "T") for g in "abcd"}
    assert all(sum(o.values()) == 320 for o in want.values()), want
    res = mq.run("store", "check")
    assert res.returncode == 1 and f"{log}:" in res.out and "offsets journal damaged" in res.out, res
    assert "below the offset table's journalEnd" in res.out, res
    mq.ok("store", "recover")
    mq.check_clean()
    for copy in (mq.root / TABLE, mq.root / (TABLE + ".bak")):
        copy.unlink()
    assert {g: mq.offsets(g, "T") for g in "abcd"} == want
