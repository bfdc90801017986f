"""A driver running an mqctl -> mqctl stream beside an mqctl -> Parquet stream, killed with
``kill -9`` twice while its sink publishes: each restart replays the interrupted batch and goes
on, and the sink holds every message once.

Only the driver's Python process is killed, as a user's ``kill -9 PID`` does: its JVM notices
the closed pipe and winds down on its own, finishing (or abandoning) the batch it had started
while the next driver already starts on the same checkpoint, so two drivers' commits of one
batch can overlap.
"""
from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

from store.log.messagestore import Store  # noqa: E402
from store.log.record import Draft  # noqa: E402
from store.spark.sink import SINKS_DIR  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.slow]

WAVE = 60_000          # messages fed before each driver start: a publish of seconds to catch
DEADLINE_S = 600       # only so that a stall fails the test instead of hanging it

DRIVER = '''
import sys, time
import store.spark.datasource as S
src, dst, ckpt, out = sys.argv[1:5]
spark = S.local_session("local[2]", log_level="OFF")
df = spark.readStream.format("mqctl").option("store", src).option("topic", "in") \\
    .option("startingOffsets", "earliest").load()
df.select("body").writeStream.format("mqctl").option("store", dst).option("topic", "out") \\
    .option("checkpointLocation", ckpt + "/mq").trigger(processingTime="500 milliseconds").start()
df.select("body").writeStream.format("parquet").option("path", out) \\
    .option("checkpointLocation", ckpt + "/pq").trigger(processingTime="500 milliseconds").start()
spark.streams.awaitAnyTermination()
'''


def ledger(dst: Path) -> dict[str, Any]:
    files = list((dst / SINKS_DIR).glob("*.json")) if (dst / SINKS_DIR).exists() else []
    try:
        return json.loads(files[0].read_text()) if files else {}
    except ValueError:       # caught between the write and the rename of its copy: ask again
        return {}


def wait_for(what: str, cond: Any, proc: subprocess.Popen[bytes], log: Path, dst: Path) -> Any:
    """``cond()``'s first true value (checked every 50 ms; the deadline only stops a stall)."""
    deadline = time.time() + DEADLINE_S
    while not (value := cond()):
        assert proc.poll() is None, f"the driver exited while waiting for {what}: " + log.read_text()[-3000:]
        assert time.time() < deadline, f"no {what} in {DEADLINE_S}s: ledger {ledger(dst)}"
        time.sleep(0.05)
    return value


def count(dst: Path) -> int:
    with Store.open(dst, recover=False) as s:
        return sum(s.max_offset("out", q) for q in range(2))


def publishing(dst: Path) -> int | None:
    """The batch the sink is publishing, once part of it is stored."""
    state = ledger(dst)
    batch = state.get("publishing")
    return batch if isinstance(batch, int) and state.get("done", 0) > 0 else None


def stored_bodies(dst: Path) -> collections.Counter[bytes]:
    seen: collections.Counter[bytes] = collections.Counter()
    with Store.open(dst, recover=False) as s:
        for q in range(2):
            off = 0
            while True:
                cols = s.pull_columns("out", q, off, 10_000, 16 << 20, False)
                if not len(cols):
                    break
                seen.update(bytes(b) for b in cols.bodies)
                off = cols.next_offset
    return seen


def test_a_driver_killed_twice_mid_publish_resumes_and_stores_each_message_once(tmp_path: Path) -> None:
    src, dst, ckpt, out = tmp_path / "src", tmp_path / "dst", tmp_path / "ckpt", tmp_path / "out"
    work = tmp_path / "driver"            # not tmp_path: its store/ would shadow the package
    work.mkdir()
    (work / "driver.py").write_text(DRIVER)
    source = Store.open(src, create=True)
    source.create_topic("in", 2)
    with Store.open(dst, create=True) as target:
        target.create_topic("out", 2)
    fed = 0

    def feed() -> None:
        nonlocal fed
        for lo in range(fed, fed + WAVE, 10_000):
            source.put([Draft("in", f"m{i:08d}".encode() * 8, {}, queue_id=i % 2) for i in range(lo, lo + 10_000)])
        fed += WAVE

    def catch_publish() -> int | None:
        """The batch being published; when the sink has published everything (the window
        was missed), another wave."""
        batch = publishing(dst)
        if batch is None and ledger(dst).get("publishing", 0) is None and count(dst) >= fed:
            feed()
        return batch

    procs = []
    killed = -1
    try:
        for rnd in range(3):
            feed()
            log = tmp_path / f"driver{rnd}.log"
            proc = subprocess.Popen([sys.executable, "driver.py", str(src), str(dst), str(ckpt), str(out)],
                                    cwd=work, start_new_session=True, stdout=log.open("wb"),
                                    stderr=subprocess.STDOUT)
            procs.append(proc)
            if rnd:   # the batch killed last time is published by this driver (or its predecessor's JVM)
                wait_for(f"batch {killed} after kill {rnd}",
                         lambda k=killed: ledger(dst).get("lastBatchId", -1) >= k, proc, log, dst)
            if rnd < 2:
                killed = wait_for("a publish in progress", lambda: catch_publish(), proc, log, dst)
                os.kill(proc.pid, 9)                      # the Python driver only
                proc.wait(60)
        wait_for("every message in the sink", lambda: count(dst) >= fed, proc, log, dst)
    finally:
        for p in procs:                                   # the driver and whatever its JVM left
            try:
                os.killpg(p.pid, 9)
            except ProcessLookupError:
                pass
            p.wait(60)
        source.close()
    seen = stored_bodies(dst)
    assert sum(seen.values()) == fed and len(seen) == fed, \
        f"{sum(seen.values()) - len(seen)} duplicates, {fed - len(seen)} missing"
