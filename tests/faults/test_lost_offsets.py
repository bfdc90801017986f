"""The clustering offset table beyond reading: both copies of ``config/consumerOffset.json``
unreadable and no offsets journal that vouches for them (none, or junk). The groups the store
shows (their queue-lock directories name their topics) must not vanish without a word nor
start again per ``--from`` (that skips what they had not consumed): their commands fail
(exit 5, naming ``store recover``), ``store check`` names them, and ``store recover`` resets
them to the oldest message. Absence (a new store, the config deleted by hand) is not loss."""
from __future__ import annotations

import json
import shutil

from tests.procs import MQ

FILES = ("consumerOffset.json", "consumerOffset.json.bak", "consumerOffset.log")


def _consumed_four_of_fifteen(mq: MQ) -> None:
    mq.ok("send", "t", "--queue", "0", input="".join(f"{i}\n" for i in range(1, 11)))
    mq.ok("consume", "t", "-g", "g", "--from", "first", "-c", "4")
    mq.ok("send", "t", "--queue", "0", input="".join(f"{i}\n" for i in range(11, 16)))


def _refused_then_reset(mq: MQ) -> None:
    res = mq.run("offsets", "show", "-g", "g")
    assert res.returncode == 5 and "mqctl store recover" in res.stderr and "group g" in res.stderr, res
    res = mq.run("consume", "t", "-g", "g", "-e")
    assert res.returncode == 5 and res.stdout == b"" and "mqctl store recover" in res.stderr, res
    res = mq.run("store", "check")
    assert res.returncode == 1 and "group(s) g" in res.out, res
    res = mq.run("store", "recover")
    assert res.returncode == 0 and "group g: offsets of topic t could not be recovered; reset to the oldest" \
        in res.stderr, res
    assert mq.run("store", "check").returncode == 0
    got = mq.ok("consume", "t", "-g", "g", "-e").stdout.decode().split()
    assert sorted(got, key=int) == [str(i) for i in range(1, 16)], got   # delivered again, none skipped


def test_junk_table_copies_and_journal_refuse_the_group_and_recover_resets_it_to_the_oldest(mq: MQ) -> None:
    _consumed_four_of_fifteen(mq)
    for name in FILES:
        (mq.root / "config" / name).write_bytes(b"junk\n")
    _refused_then_reset(mq)


def test_cut_copies_and_a_flipped_byte_in_the_journals_first_record_are_the_same_loss(mq: MQ) -> None:
    _consumed_four_of_fifteen(mq)
    config = mq.root / "config"
    for name in FILES[:2]:
        data = (config / name).read_bytes()
        (config / name).write_bytes(data[:5])   # (cut before any group's name)
    journal = bytearray((config / FILES[2]).read_bytes())
    journal[16 + 8 + 3] ^= 0x20   # a byte of the first (full) record's payload
    (config / FILES[2]).write_bytes(bytes(journal))
    _refused_then_reset(mq)


def test_a_group_new_since_the_damage_goes_on_and_its_commit_keeps_the_lost_one_refused(mq: MQ) -> None:
    # (its consumer makes its queue locks before it reads its offsets: it is not taken for a
    # group whose offsets were lost, and its commit writes the table with the lost one named)
    _consumed_four_of_fifteen(mq)
    for name in FILES:
        (mq.root / "config" / name).write_bytes(b"junk\n")
    assert len(mq.ok("consume", "t", "-g", "other", "--from", "first", "-e").stdout.split()) == 15
    table = json.loads((mq.root / "config" / FILES[0]).read_bytes())
    assert table["lostOffsets"] == ["t@g"], table
    assert mq.run("consume", "t", "-g", "g", "-e").returncode == 5
    assert mq.run("store", "recover").returncode == 0
    assert len(mq.ok("consume", "t", "-g", "g", "-e").stdout.split()) == 15
    assert mq.ok("consume", "t", "-g", "other", "-e").stdout == b""


def test_offsets_deleted_by_hand_start_per_from(mq: MQ) -> None:
    _consumed_four_of_fifteen(mq)
    for name in FILES:
        (mq.root / "config" / name).unlink()
    assert mq.ok("consume", "t", "-g", "g", "--from", "last", "-e").stdout == b""
    assert mq.ok("store", "check").returncode == 0


def test_groups_whose_topics_the_store_does_not_show_leave_every_group_refused_until_recover(mq: MQ) -> None:
    mq.ok("topic", "create", "T", "--queues", "2")
    mq.ok("send", "T", "a")
    mq.ok("consume", "T", "-g", "billing", "--from", "first", "-e")
    mq.ok("consume", "T", "-g", "audit", "--from", "first", "-e", "--broadcast")   # (its own offsets)
    shutil.rmtree(mq.root / "locks" / "billing" / "T")   # (no topic of its left)
    config = mq.root / "config"
    for name in FILES[:2]:
        (config / name).write_bytes(b"\x00garbage")
    (config / FILES[2]).unlink()
    res = mq.run("store", "check")
    assert res.returncode == 1, res
    named = [ln for ln in res.out.splitlines() if "the committed offsets of group billing are in no readable copy" in ln]
    assert len(named) == 1 and "audit" not in named[0], res.out
    assert mq.run("offsets", "show", "-g", "billing").returncode == 5
    res = mq.run("store", "recover")
    assert res.returncode == 0, res
    assert "the committed offsets of group billing are lost" in res.stderr, res
    assert mq.run("store", "check").returncode == 0
    assert mq.run("progress", "-g", "billing").returncode == 0   # still a group the store knows


def test_a_group_whose_only_journal_records_are_past_a_damaged_one_is_lost_not_new(mq: MQ) -> None:
    # (the journal's first record, the whole table, has g; h came after: with the copies cut
    # and h's first record damaged, nothing is left of h, which must not start per --from)
    _consumed_four_of_fifteen(mq)
    mq.ok("consume", "t", "-g", "h", "--from", "first", "-c", "6")
    config = mq.root / "config"
    journal = bytearray((config / FILES[2]).read_bytes())
    journal[journal.index(b'"t@h"') + 2] ^= 0x01   # (its first record naming h: the CRC fails)
    for name in FILES[:2]:
        (config / name).write_bytes((config / name).read_bytes()[:5])
    (config / FILES[2]).write_bytes(bytes(journal))
    res = mq.run("consume", "t", "-g", "h", "-e")
    assert res.returncode == 5 and res.stdout == b"" and "group h" in res.stderr, res
    assert mq.run("store", "recover").returncode == 0
    got = mq.ok("consume", "t", "-g", "h", "-e").stdout.split()
    assert len(got) == 15, got   # delivered again from the oldest, none skipped
