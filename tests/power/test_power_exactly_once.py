"""Power cuts under an exactly-once stage: ``consume SRC --exec CMD --to DST
--flush sync``, two members, cut while they run. After every cut the store opens by itself and
is clean, DST holds each output at most once, and the group's offsets agree with DST: the
outputs there are exactly those of the inputs below the committed offsets (no output without
its offset, no offset without its output). The last run finishes the stage: each output once.
"""
from __future__ import annotations

import random
from collections import Counter

import pytest

from tests.power.powerlib import Power, wait_for
from tests.procs import handler_script

pytestmark = [pytest.mark.power, pytest.mark.slow]

SMALL = ["--max-message-size", "4096", "--segment-size", "73728"]
ROUNDS = 4


def committed(power: Power, group: str, topic: str) -> dict[int, int]:
    cp = power.run("offsets", "show", "-g", group, "--topic", topic, "--json")
    if cp.returncode == 3:
        return {}
    assert cp.returncode == 0, f"offsets show: {cp.stderr[:300]}{power.where()}"
    return {r["queueId"]: r["offset"] for r in cp.json_lines()}


def check_agree(power: Power, inputs: list[dict], suffix: str) -> list[str]:
    """DST's outputs once each, and exactly those of the inputs below the committed offsets."""
    offs = committed(power, "eo", "SRC")
    got = [m["body"] for m in power.read_topic("DST")]
    dups = [b for b, n in Counter(got).items() if n > 1]
    assert not dups, f"{len(dups)} outputs more than once{power.where()}, e.g. {dups[:5]}"
    want = {m["body"] + suffix for m in inputs if m["queueOffset"] < offs.get(m["queueId"], 0)}
    assert set(got) == want, (
        f"offsets {offs} and outputs disagree{power.where()}: outputs without their offset "
        f"{sorted(set(got) - want)[:5]}, offsets without their output {sorted(want - set(got))[:5]}")
    return got


def test_cuts_under_a_sync_stage_keep_outputs_and_offsets_together(power: Power) -> None:
    seed = int(random.SystemRandom().randrange(1 << 30))
    print(f"seed {seed}")
    rng = random.Random(seed)
    power.ok("init", *SMALL)
    power.ok("topic", "create", "SRC", "--queues", "4")
    power.ok("topic", "create", "DST", "--queues", "4")
    handler = handler_script(power.work / "suffix.sh", 'sleep 0.01; sed "s/$/-s/"')
    power.send("SRC", power.bodies("in", 1500), True)
    stage = ["consume", "SRC", "-g", "eo", "--from", "first", "--batch", "4", "--exec", handler,
             "--to", "DST", "--flush", "sync"]
    seen = 0
    for r in range(ROUNDS):
        for _member in range(2):
            power.start(*stage)
        # cut once the stage has committed more (a cut mid-batch is likely: the handlers run
        # all the time), sometimes after a checkpoint that put some unsynced data on the disk
        target = min(seen + rng.randint(20, 120), 1500)   # (all of them, once the stage got that far)
        wait_for(lambda t=target: sum(committed(power, "eo", "SRC").values()) >= t, 120,
                 what=f"the stage to commit {target} inputs (round {r})")
        if rng.random() < 0.5:
            power.fs.checkpoint(wait=False)
        power.power_cut()
        power.verify(["SRC"])
        inputs = power.read_topic("SRC")
        got = check_agree(power, inputs, "-s")
        print(f"round {r}: {len(got)} outputs, each with its offset, after cut {power.cuts}")
        seen = len(got)
    power.ok("consume", *stage[1:], "-e", timeout=300)
    inputs = power.read_topic("SRC")
    got = check_agree(power, inputs, "-s")
    assert sorted(got) == sorted(m["body"] + "-s" for m in inputs)
    power.power_cut()
    power.verify(["SRC"])
    assert sorted(check_agree(power, inputs, "-s")) == sorted(got)
