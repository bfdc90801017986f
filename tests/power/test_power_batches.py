"""A power cut that keeps part of a batch: a producer stopped between two write calls of a big
batch (the ``log-between-pieces`` failpoint, store/log/commitlog.py), the part it wrote made
durable (LazyFS's cache written back, as the kernel's writeback or another writer's fsync of
the same segment would), then the cut. After the reboot the batch is gone whole: the store
holds whole batches only (store/log/atomicbatch.py)."""
from __future__ import annotations

import pytest

from tests.power.powerlib import Power, ndjson
from tests.procs import KILLED

pytestmark = [pytest.mark.power, pytest.mark.slow]


def test_a_batch_the_cut_kept_part_of_is_gone_whole(power: Power) -> None:
    power.ok("topic", "create", "kp", "--queues", "2")
    power.send("kp", power.bodies("before", 30), True)
    big = [f"torn-{i:03d}-".ljust(60_000, "x") for i in range(34)]   # one ~2 MB batch: two write calls
    power.ledger.bodies.update(big)
    cp = power.run("send", "kp", "--json", "--batch-size", "100", input="".join(b + "\n" for b in big),
                   failpoints="log-between-pieces")
    assert cp.returncode == KILLED and ndjson(cp.stdout) == [], cp.stderr
    power.fs.checkpoint()   # the first ~1 MiB of the batch is on disk
    power.power_cut()
    got = power.verify(["kp"])["kp"]
    assert sorted(m["body"] for m in got) == [f"before-{i:05d}" for i in range(30)]
    power.send_after_cut_and_deliver(["kp"])
    power.power_cut()
    power.verify(["kp"])
