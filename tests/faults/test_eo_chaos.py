"""Exactly-once pipeline under ``kill -9``: three stages SRC → A → B → C, each a
group of two members with an ``--exec`` transform that appends its stage's suffix to the body
(``--json`` envelopes in, ``--output json`` out, so the sharding key travels on). The middle
stage is orderly, the others concurrent. While messages keep arriving, random stage processes
are killed with SIGKILL and restarted (``MQCTL_EO_KILLS``; default 100 under ``CI=true``,
30 otherwise: 100 kills took 7.5 minutes on a two-core machine at load 15); then every stage runs
to the end and C must hold every message once, with all three suffixes, each key's messages in
the order they were sent (and A and B each output once too).

Deterministic: between kills the test waits for the pipeline to commit something new, never
for a time. The seed of the kill schedule is printed (``MQCTL_EO_SEED`` replays it).
"""
from __future__ import annotations

import json
import os
import random
from collections import Counter
from pathlib import Path

import pytest

from tests.procs import MQ, Proc, handler_script, wait_for

TOPICS = ["SRC", "A", "B", "C"]
STAGES = [("S1", "SRC", "A", []), ("S2", "A", "B", ["--orderly"]), ("S3", "B", "C", ["--threads", "3"])]
KEYS, PER_ROUND = 12, 24


def committed(mq: MQ, group: str, topic: str) -> int:
    res = mq.run("offsets", "show", "-g", group, "--topic", topic, "--json")
    if res.returncode == 3:
        return 0
    assert res.returncode == 0, str(res)
    return sum(r["offset"] for r in res.json_lines())


def progress(mq: MQ) -> int:
    """How far the whole pipeline got: the stages' committed offsets, summed."""
    return sum(committed(mq, g, src) for g, src, _dst, _x in STAGES)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_three_stage_pipeline_under_kill_9_is_exactly_once(mq: MQ, tmp_path: Path) -> None:
    kills = int(os.environ.get("MQCTL_EO_KILLS") or (100 if os.environ.get("CI") == "true" else 30))
    seed = int(os.environ.get("MQCTL_EO_SEED", str(random.SystemRandom().randrange(1 << 30))))
    print(f"\neo chaos: {kills} kills, seed {seed}")
    rng = random.Random(seed)
    for t in TOPICS:
        mq.ok("topic", "create", t, "--queues", "4")
    handlers = {g: handler_script(tmp_path / f"{g}.sh",
                                  f"""sed -e 's/\\("body":"[^"]*\\)"/\\1+{g.lower()}"/'""")
                for g, *_ in STAGES}

    def start(slot: int) -> Proc:
        g, src, dst, extra = STAGES[slot // 2]
        return mq.start("consume", src, "-g", g, "--from", "first", "--json", "--batch", "8", *extra,
                        "--exec", handlers[g], "--output", "json", "--to", dst, "--rebalance-interval", "0.5")

    sent: list[str] = []
    seq = 0

    def send_round() -> None:
        nonlocal seq
        lines = []
        for _ in range(PER_ROUND):
            key = f"k{rng.randrange(KEYS)}"
            body = f"{key}-{seq:05d}"
            seq += 1
            lines.append(json.dumps({"body": body, "shardingKey": key}))
            sent.append(body)
        mq.ok("send", "SRC", "--input", "json", input="\n".join(lines) + "\n")

    procs = [start(i) for i in range(2 * len(STAGES))]
    for n in range(kills):
        # new input, then something new committed: the pipeline is moving, and the victim
        # may be holding outputs it has not committed yet
        seen = progress(mq)
        send_round()
        wait_for(lambda s=seen: progress(mq) > s, 120, interval=0.2, what=f"progress before kill {n + 1}")
        victim = rng.randrange(len(procs))
        procs[victim].kill9()
        procs[victim].wait()
        procs[victim] = start(victim)
    for p in procs:
        p.kill9()
        p.wait()
    # each stage alone to the end of its input (the one before it has finished)
    for g, src, dst, extra in STAGES:
        mq.ok("consume", src, "-g", g, "--from", "first", "--json", "--batch", "8", *extra,
              "--exec", handlers[g], "--output", "json", "--to", dst, "-e", timeout=300)

    suffix = ""
    for g, _src, dst, _extra in STAGES:
        suffix += f"+{g.lower()}"
        got = mq.drain(dst, mq.fresh("verify"), timeout=120)
        bodies = [m["body"] for m in got]
        dups = [b for b, c in Counter(bodies).items() if c > 1]
        assert not dups, f"{dst}: {len(dups)} outputs more than once (seed {seed}), e.g. {dups[:5]}"
        want = [b + suffix for b in sent]
        assert sorted(bodies) == sorted(want), (
            f"{dst}: lost {sorted(set(want) - set(bodies))[:5]}, foreign {sorted(set(bodies) - set(want))[:5]} "
            f"(seed {seed})")
        by_key: dict[str, list[str]] = {}
        for m in sorted(got, key=lambda m: (m["queueId"], m["queueOffset"])):
            by_key.setdefault(m["shardingKey"], []).append(m["body"])
        for key, seq_got in by_key.items():
            assert seq_got == [b for b in want if b.startswith(key + "-")], (
                f"{dst}: key {key} out of order (seed {seed})")
    print(f"eo chaos: {len(sent)} messages, {kills} kills: C holds each once, per-key order kept")
    mq.check_clean()
