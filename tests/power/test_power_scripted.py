"""Scripted power-loss regressions (cases A, B, C, F2) and the async control.

Each test cuts the power with ``lazyfs::clear-cache`` at a chosen moment, checks every
invariant of :meth:`powerlib.Power.verify`, sends new ``--flush sync`` messages that every
group must deliver, cuts a second time and checks again.
"""
from __future__ import annotations

import pytest

from store.layout import Layout
from store.log import checkpoint as ckpt
from tests.power.powerlib import Power, wait_for

pytestmark = [pytest.mark.power, pytest.mark.slow]

# The smallest segments `mqctl init` accepts: the segment must exceed the largest message by
# more than 64 KiB. About 470 test messages fill one segment.
SMALL = ["--max-message-size", "4096", "--segment-size", "73728"]


def two_cuts(power: Power, topics: list[str], first_cut: bool = True) -> None:
    """Cut, check, send and deliver, cut again, check, send and deliver again."""
    if first_cut:
        power.power_cut()
    power.verify(topics)
    power.send_after_cut_and_deliver(topics)
    power.power_cut()
    power.verify(topics)
    power.send_after_cut_and_deliver(topics)


def test_a_index_file_lost_on_cut_store_opens_by_itself(power: Power) -> None:
    """A: the key-index file is empty/short after the cut; every command failed with
    ``mmap length is greater than file size``. The store must open by itself."""
    power.ok("init")
    power.send("orders", power.bodies("a-sync", 20), True, "--keys", "k1")
    power.send("orders", power.bodies("a-async", 30), False)
    power.power_cut()
    for args in (["topic", "list"], ["send", "orders", "first-after-cut", "--flush", "sync"],
                 ["msg", "query", "--topic", "orders", "--key", "k1"]):
        cp = power.run(*args)
        assert cp.returncode == 0, (f"after the cut `mqctl {' '.join(args)}` exited "
                                    f"{cp.returncode}: {cp.stderr.strip()[:300]}")
    power.ledger.bodies.add("first-after-cut")
    two_cuts(power, ["orders"], first_cut=False)


def test_b_group_offsets_past_lost_data_do_not_hide_new_messages(power: Power) -> None:
    """B: a group commits offsets for non-durable data; after the cut new sync messages must
    not reuse queue offsets the group has already committed past."""
    power.ok("init")
    power.ok("topic", "create", "jobs", "--queues", "4")
    power.send("jobs", power.bodies("b-sync", 8), True)
    power.send("jobs", power.bodies("b-async", 120), False)
    g = power.group("workers", "jobs")
    o = power.group("ordered", "jobs", "orderly")
    b = power.group("everyone", "jobs", "broadcast")
    for grp in (g, o, b):
        assert len(power.drain_group(grp)) == 128
    two_cuts(power, ["jobs"])


def test_c_topic_created_over_lost_data_keeps_new_sync_messages(power: Power) -> None:
    """C: ``topic create`` recorded createdOffset = the log's end including non-durable data;
    sync messages sent to it after the cut landed below that and vanished after a second cut."""
    power.ok("init")
    power.send("noise", power.bodies("c-noise", 300), False)
    power.ok("topic", "create", "fresh", "--queues", "2")
    power.group("readers", "fresh")
    two_cuts(power, ["noise", "fresh"])


@pytest.mark.parametrize("variant", ["empty-middle", "record-boundary"])
def test_f2_middle_segment_lost_leaves_no_zeroed_queue_entries(power: Power, variant: str) -> None:
    """F2/F3: a middle commit-log segment that is empty, or ends on a record boundary, after the
    cut must not leave zero-filled consume-queue entries: consumers must read to the end and
    never hang."""
    power.ok("init", *SMALL)
    power.ok("topic", "create", "seg", "--queues", "3")
    power.send("seg", power.bodies("f2-base", 10), True)
    g = power.group("tail", "seg")
    if variant == "record-boundary":
        power.send("seg", power.bodies("f2-first", 200), False)
        power.fs.checkpoint()   # segment 0 reaches the disk up to a record boundary
    power.send("seg", power.bodies("f2-async", 1200), False)   # 2-3 more segments, unsynced
    power.drain_group(g)
    power.send("seg", power.bodies("f2-sync", 10), True)
    two_cuts(power, ["seg"])


def test_async_control_acknowledged_messages_are_lost(power: Power) -> None:
    """Control: with ``--flush async`` a cut must lose acknowledged messages (else the harness
    drops nothing), yet the store opens, is clean, and no group skips what survived."""
    power.ok("init")
    power.ok("topic", "create", "loose", "--queues", "4")
    power.send("loose", power.bodies("ctl-sync", 5), True)
    power.send("loose", power.bodies("ctl-async", 200), False)
    g = power.group("reader", "loose")
    power.drain_group(g)
    power.power_cut()
    got = power.verify(["loose"])
    present = {m["msgId"] for m in got["loose"]}
    lost = [m for m in power.ledger.async_acked if m not in present]
    assert lost, "no async-acknowledged message was lost: the harness is not dropping anything"
    power.send_after_cut_and_deliver(["loose"])
    power.power_cut()
    power.verify(["loose"])
    power.send_after_cut_and_deliver(["loose"])


