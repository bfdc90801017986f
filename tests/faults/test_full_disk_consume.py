"""A consumer on a full disk: failed messages whose copy to ``%RETRY%G``/``%DLQ%G`` cannot be
written, and offsets whose snapshot cannot be written. Nothing is lost, nothing multiplied,
and the consumer carries on once there is room again.

Real files on a real full file system (a 2 MiB tmpfs, see ``faultutil.small_tmpfs``: skipped
where ``mount`` is not allowed). Handlers wait on a gate file, so the disk is filled while
they run, and each run is logged outside the small file system.
"""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults.faultutil import fill_fs, small_tmpfs
from tests.procs import MQ, handler_script, wait_for


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    yield from small_tmpfs(tmp_path, "2m")


def _store(fs: Path, tmp_path: Path) -> MQ:
    m = MQ(fs / "store", tmp_path)
    m.ok("init", "--segment-size", "256KiB", "--max-message-size", "4KiB")
    m.ok("topic", "create", "fj", "--queues", "1")
    m.ok("send", "fj", input="one\ntwo\n")
    return m


def _gated_handler(tmp_path: Path, exit_code: int) -> tuple[str, Path, Path]:
    """A handler that logs its run, waits while the gate file exists, then exits ``exit_code``."""
    gate, runs = tmp_path / "gate", tmp_path / "runs"
    gate.touch()
    script = handler_script(tmp_path / "handler.sh", f"""
        cat > /dev/null
        echo "$MQ_QUEUE_OFFSET" >> {runs}
        while [ -e {gate} ]; do sleep 0.05; done
        exit {exit_code}
    """)
    return script, gate, runs


def _runs(runs: Path) -> list[str]:
    return runs.read_text().split() if runs.exists() else []


def _commitlog_sizes(root: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in (root / "commitlog").iterdir()}


def test_a_send_back_that_fails_on_a_full_disk_is_retried_once_later_not_multiplied(
        small_fs: Path, tmp_path: Path) -> None:
    """The handler fails while the disk is full: the dead-letter copy cannot be written (the
    group's ``%DLQ%`` topic cannot even be created). The send-back is tried again every 5 s,
    the message kept handed out meanwhile: the handler is not run again, no copy is stored
    while it fails, and once there is room each message has exactly one dead letter."""
    m = _store(small_fs, tmp_path)
    try:
        script, gate, runs = _gated_handler(tmp_path, 1)
        consumer = m.start("consume", "fj", "-g", "G", "--from", "first", "-e", "--max-reconsume", "0",
                           "--exec", script)
        wait_for(lambda: _runs(runs), what="a handler to start")
        fill_fs(small_fs)
        log_before = _commitlog_sizes(m.root)
        gate.unlink()

        def failed_twice() -> bool:   # each message's send-back failed, and failed again when retried
            warned = [ln for ln in consumer.stderr().splitlines() if "could not send" in ln]
            ids = {ln.split("could not send ")[1].split()[0] for ln in warned}
            return len(ids) == 2 and len(warned) >= 4 or not consumer.alive()
        wait_for(failed_twice, timeout=60, what="two failed send-backs of each message")
        assert consumer.alive(), consumer.stderr()
        assert "retrying here in 5 s" in consumer.stderr()
        # each handler ran once: a message whose send-back failed is not handed out again
        assert sorted(_runs(runs)) == ["0", "1"], (len(_runs(runs)), consumer.stderr()[-2000:])
        # a failed send-back stores nothing
        assert _commitlog_sizes(m.root) == log_before
        (small_fs / "filler").unlink()
        assert consumer.wait(60) == 1, consumer.stderr()   # (it gave up on them: exit 1)
        assert "gave up on 2 messages" in consumer.stderr(), consumer.stderr()
        dead = m.ok("dlq", "list", "-g", "G", "--json").json_lines()
        assert sorted(d["body"] for d in dead) == ["one", "two"], dead
        assert sorted(_runs(runs)) == ["0", "1"]
        m.ok("offsets", "show", "-g", "G")
        assert m.offsets("G", "fj") == {("fj", 0): 2}
        m.check_clean()
    finally:
        m.cleanup()
