"""A consume-queue entry's tag code is derived data (a Java hash of the record's tag): a
consumer with a tag filter never passes a message over on that code's word alone (real
``mqctl`` processes, a bit flipped by hand in the consume queue).

Before, a group with ``--tag`` skipped the message whose entry's code had one bit flipped,
committed past it and showed no lag: ``store check`` knew ("a tag filter would pass it
over"), the consumer did not look, and not even ``store recover`` could give it back."""
from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Callable

import pytest

from store.layout import Layout
from store.log import format as F
from store.log.record import java_hash
from tests.procs import MQ

N = 30


def _tag_code(mq: MQ, entry: int, change: Callable[[int], int]) -> None:
    """Change the tag code (an entry's last field, 8 bytes) of consume-queue entry ``entry``."""
    path = Layout(mq.root).queue_dir("t", 0) / F.segment_name(0)
    with open(path, "r+b") as fh:
        fh.seek(entry * F.CQ_ENTRY_SIZE)
        phys, size, code = F.CQ_ENTRY.unpack(fh.read(F.CQ_ENTRY_SIZE))
        fh.seek(entry * F.CQ_ENTRY_SIZE)
        fh.write(F.CQ_ENTRY.pack(phys, size, change(code)))


@pytest.mark.parametrize("seed", range(3))
def test_a_flipped_tag_code_never_hides_a_message_from_a_tag_filter(mq: MQ, seed: int) -> None:
    rnd = random.Random(seed)
    mq.ok("topic", "create", "t", "--queues", "1")
    mq.ok("send", "t", "-t", "A", input="".join(f"a{i}\n" for i in range(N)))
    mq.ok("send", "t", "-t", "B", input="".join(f"b{i}\n" for i in range(N)))
    hit = rnd.randrange(N)                      # one of A's entries: one bit of its code flipped
    bit = rnd.randrange(32)
    _tag_code(mq, hit, lambda code: code ^ (1 << bit))
    _tag_code(mq, N + hit, lambda code: java_hash("A"))   # one of B's: A's code
    got = mq.ok("consume", "t", "-g", "fa", "--tag", "A", "--from", "first", "-e").stdout.decode().split()
    assert got == [f"a{i}" for i in range(N)], (hit, got)
    # (and B's message with A's code went to neither group twice: the record's tag decides)
    got_b = mq.ok("consume", "t", "-g", "fb", "--tag", "B", "--from", "first", "-e").stdout.decode().split()
    assert got_b == [f"b{i}" for i in range(N)]
    got_ab = mq.ok("consume", "t", "-g", "fab", "--tag", "A || B", "--from", "first", "-e").stdout.decode().split()
    assert sorted(got_ab) == sorted([f"a{i}" for i in range(N)] + [f"b{i}" for i in range(N)])


def test_a_tag_filter_reads_no_body_of_another_tags_record(tmp_path: Path) -> None:
    """An entry whose code is another tag's has its record's TAGS read, never its body: in a
    sparse queue (big records of another tag, each followed by another topic's), 3 records of
    the filter's tag are read in 3 record reads, not 120 (each of 256 KiB) — and a pull given
    the codes without the tags still filters by the codes."""
    from store.log.messagestore import Store
    from store.log.record import Draft
    with Store.open(tmp_path / "s", create=True) as st:
        st.create_topic("T", 1)
        st.create_topic("U", 1)
        for i in range(120):
            tag = "A" if i % 40 == 0 else "B"
            st.put([Draft("T", b"x" * (256 << 10) if tag == "B" else b"a%d" % i, {"TAGS": tag})])
            st.put([Draft("U", b"u" * (1 << 20))])
        codes, tags = frozenset([java_hash("A")]), frozenset(["A"])
        reads = [0]
        read = st.engine.commitlog.read

        def counted(*a: Any, **k: Any) -> Any:
            reads[0] += 1
            return read(*a, **k)
        st.engine.commitlog.read = counted   # type: ignore[method-assign]
        got, off = [], 0
        while off < st.max_offset("T", 0):
            r = st.pull("T", 0, off, 32, codes, tags)
            got += [m.body for m in r.messages]
            off = r.next_offset
        assert got == [b"a0", b"a40", b"a80"] and reads[0] == 3, (got, reads)
        assert [m.body for m in st.pull("T", 0, 0, 2, codes).messages] == [b"a0"]