def test_topic_metadata_and_offset_commits_survive_cuts(power: Power) -> None:
    """Issue 25: topics created, grown and deleted, and group commits (journal and snapshot),
    each followed by a cut: every topic keeps its queue count, a deleted topic stays deleted,
    no group skips a message, and the store is clean without a recover."""
    power.ok("init")
    power.ok("topic", "create", "grown", "--queues", "2")
    power.send("grown", power.bodies("g-sync", 16), True)
    g = power.group("workers", "grown")
    assert len(power.drain_group(g)) == 16
    power.ok("topic", "update", "grown", "--queues", "5")
    power.ok("topic", "create", "ordered", "--queues", "3", "--order")
    power.ok("topic", "create", "gone", "--queues", "2")
    power.send("gone", power.bodies("x-sync", 4), True)
    power.ok("topic", "delete", "gone", "--yes")
    power.send("grown", power.bodies("g-more", 20), True)
    assert len(power.drain_group(g)) == 20
    for _ in range(2):
        power.power_cut()
        listed = {r["topic"]: (r["queues"], r["order"]) for r in power.ok("topic", "list", "--json").json_lines()}
        assert listed == {"grown": (5, False), "ordered": (3, True)}, listed
        power.verify(["grown"])
        power.send_after_cut_and_deliver(["grown"])


def test_member_commits_in_the_journal_go_back_at_most_to_the_snapshot_on_a_cut(power: Power) -> None:
    """A member's commit is a journal record, not synced: a kill -9 keeps it, a power cut may
    take it (offsets go back to the last snapshot, never below it: the messages since are
    delivered again, never skipped), and the commits made after the cut, appended where the
    cut left the journal, are seen (no snapshot names a journal end the disk does not have)."""
    power.ok("init")
    power.ok("topic", "create", "j", "--queues", "2")
    power.send("j", power.bodies("j-sync", 40), True)
    g = power.group("jg", "j")
    assert len(power.drain_group(g)) == 40    # the member stopped: its commits in the snapshot
    settled = power.committed(g)
    assert sum(settled.values()) == 40
    power.send("j", power.bodies("j-more", 30), True)
    member = power.start_consumer(g)
    wait_for(lambda: sum(power.committed(g).values()) == 70, 60, what="the running member's commits")
    member.kill9()
    assert sum(power.committed(g).values()) == 70   # kill -9: every commit that returned is there
    for _ in range(2):
        power.power_cut()
        after = power.committed(g)
        assert all(after.get(q, 0) >= o for q, o in settled.items()), (settled, after)
        power.verify(["j"])
        power.send_after_cut_and_deliver(["j"])
        ends = {q: row["maxOffset"] for q, row in power.status("j").items()}
        assert power.committed(g) == ends, "commits made after the cut are not seen"
        settled = ends


def test_harness_commands_written_back_to_back_are_each_carried_out(power: Power) -> None:
    """LazyFS reads one command a read(): a clear-cache written right after a checkpoint not
    waited for must still be carried out (the harness waits for each command to be read), and
    what neither synced nor checkpointed is still dropped."""
    power.ok("init")
    power.ok("topic", "create", "pair", "--queues", "1")
    for i in range(10):
        power.send("pair", power.bodies(f"pair{i}-async", 3), False)
        power.fs.checkpoint(wait=False)
        power.fs.clear_cache()    # AssertionError if LazyFS dropped the two joined commands


def test_topics_view_of_a_new_store_survives_a_cut(power: Power) -> None:
    """The empty topics' view that making a store writes is durable with it: after a cut,
    the first commands find a view (not an unreadable table they take for a legacy one:
    a warning that topics are rebuilt, and a ``topics.json.migrated`` left behind)."""
    power.ok("init")
    power.power_cut()
    for args in (["topic", "list"], ["send", "orders", "after-cut", "--flush", "sync"]):
        cp = power.run(*args)
        assert cp.returncode == 0 and "warning" not in cp.stderr, (args, cp.stderr[:300])
    power.ledger.bodies.add("after-cut")
    assert not (power.fs.mnt / "store" / "config" / "topics.json.migrated").exists()
    assert not power.run("store", "check").returncode


def test_cut_right_after_init_loses_nothing_init_made(power: Power) -> None:
    """``mqctl init`` makes everything it created durable before it returns: a power cut right
    after it (and after ``topic create``), before any send, leaves a readable checkpoint and
    ``store.json``; ``store check`` is clean before any command opened the store again, and
    the store takes sends and delivers them."""
    power.ok("init", *SMALL)
    power.ok("topic", "create", "early", "--queues", "2")
    power.power_cut()
    assert ckpt.read(Layout(power.root).checkpoint) is not None, "the checkpoint init wrote is unreadable"
    power.check_clean()
    power.group("first", "early")
    two_cuts(power, ["early"], first_cut=False)
