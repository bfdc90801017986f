"""Power cuts at random moments (seeded) while concurrent ``send --flush sync`` producers and a
consumer group run, with ``lazyfs::cache-checkpoint`` at random moments so that some unsynced
data did reach the disk. Each round: cut, check, send and deliver, second cut, check.

Set ``POWER_SEED`` to replay a run; the seed is in every failure message.
"""
from __future__ import annotations

import os
import random
import time

import pytest

from tests.power.powerlib import Power

pytestmark = [pytest.mark.power, pytest.mark.slow]

SMALL = ["--max-message-size", "4096", "--segment-size", "73728"]
ROUNDS = 3


def test_random_cuts_during_sync_producers(power: Power) -> None:
    seed = int(os.environ.get("POWER_SEED") or random.SystemRandom().randrange(1 << 30))
    print(f"POWER_SEED={seed}")
    rng = random.Random(seed)
    topics = ["rand", "rand2"]
    step = "setup"
    try:
        power.ok("init", *SMALL)
        power.ok("topic", "create", "rand", "--queues", "4")
        power.ok("topic", "create", "rand2", "--queues", "2")
        g = power.group("live", "rand")
        o = power.group("line", "rand2", "orderly")
        for r in range(ROUNDS):
            step = f"round {r}"
            producers = [power.start_producer("rand", f"r{r}p{i}", 4000, sync=True,
                                              batch=rng.randint(1, 40)) for i in range(2)]
            producers.append(power.start_producer("rand2", f"r{r}q", 4000, sync=True,
                                                  batch=rng.randint(1, 40)))
            if rng.random() < 0.5:   # some async noise that may or may not reach the disk
                producers.append(power.start_producer("rand", f"r{r}a", 4000, sync=False,
                                                      batch=rng.randint(1, 40)))
            power.start_consumer(g)
            power.start_consumer(o)
            cut_at = time.monotonic() + rng.uniform(0.6, 3.0)
            while (left := cut_at - time.monotonic()) > 0:
                time.sleep(min(left, rng.uniform(0.05, 0.6)))
                if time.monotonic() < cut_at and rng.random() < 0.4:
                    power.fs.checkpoint(wait=False)
            power.power_cut()
            n = power.collect(producers)
            print(f"round {r}: {n} results printed before the cut")
            step = f"round {r}, first cut"
            power.verify(topics)
            power.send_after_cut_and_deliver(topics, n=12)
            step = f"round {r}, second cut"
            power.power_cut()
            power.verify(topics)
            power.send_after_cut_and_deliver(topics, n=12)
    except AssertionError as exc:
        raise AssertionError(f"POWER_SEED={seed} ({step}): {exc}") from exc
