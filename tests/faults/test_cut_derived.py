"""Derived files cut, deleted or zeroed by hand in a store that was shut down cleanly (real
``mqctl`` processes, real files).

Nothing in the checkpoint says such a store needs recovery, so the first command that needs
the file looks at it (``store/log/queueends.py``, ``store/log/indexends.py``):

* a consume queue: the consumer gets every message the commit log has — in order, none
  twice, the group going on from its offset — and a writer never gives a new message an
  offset the log already holds;
* the key index: ``msg query`` and ``msg show`` find every message the log has;

each with one warning line saying what was repaired, and ``store check`` clean after. A
process that cannot write says what is wrong and that ``mqctl store recover`` repairs it
(``tests/faults/test_disk.py``, on a read-only mount).
"""
from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

import pytest

from store.layout import Layout
from store.log import format as F
from store.log.index import key_hash
from tests.procs import MQ, Result

N = 100
SEEN = 40   # what the group consumed before the damage


def _cq(mq: MQ) -> Path:
    return Layout(mq.root).queue_dir("t", 0) / f"{0:020d}"


def _zero(path: Path, first: int, count: int) -> None:
    with open(path, "r+b") as fh:
        fh.seek(first * 20)
        fh.write(bytes(20 * count))


# what each case does to the queue's only segment (entries 0..N-1, 20 bytes each)
DAMAGE = {
    "truncated": lambda p: os.truncate(p, SEEN * 20),
    "cut-mid-entry": lambda p: os.truncate(p, SEEN * 20 + 7),
    "deleted": lambda p: p.unlink(),
    "tail-zeroed": lambda p: _zero(p, N - 10, 10),          # the last entries' bytes lost
    "zeroes-appended": lambda p: _zero(p, N, 10),           # entries past the end, all zero
    "copies-appended": lambda p: _append(p, p.read_bytes()[:5 * 20]),   # its own first 5 entries again
    **{f"random-appended-{seed}": (lambda p, seed=seed: _append(p, random.Random(seed).randbytes(400)))
       for seed in (1, 3, 19)},
}


def _append(path: Path, data: bytes) -> None:
    with open(path, "ab") as fh:
        fh.write(data)


def _stored(mq: MQ) -> None:
    mq.ok("topic", "create", "t", "--queues", "1")
    mq.ok("send", "t", "--flush", "sync", input="".join(f"{i}\n" for i in range(1, N + 1)))
    assert mq.ok("consume", "t", "-g", "g", "--from", "first", "-c", str(SEEN)).out.split() == [
        str(i) for i in range(1, SEEN + 1)]


def _warnings(res: Result) -> list[str]:
    lines = [ln for ln in res.stderr.split("\n") if ln.strip()]
    assert all(ln.startswith("mqctl: warning: ") for ln in lines), str(res)
    return lines


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_cut_queue_is_repaired_by_its_first_reader(mq: MQ, case: str) -> None:
    _stored(mq)
    DAMAGE[case](_cq(mq))
    res = mq.ok("consume", "t", "-g", "g", "-e")
    assert res.out.split() == [str(i) for i in range(SEEN + 1, N + 1)], str(res)
    [warning] = _warnings(res)
    assert "consume queue t/0" in warning and "repaired from the commit log" in warning, warning
    assert f"now ends at offset {N}" in warning, warning
    # repaired on disk: the next command says nothing, a new group gets every message
    again = mq.ok("consume", "t", "-g", "other", "--from", "first", "-e")
    assert again.out.split() == [str(i) for i in range(1, N + 1)] and again.stderr == "", str(again)
    mq.check_clean()


def test_cut_queue_is_repaired_before_a_writer_appends(mq: MQ) -> None:
    _stored(mq)
    os.truncate(_cq(mq), SEEN * 20)
    sent = mq.ok("send", "t", "late", "--json")
    assert sent.json_lines()[0]["queueOffset"] == N, str(sent)   # not SEEN: that offset is taken
    [warning] = _warnings(sent)
    assert "consume queue t/0" in warning and "repaired" in warning, warning
    got = mq.drain("t", "fresh")
    assert [(e["queueOffset"], e["body"]) for e in got] == [(i, str(i + 1)) for i in range(N)] + [(N, "late")]
    mq.check_clean()


