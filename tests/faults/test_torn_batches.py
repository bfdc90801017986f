"""A producer killed (SIGKILL) inside the write of a batch bigger than one write call: the
``log-between-pieces`` failpoint (store/log/logappend.py) stops the process between two of the
batch's ``pwrite`` calls, as a ``kill -9`` can (and as one can inside a single call: the kernel
stops a write between pages on a fatal signal). After the next open the topic holds whole
batches only, and exactly the batches whose results were returned (store/log/atomicbatch.py)."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from store.log.messagestore import Store
from tests.procs import KILLED, MQ, mqctl_env

BODY = 64 * 1024          # bodies written from themselves: several write calls per batch
PER_BATCH = 40            # ~2.6 MB: three write calls of ~1 MiB, two failpoint hits each

_SENDER = textwrap.dedent("""
    import json, sys
    import store
    topic, flush, batches, per, size = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:])
    with store.Producer(flush=flush) as producer:
        for b in range(batches):
            bodies = [(b"%03d-%03d-" % (b, i)).ljust(size, b"x") for i in range(per)]
            res = producer.send_many(topic, bodies, queue=b % 2)
            sys.stdout.write(json.dumps([r.msg_id for r in res]) + "\\n")
            sys.stdout.flush()
""")


def _stored(root: Path, topic: str) -> dict[str, bytes]:
    """Every message of ``topic`` by msgId, after an open (which recovers)."""
    with Store.open(root) as s:
        out = {}
        for q in s.queue_ids(topic):
            for m in s.iter_queue(topic, q, 0):
                out[m.uniq_key] = bytes(m.body[:8])
        assert s.check().problems == []
    return out


@pytest.mark.parametrize("flush", ["async", "sync"])
def test_send_many_killed_inside_a_batchs_write_leaves_whole_batches_only(mq: MQ, flush: str) -> None:
    mq.ok("topic", "create", "kp", "--queues", "2")
    # the 5th stop between two write calls: in the third batch, after its first ~1 MiB
    child = subprocess.run([sys.executable, "-c", _SENDER, "kp", flush, "6", str(PER_BATCH), str(BODY)],
                           env=mqctl_env(mq.root, "log-between-pieces:5"), capture_output=True, text=True,
                           timeout=120)
    assert child.returncode == KILLED, child.stderr
    assert "failpoint log-between-pieces" in child.stderr
    acked = [json.loads(line) for line in child.stdout.splitlines()]
    assert len(acked) == 2
    stored = _stored(mq.root, "kp")
    assert sorted(stored) == sorted(i for batch in acked for i in batch)   # none of the third batch
    assert sorted(stored.values()) == sorted(b"%03d-%03d-" % (b, i) for b in range(2) for i in range(PER_BATCH))
    # the next writer goes on where the cut batch began
    mq.ok("send", "kp", "after", "-q", "0")
    assert len(_stored(mq.root, "kp")) == 2 * PER_BATCH + 1


@pytest.mark.parametrize("mode", ["raw", "json"])
def test_mqctl_send_killed_inside_a_batchs_write_prints_and_keeps_whole_batches_only(mq: MQ, mode: str) -> None:
    """``mqctl send``'s batches (raw bodies, or drafts from ``--input json``, each copied into
    one buffer written 1 MiB at a time), ``--batch-size`` or its 2 MiB default."""
    mq.ok("topic", "create", "kp", "--queues", "2")
    args = ["--input", "json"] if mode == "json" else ["--batch-size", str(PER_BATCH)]
    feeder = mq.feed("kp", *args, failpoints="log-between-pieces:3")
    sent: list[str] = []
    for b in range(4):
        bodies = [f"{b:03d}-{i:03d}-".ljust(BODY - 100, "x") for i in range(PER_BATCH // 2)]
        lines = [json.dumps({"body": x}) for x in bodies] if mode == "json" else bodies
        sent += bodies
        if not feeder.batch(lines):
            break
    rc = feeder.close()
    assert rc == KILLED, feeder.stderr
    assert "failpoint log-between-pieces" in feeder.stderr
    stored = _stored(mq.root, "kp")
    assert 0 < len(stored) < len(sent)
    assert sorted(stored) == sorted(r["msgId"] for r in feeder.acked)   # printed exactly when kept


def test_the_open_after_mqctl_send_killed_between_pieces_cuts_its_batch_silently(mq: MQ) -> None:
    """The batch a killed ``mqctl send`` left unfinished was never acknowledged: the next
    command cuts it without dispatching its records to the consume queues first (their
    entries were never written), so it warns of no messages gone past the log's end and no
    power cut; the store then holds exactly the acknowledged messages."""
    mq.ok("topic", "create", "k9", "--queues", "2")
    lines = "".join(f"{i:04d}-".ljust(BODY - 100, "y") + "\n" for i in range(4 * PER_BATCH))
    # (batches of 2 MiB at most: the 3rd stop between write calls is inside the second)
    res = mq.run("send", "k9", "--json", "--batch-size", str(PER_BATCH), input=lines,
                 failpoints="log-between-pieces:3")
    assert res.returncode == KILLED, res
    acked = [r["msgId"] for r in res.json_lines()]
    assert 0 < len(acked) < 4 * PER_BATCH
    listed = mq.ok("topic", "list")
    assert listed.stderr == "", listed.stderr
    assert sorted(_stored(mq.root, "k9")) == sorted(acked)
    mq.check_clean()


@pytest.mark.slow
def test_check_names_the_whole_unfinished_batch_that_recover_cuts(mq: MQ) -> None:
    """``store check`` named only the record cut at the log's end ("record of N bytes runs past
    the end", at its offset), while ``store recover`` cut the whole batch, its whole records
    before that one too: check now says how many whole records go and from where, and that
    is exactly what recover cuts (its new end, its bytes, the records it keeps)."""
    _killed_inside_a_batch(mq)
    problems, summary, reason = _one_unfinished_batch(mq)
    whole = int(reason.split("its ")[1].split(" whole")[0])
    assert 0 < whole < PER_BATCH and "runs past the end" in reason, reason
    rec = mq.ok("store", "recover", "--json").json_lines()[-1]
    assert rec["end"] == problems[0]["offset"], (rec, problems)   # (one segment: its offset is the log's)
    assert f"cuts the whole batch ({rec['truncatedBytes']} bytes)" in reason, (rec, reason)
    after = mq.check()
    assert after.returncode == 0 and after.json_lines()[-1]["records"] == summary["records"] - whole, after


@pytest.mark.slow
def test_check_names_an_unfinished_batch_that_ends_on_a_record_boundary(mq: MQ) -> None:
    """A writer killed between two of a batch's writes where one record ended and the next had
    not begun leaves a log that ends on a record boundary with no torn record: ``store check``
    said nothing of it (it looked for the batch only behind a torn record), while the next
    writer and ``store recover`` cut the whole batch. Check now names it as recover cuts it."""
    _killed_inside_a_batch(mq)
    torn = mq.check().json_lines()[0]["reason"]
    # the torn record cut off: the log now ends where the batch's last whole record ends
    seg, at = torn.split("the one cut at ")[1].split(" (")[0].rsplit(":", 1)
    Path(seg).write_bytes(Path(seg).read_bytes()[:int(at)])
    problems, summary, reason = _one_unfinished_batch(mq)
    n = int(reason.split("its ")[1].split(" record")[0])
    assert 0 < n < PER_BATCH and "no end record after them" in reason, reason
    rec = mq.ok("store", "recover", "--json").json_lines()[-1]
    assert rec["end"] == problems[0]["offset"], (rec, problems)
    assert f"cuts the whole batch ({rec['truncatedBytes']} bytes)" in reason, (rec, reason)
    after = mq.check()
    assert after.returncode == 0 and after.json_lines()[-1]["records"] == summary["records"] - n, after


def _killed_inside_a_batch(mq: MQ) -> None:
    """``send_many`` killed between two write calls of its third batch (its 5th stop)."""
    mq.ok("topic", "create", "kp", "--queues", "2")
    child = subprocess.run([sys.executable, "-c", _SENDER, "kp", "async", "6", str(PER_BATCH), str(BODY)],
                           env=mqctl_env(mq.root, "log-between-pieces:5"), capture_output=True, text=True,
                           timeout=120)
    assert child.returncode == KILLED, child.stderr


def _one_unfinished_batch(mq: MQ) -> tuple[list[dict], dict, str]:
    """``store check`` on a log ending inside an unfinished batch: its one problem names it."""
    res = mq.check()
    assert res.returncode == 1, res
    *problems, summary = res.json_lines()
    assert len(problems) == 1, problems
    reason = problems[0]["reason"]
    assert reason.startswith("unfinished atomic batch at the end of the log: its "), reason
    return problems, summary, reason
