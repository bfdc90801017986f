"""A damaged record, once ``store recover`` has reported it, is a known loss: ``store check``
lists it as known and exits 0, while damage not reported yet still exits 1 (real ``mqctl``
processes on a real store; bits flipped in the commit log's bytes).

Before, a bit flip in a record's body kept ``store check`` at exit 1 for ever: nothing could
repair the record, and nothing could say that the loss had been seen and accepted."""
from __future__ import annotations

import json
from pathlib import Path

from store.layout import Layout
from tests.procs import MQ, one_error


def _segment(mq: MQ) -> Path:
    return sorted((mq.root / "commitlog").iterdir())[0]


def _flip_body_of(mq: MQ, body: bytes) -> int:
    """Flip a bit in the body of the record holding ``body``; returns the byte flipped."""
    seg = _segment(mq)
    data = bytearray(seg.read_bytes())
    at = data.index(body)
    data[at] ^= 0x01
    seg.write_bytes(bytes(data))
    return at


def _check(mq: MQ) -> tuple[int, list[dict], dict]:
    res = mq.run("store", "check", "--json")
    *problems, summary = res.json_lines()
    return res.returncode, problems, summary


def test_recover_makes_a_damaged_record_a_known_loss_and_new_damage_still_fails(mq: MQ) -> None:
    mq.ok("topic", "create", "t", "--queues", "1")
    mq.ok("send", "t", "--flush", "sync", input="".join(f"message-{i:03d}\n" for i in range(20)))
    _flip_body_of(mq, b"message-005")
    assert mq.run("store", "check").returncode == 1
    rec = mq.ok("store", "recover")
    assert "could not recover" in rec.stderr, rec.stderr

    # the same damage again: known, exit 0, and a line says so
    res = mq.run("store", "check")
    assert res.returncode == 0, str(res)
    lines = res.out.splitlines()
    assert lines and all("(known: reported by store recover " in ln for ln in lines), res.out
    assert any(ln.startswith(str(_segment(mq))) and "record CRC mismatch" in ln for ln in lines), res.out
    assert "known problem" in res.stderr and "already reported" in res.stderr, res.stderr
    code, problems, summary = _check(mq)
    assert code == 0 and summary["status"] == "OK" and summary["problems"] == 0, summary
    assert summary["knownProblems"] == len(problems) >= 1 and all(p["known"] for p in problems), problems
    first_reported = {p["reportedAt"] for p in problems}
    assert len(first_reported) == 1
    # the loss is what it was: every other message is there, the damaged one never served
    out = mq.ok("consume", "t", "-g", "g", "--from", "first", "-e").out.split()
    assert out == [f"message-{i:03d}" for i in range(20) if i != 5]

    # a new damaged record is not known: exit 1, it alone is the problem
    _flip_body_of(mq, b"message-012")
    res = mq.run("store", "check")
    one_error(res, 1, "store check found 2 problems", allow_info=True)
    new = [ln for ln in res.out.splitlines() if "(known:" not in ln]
    assert len(new) == 2 and any("record CRC mismatch" in ln for ln in new), res.out
    code, problems, summary = _check(mq)
    assert code == 1 and summary["status"] == "DAMAGED" and summary["problems"] == 2, summary
    # recover reports it too; the first keeps the time it was first reported
    mq.ok("store", "recover")
    code, problems, summary = _check(mq)
    assert code == 0 and summary["knownProblems"] == 4, (summary, problems)
    assert len({p["reportedAt"] for p in problems}) == 2 and min(p["reportedAt"] for p in problems) in first_reported


def test_an_untrustworthy_known_damage_file_fails_safe(mq: MQ) -> None:
    """A known-damage file whose crc does not match is reported, and the damage it listed
    counts as new again (exit 1) until the next ``store recover`` writes it again."""
    mq.ok("send", "t", "--flush", "sync", input="".join(f"message-{i:03d}\n" for i in range(10)))
    _flip_body_of(mq, b"message-003")
    mq.ok("store", "recover")
    mq.ok("store", "check")
    path = Layout(mq.root).known_damage_json
    obj = json.loads(path.read_text())
    obj["ranges"][0]["end"] += 1000          # widened by hand: no longer what recover wrote
    path.write_text(json.dumps(obj))
    res = mq.run("store", "check")
    one_error(res, 1, "store check found", allow_info=True)
    assert f"{path}:0: cannot be trusted (crc mismatch" in res.out, res.out
    assert "record CRC mismatch" in res.out and "(known:" not in res.out, res.out
    mq.ok("store", "recover")
    mq.ok("store", "check")


def test_recover_of_a_sound_store_leaves_no_known_damage(mq: MQ) -> None:
    mq.ok("send", "t", "--flush", "sync", input="a\nb\n")
    mq.ok("store", "recover")
    assert not Layout(mq.root).known_damage_json.exists()
    res = mq.ok("store", "check")
    assert "known" not in res.stderr and res.out == "", str(res)


def test_check_steps_over_a_record_whose_total_size_runs_past_the_end_and_checks_the_rest(mq: MQ) -> None:
    # (a live check took such a record for one a writer was adding: it stopped there, so a
    # flip further on went unseen, and after recover the entries past it stayed problems)
    mq.ok("topic", "create", "t", "--queues", "1")
    mq.ok("send", "t", "--queue", "0", input="".join(f"msg-{i:03d}\n" for i in range(1, 101)))
    seg = _segment(mq)
    data = bytearray(seg.read_bytes())
    start = data.index(b"msg-050") - 88
    data[start:start + 4] = (99999).to_bytes(4, "big")
    data[data.index(b"msg-080") + 5] ^= 0x01
    seg.write_bytes(bytes(data))
    code, problems, summary = _check(mq)
    assert code == 1 and summary["records"] == 98, summary
    log = [(p["offset"], p["reason"]) for p in problems if "commitlog" in p["file"]]
    assert log[0] == (start, "record of 99999 bytes runs past the end") and len(log) == 2, problems
    assert "CRC" in log[1][1], problems
    assert len(problems) == 4, problems   # (and the two entries pointing at them, nothing else)
    assert mq.run("store", "recover").returncode == 0
    code, problems, summary = _check(mq)
    assert code == 0 and summary["records"] == 98 and summary["problems"] == 0, summary
    assert len(problems) == 4 and all(p["known"] for p in problems), problems
    got = mq.ok("consume", "t", "-g", "g", "--from", "first", "-e").stdout.split()
    assert len(got) == 98 and b"msg-050" not in got and b"msg-080" not in got