# entries past the queue's end that point at no record of theirs: copies of its own entries
# (they point at records of other offsets) and random bytes (far past the log's end, or of no
# valid form): seeds 3 and 19 put an entry of valid form last (19 first too), 1 does not
OVERLONG = {"copies": lambda p: _append(p, p.read_bytes()[:5 * 20]),
            **{f"random-{seed}": (lambda p, seed=seed, size=size: _append(p, random.Random(seed).randbytes(size)))
               for seed, size in ((1, 400), (3, 400), (19, 400), (7, 4000))}}


@pytest.mark.parametrize("case", sorted(OVERLONG))
def test_queue_with_entries_past_its_records_is_cut_before_a_writer_appends(mq: MQ, case: str) -> None:
    """The writer looks at the queue's end before its batch takes an offset: entries past the
    last one that points at its own record are cut, so the new message gets the next offset
    the log has not given (it used to get one past the junk, and the group stopped at the junk
    for good: recovery could not cut entries below a sound one)."""
    _stored(mq)
    OVERLONG[case](_cq(mq))
    sent = mq.ok("send", "t", "late", "--json")
    assert sent.json_lines()[0]["queueOffset"] == N, str(sent)
    [warning] = _warnings(sent)
    assert f"consume queue t/0 ({_cq(mq).parent}) ends at offset" in warning, warning
    assert f"its entries from offset {N} on point at no record of theirs" in warning, warning
    assert f"now ends at offset {N})" in warning, warning
    res = mq.ok("consume", "t", "-g", "g", "-e")
    assert res.out.split() == [str(i) for i in range(SEEN + 1, N + 1)] + ["late"] and res.stderr == "", str(res)
    got = mq.drain("t", "fresh")
    assert [(e["queueOffset"], e["body"]) for e in got] == [(i, str(i + 1)) for i in range(N)] + [(N, "late")]
    mq.check_clean()


@pytest.mark.parametrize("case", sorted(OVERLONG))
def test_queue_with_entries_past_its_records_is_the_queues_damage_for_check_and_recover(mq: MQ, case: str) -> None:
    """``store check`` blames the queue's file (not a commit log that lost records to a power
    cut), and ``store recover`` cuts the entries, rebuilding none."""
    _stored(mq)
    OVERLONG[case](_cq(mq))
    res = mq.run("store", "check")
    assert res.returncode == 1, str(res)
    assert "commit log ends" not in res.out + res.stderr, str(res)
    assert res.out.startswith(f"{_cq(mq)}:{N * 20}: entry {N} "), str(res)
    rec = mq.ok("store", "recover")
    assert "0 consume-queue entries rebuilt" in rec.stderr and "commit log ends" not in rec.stderr, str(rec)
    assert os.path.getsize(_cq(mq)) == N * 20
    mq.check_clean()
    assert mq.ok("send", "t", "late", "--json").json_lines()[0]["queueOffset"] == N


@pytest.mark.parametrize("damage", ["cut", "deleted"])
def test_queue_cut_under_a_running_writer_is_repaired_before_its_next_batch(mq: MQ, damage: str) -> None:
    """A writer keeps its queue's last segment open between batches: one found shorter than it
    left it, or removed, looks at the queue again, so its next message still gets the next
    free offset (a removed one used to make it start the queue again at 0)."""
    mq.ok("topic", "create", "t", "--queues", "1")
    feeder = mq.feed("t", "--flush", "sync")
    assert feeder.batch([str(i) for i in range(1, N + 1)])
    if damage == "cut":
        os.truncate(_cq(mq), SEEN * 20)
    else:
        _cq(mq).unlink()
    assert feeder.batch(["late"])
    assert feeder.close() == 0, feeder.stderr
    assert feeder.acked[-1]["queueOffset"] == N, feeder.acked[-1]
    assert "consume queue t/0" in feeder.stderr and "repaired" in feeder.stderr, feeder.stderr
    got = mq.drain("t", "fresh")
    assert [(e["queueOffset"], e["body"]) for e in got] == [(i, str(i + 1)) for i in range(N)] + [(N, "late")]
    mq.check_clean()


