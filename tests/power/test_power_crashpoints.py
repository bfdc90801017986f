"""Power cuts at exact operations: ``lazyfs::crash::timing=…::op=…::from_rgx=…`` makes LazyFS
kill itself (losing its cache) at the first matching operation, while producers and a
consumer group are running. Then reboot, check, send and deliver, cut again, check."""
from __future__ import annotations

import pytest

from tests.power.powerlib import Power, wait_for

pytestmark = [pytest.mark.power, pytest.mark.slow]

SMALL = ["--max-message-size", "4096", "--segment-size", "73728"]
SEG = r".*/commitlog/[0-9]{20}"
NEW_SEG = r".*/commitlog/0*[1-9][0-9]*"          # any segment but the first
INDEX = r".*/index/[^/]+"                       # the file, or a temp file made for it
# store/fsutil.py atomic_write_bytes: tmp ".NAME.PID.tmp" renamed over NAME, ".NAME.bak.PID.tmp"
# linked from NAME then renamed over NAME.bak.
# A topic is one file, config/topics/NAME.json, written after its copy consumequeue/NAME/topic.json.
TOPIC_TMP = r".*/config/topics/\.[^/]+\.json\.[0-9]+\.tmp"
TOPIC_COPY_TMP = r".*/consumequeue/[^/]+/\.topic\.json\.[0-9]+\.tmp"
OFFSETS_TMP = r".*/config/\.consumerOffset\.json\.[0-9]+\.tmp"

CASES = [
    # (id, timing, op, regex, workload)
    ("segment-create-before", "before", "create", NEW_SEG, "produce"),
    ("segment-create-after", "after", "create", NEW_SEG, "produce"),
    ("index-create-before", "before", "create", INDEX, "first-send"),
    ("index-create-after", "after", "create", INDEX, "first-send"),
    ("commitlog-fsync-before", "before", "fsync", SEG, "produce"),
    ("commitlog-fsync-after", "after", "fsync", SEG, "produce"),
    ("topic-rename-before", "before", "rename", TOPIC_TMP, "topic"),
    ("topic-rename-after", "after", "rename", TOPIC_TMP, "topic"),
    ("topic-copy-rename-after", "after", "rename", TOPIC_COPY_TMP, "topic"),
    ("offsets-rename-before", "before", "rename", OFFSETS_TMP, "consume"),
    ("offsets-rename-after", "after", "rename", OFFSETS_TMP, "consume"),
]


@pytest.mark.parametrize("timing,op,rgx,workload", [pytest.param(*c[1:], id=c[0]) for c in CASES])
def test_cut_at_operation(power: Power, timing: str, op: str, rgx: str, workload: str) -> None:
    power.ok("init", *SMALL)
    topics = ["cp"]
    if workload == "first-send":
        power.fs.arm_crash(timing, op, rgx)
        p = power.start_producer("cp", "first", 200, sync=True, batch=8)
    else:
        power.ok("topic", "create", "cp", "--queues", "4")
        power.send("cp", power.bodies("base-sync", 30), True)
        power.send("cp", power.bodies("base-async", 60), False)
        g = power.group("grp", "cp")
        power.drain_group(g)
        power.fs.arm_crash(timing, op, rgx)
        if workload == "produce":
            p = power.start_producer("cp", "prod", 1500, sync=True, batch=16)
            power.start_consumer(g)
        elif workload == "topic":
            p = power.start_producer("cp", "prod", 300, sync=True, batch=4)
            power.run("topic", "create", "other", "--queues", "2", timeout=30)
            topics.append("other")
        else:  # consume: async data, then the group commits offsets past it
            power.send("cp", power.bodies("more-async", 100), False)
            p = power.start_producer("cp", "prod", 300, sync=True, batch=4)
            power.drain_group(g, check=False)   # LazyFS may die under it
    wait_for(power.fs.crashed, 60, what=f"LazyFS to crash at {timing} {op} {rgx}")
    power.recover_from_crash()
    power.collect([p])
    if "other" in topics:
        # never acknowledged if the cut came first: the script creates it again (idempotent)
        power.ok("topic", "create", "other", "--queues", "2")
    power.verify(topics)
    power.send_after_cut_and_deliver(topics)
    power.power_cut()
    power.verify(topics)
    power.send_after_cut_and_deliver(topics)