@pytest.mark.parametrize("then", ["nothing", "another-batch"])
def test_cut_queue_far_back_in_the_log_is_found_by_its_signs(mq: MQ, then: str) -> None:
    """More log than is always searched (``queueends.NEAR_RECORDS``) lies after the queue's last
    record: the file's times say it changed after the last batch (``ctime``), or, when other
    batches came since, after its last record was stored (``mtime``: here set 5 s on)."""
    _stored(mq)
    mq.ok("topic", "create", "u", "--queues", "1")
    mq.ok("send", "u", "--flush", "sync", input="".join(f"{'u' * 100}-{i}\n" for i in range(2200)))
    os.truncate(_cq(mq), SEEN * 20)
    if then == "another-batch":
        later = os.stat(_cq(mq)).st_mtime + 5
        os.utime(_cq(mq), (later, later))
        mq.ok("send", "u", "--flush", "sync", "one more")
    res = mq.ok("consume", "t", "-g", "g", "-e")
    assert res.out.split() == [str(i) for i in range(SEEN + 1, N + 1)], str(res)
    [warning] = _warnings(res)
    assert "consume queue t/0" in warning and f"now ends at offset {N}" in warning, warning
    mq.check_clean()


def test_sound_queues_cost_no_warning_and_no_repair(mq: MQ) -> None:
    """A store copied with new times (every file changed after the checkpoint) is looked at,
    found sound, and left alone: no warning, not a byte written."""
    _stored(mq)
    for p in sorted(Layout(mq.root).consumequeue_dir.rglob("*")):
        os.utime(p)   # (ctime and mtime: now)
    before = _cq(mq).read_bytes()
    res = mq.ok("consume", "t", "-g", "g", "-e")
    assert res.out.split() == [str(i) for i in range(SEEN + 1, N + 1)] and res.stderr == "", str(res)
    assert _cq(mq).read_bytes() == before


# -- the key index ----------------------------------------------------------------------------------

def _index_file(mq: MQ) -> Path:
    return Layout(mq.root).index_dir / f"{0:020d}"


def _send_late(mq: MQ) -> None:
    """Ten more messages with keys (the "older-copy" case puts the index file back as it was
    before them: a backup restored)."""
    mq.ok("send", "t", "--flush", "sync", "--input", "json",
          input="".join(f'{{"body": "late-{i}", "keys": ["late{i}"]}}\n' for i in range(10)))


INDEX_DAMAGE = {
    "deleted": lambda mq: _index_file(mq).unlink(),
    "directory-deleted": lambda mq: shutil.rmtree(Layout(mq.root).index_dir),
    "cut-in-entries": lambda mq: os.truncate(_index_file(mq), os.path.getsize(_index_file(mq)) - 50 * 20),
    "cut-in-slots": lambda mq: os.truncate(_index_file(mq), 1000),
}


def _keyed(mq: MQ) -> list[dict]:
    mq.ok("topic", "create", "t", "--queues", "2")
    mq.ok("send", "t", "--flush", "sync", "--input", "json",
          input="".join(f'{{"body": "{i}", "keys": ["k{i}"]}}\n' for i in range(N)))
    return mq.drain("t", "ids")


@pytest.mark.parametrize("case", sorted(INDEX_DAMAGE) + ["older-copy"])
def test_cut_key_index_is_repaired_by_the_first_lookup(mq: MQ, case: str) -> None:
    sent = _keyed(mq)
    if case == "older-copy":
        old = _index_file(mq).read_bytes()
        _send_late(mq)
        _index_file(mq).write_bytes(old)
        sent = mq.drain("t", "ids2")
    else:
        INDEX_DAMAGE[case](mq)
    by_key = {e["keys"][0]: e for e in sent}
    key = "late7" if case == "older-copy" else "k77"
    res = mq.ok("msg", "query", "--topic", "t", "--key", key, "--json")
    assert [e["msgId"] for e in res.json_lines()] == [by_key[key]["msgId"]], str(res)
    [warning] = _warnings(res)
    assert "key index" in warning and "repaired from the commit log" in warning, warning
    # repaired on disk: every message found by key and by id, without a word
    for e in (sent[0], sent[len(sent) // 2], sent[-1]):
        shown = mq.ok("msg", "show", e["msgId"], "--json")
        assert shown.json_lines()[0]["body"] == e["body"] and shown.stderr == "", str(shown)
        found = mq.ok("msg", "query", "--topic", "t", "--key", e["keys"][0], "--json")
        assert [x["msgId"] for x in found.json_lines()] == [e["msgId"]] and found.stderr == "", str(found)
    mq.check_clean()


@pytest.mark.parametrize("cut", [0, 1000, "in-entries"])
def test_key_index_cut_under_a_running_writer_costs_no_message(mq: MQ, cut: int | str) -> None:
    """A writer keeps the newest index file open between batches: one cut short under it (by
    hand) used to kill it with SIGBUS (the slot table was written through a map). Its next
    batch is stored and indexed (in a new file), the first lookup repairs the cut one, and
    every message is found by key."""
    mq.ok("topic", "create", "t", "--queues", "2")
    feeder = mq.feed("t", "--input", "json")
    assert feeder.batch([f'{{"body": "{i}", "keys": ["k{i}"]}}' for i in range(N)])
    size = os.path.getsize(_index_file(mq))
    os.truncate(_index_file(mq), size - 50 * 20 if cut == "in-entries" else cut)
    assert feeder.batch([f'{{"body": "late-{i}", "keys": ["late{i}"]}}' for i in range(10)])
    assert feeder.close() == 0, feeder.stderr
    assert feeder.stderr == ""
    ids = {e["msgId"] for e in feeder.acked}
    res = mq.ok("msg", "query", "--topic", "t", "--key", "k77", "--json")
    [warning] = _warnings(res)
    assert "key index" in warning and "repaired from the commit log" in warning, warning
    for key in ("k0", "k77", f"k{N - 1}", "late0", "late9"):
        found = mq.ok("msg", "query", "--topic", "t", "--key", key, "--json")
        [hit] = found.json_lines()
        assert hit["keys"] == [key] and hit["msgId"] in ids and found.stderr == "", str(found)
    mq.check_clean()


def _shift_slots(data: bytearray) -> None:
    """Every slot in use pointed 7 entries further: past the entries, or at another key's."""
    for at in range(40, 40 + 4 * 131072, 4):
        v = int.from_bytes(data[at:at + 4], "big")
        if v:
            data[at:at + 4] = (v + 7).to_bytes(4, "big")


def _chain_forward(data: bytearray) -> None:
    """Every entry's prevIndex pointed at itself (a chain that does not go back)."""
    count = int.from_bytes(data[36:40], "big")
    for n in range(1, count):
        at = 40 + 4 * 131072 + n * 20 + 16
        data[at:at + 4] = n.to_bytes(4, "big")


def _hash_flipped(data: bytearray) -> None:
    """Every entry's key hash changed (so none is of the slot whose chain holds it)."""
    count = int.from_bytes(data[36:40], "big")
    for n in range(1, count):
        at = 40 + 4 * 131072 + n * 20
        data[at + 3] ^= 0x01


@pytest.mark.parametrize("damage", [_shift_slots, _chain_forward, _hash_flipped], ids=lambda f: f.__name__[1:])
def test_key_index_damaged_in_its_middle_is_repaired_by_the_lookup_that_meets_it(mq: MQ, damage) -> None:
    """Slots or chains damaged inside a sound-looking file (its size and header fine): the
    lookup used to answer "no message" (exit 3) and "no messages" (exit 0) for keys the log
    has. The walk sees the damage, and the file is repaired from the log as a cut one is."""
    sent = _keyed(mq)
    data = bytearray(_index_file(mq).read_bytes())
    damage(data)
    _index_file(mq).write_bytes(bytes(data))
    e = sent[77]
    shown = mq.ok("msg", "show", e["msgId"], "--json")
    assert shown.json_lines()[0]["body"] == e["body"], str(shown)
    [warning] = _warnings(shown)
    assert "key index" in warning and "repaired from the commit log" in warning, warning
    for e in (sent[0], sent[len(sent) // 2], sent[-1]):
        found = mq.ok("msg", "query", "--topic", "t", "--key", e["keys"][0], "--json")
        assert [x["msgId"] for x in found.json_lines()] == [e["msgId"]] and found.stderr == "", str(found)
    mq.check_clean()


# Bits of an entry's phyOffset (bit 0 the lowest) that, flipped, move it a few bytes (into a
# record: none starts there), or far past the log's end.
_PHYS_BITS = (0, 2, 6, 40)


def _flip_phys(mq: MQ, key: str, phys: int, bit: int) -> int:
    """Flip ``bit`` of the phyOffset of the index entry of ``key`` for the record at ``phys``
    (its file's header and chains stay sound); the offset it names then."""
    path = _index_file(mq)
    data = bytearray(path.read_bytes())
    entries = F.INDEX_HEADER_SIZE + 4 * F.INDEX_SLOTS
    count = F.INDEX_HEADER.unpack_from(data, 0)[5]
    [at] = [at for at in range(entries + 20, entries + count * 20, 20)
            if F.INDEX_ENTRY.unpack_from(data, at)[:2] == (key_hash(key), phys)]
    F.INDEX_ENTRY.pack_into(data, at, key_hash(key), phys ^ (1 << bit), *F.INDEX_ENTRY.unpack_from(data, at)[2:])
    path.write_bytes(bytes(data))
    return phys ^ (1 << bit)


@pytest.mark.parametrize("seed", range(len(_PHYS_BITS)))
@pytest.mark.parametrize("entry", ["unique-key", "key"])
def test_key_index_entry_that_leads_to_no_record_is_repaired_by_the_lookup_that_meets_it(
        mq: MQ, entry: str, seed: int) -> None:
    """One bit of an entry's phyOffset flipped in a sound-looking file: ``msg show`` used to
    say there is no such message (exit 3), ``msg query`` "no messages" (exit 0), each time,
    as if the entry were a hash collision. No record starts where it leads, inside the log (or
    it is past the log's end): the index is damaged, and repaired from the log as a damaged
    chain is; the lookup then finds the message."""
    sent = _keyed(mq)
    rnd = random.Random(seed)
    e = sent[rnd.randrange(len(sent))]
    lookup = "#" + e["msgId"] if entry == "unique-key" else f"t#{e['keys'][0]}"
    now = _flip_phys(mq, lookup, e["commitLogOffset"], _PHYS_BITS[seed])
    assert now not in {x["commitLogOffset"] for x in sent}
    if entry == "unique-key":
        res = mq.ok("msg", "show", e["msgId"], "--json")
        assert [x["body"] for x in res.json_lines()] == [e["body"]], str(res)
    else:
        res = mq.ok("msg", "query", "--topic", "t", "--key", e["keys"][0], "--json")
        assert [x["msgId"] for x in res.json_lines()] == [e["msgId"]], str(res)
    [warning] = _warnings(res)
    assert "key index" in warning and f"entry at commit-log offset {now}," in warning, warning
    assert "repaired from the commit log" in warning, warning
    # repaired on disk: found by key and by id without a word
    shown = mq.ok("msg", "show", e["msgId"], "--json")
    assert shown.json_lines()[0]["body"] == e["body"] and shown.stderr == "", str(shown)
    found = mq.ok("msg", "query", "--topic", "t", "--key", e["keys"][0], "--json")
    assert [x["msgId"] for x in found.json_lines()] == [e["msgId"]] and found.stderr == "", str(found)
    mq.check_clean()


@pytest.mark.parametrize("how", ["cut-short", "missing", "zeroed"])
def test_a_hole_in_the_log_is_not_taken_for_the_key_indexs_damage(mq: MQ, how: str) -> None:
    """A middle segment cut short, gone or zeroed in part: index hits that lead into the hole
    are the log's damage. Taken for the index's, the repair dropped the index from the hit's
    file on and crashed on the hole (TypeError, exit 1), after which intact messages past the
    hole were "not found", and with the segment gone every lookup crashed."""
    shutil.rmtree(mq.root)   # (made anew with small segments)
    mq.ok("init", "--segment-size", "1MiB", "--max-message-size", "64KiB")
    n = 12000
    mq.ok("send", "h", "--input", "json",
          input="".join(f'{{"body": "{"x" * 200}{i}", "keys": ["h{i}"]}}\n' for i in range(n)))
    segment = Layout(mq.root).commitlog_dir / f"{1 << 20:020d}"
    assert segment.exists() and (Layout(mq.root).commitlog_dir / f"{3 << 20:020d}").exists()
    if how == "cut-short":
        os.truncate(segment, 300_000)
    elif how == "missing":
        segment.unlink()
    else:
        with open(segment, "r+b") as f:
            f.seek(200_000)
            f.write(bytes(300_000))
    for key in ("h10", "h5000", f"h{n - 10}"):   # before the hole, in it, past it
        res = mq.run("msg", "query", "--topic", "h", "--key", key, "--json")
        assert res.returncode in (0, 5), str(res)
        assert "Traceback" not in res.stderr and "internal error" not in res.stderr, str(res)
        assert "key index" not in res.stderr, str(res)   # (nothing blamed on it, nothing repaired)
        if key != "h5000":
            assert [json.loads(x)["keys"] for x in res.stdout.splitlines()] == [[key]], str(res)
    new = mq.ok("send", "h", "new", "-k", "after-hole")
    assert mq.ok("msg", "query", "--topic", "h", "--key", "after-hole").stdout.strip(), str(new)



def test_keys_of_records_recovery_cut_away_are_forgotten_not_taken_for_damage(mq: MQ) -> None:
    """A writer killed after its batch reached the index, and the log then cut inside the batch
    (a power cut before its flush): recovery forgets the batch's index entries, not only moves
    the file's end back. Left on their chains they led past the log's end and, once new records
    were written there, into the middle of them: lookups would take them for the index's
    damage and repair it, with a warning, for every such file."""
    mq.ok("topic", "create", "t", "--queues", "2")
    mq.ok("send", "t", "--flush", "sync", "--input", "json",
          input="".join(f'{{"body": "{i}", "keys": ["k{i}"]}}\n' for i in range(10)))
    with mq.store() as s:
        end = s.engine.commitlog.end()
    lost = mq.run("send", "t", "--input", "json", failpoints="put-after-index",
                  input="".join(f'{{"body": "lost-{i}", "keys": ["lost{i}"]}}\n' for i in range(20)))
    assert lost.returncode == -9, str(lost)
    os.truncate(Layout(mq.root).commitlog_dir / f"{0:020d}", end + 7)
    mq.run("send", "t", "--flush", "sync", "--input", "json",
           input="".join(f'{{"body": "new-{i}", "keys": ["new{i}"]}}\n' for i in range(20)))
    # (entry 0 unused; each message's unique key and key: none of the lost batch's)
    assert int.from_bytes(_index_file(mq).read_bytes()[36:40], "big") == 1 + 2 * (10 + 20)
    for key in ("lost0", "lost7", "lost19"):
        res = mq.ok("msg", "query", "--topic", "t", "--key", key, "--json")
        assert res.json_lines() == [] and res.stderr == "", str(res)
    for key in ("k0", "k9", "new0", "new7", "new19"):
        res = mq.ok("msg", "query", "--topic", "t", "--key", key, "--json")
        assert len(res.json_lines()) == 1 and res.stderr == "", str(res)
    mq.check_clean()
