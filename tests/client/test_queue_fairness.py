"""A concurrent consumer's handlers serve every queue it holds in turn (findings 4): a backlog
in one queue does not hold back a message of another until the backlog is gone. RocketMQ's
push consumer submits each queue's pulls to its pool as they come; here the handler sinks are
fed round-robin, a batch of each queue in turn (``store/client/dispatch.py``).

The bounds are positions in the order handled, not times: with one handler thread (``--threads
1``, ``threads=1``) batches run in the order they were handed out, so a load on the machine
changes nothing here. Before the round-robin, each bound was missed by the whole backlog (the
queue-1 message came last of 1501, the fourth queue's first message at 4500 of 6000)."""
from __future__ import annotations

import subprocess

import pytest

from tests.procs import MQ, finish, handler_script, python


@pytest.mark.parametrize("batch", [1, 10])
@pytest.mark.slow
def test_exec_handlers_take_a_message_of_another_queue_before_one_queues_backlog(mq: MQ, batch: int) -> None:
    mq.ok("topic", "create", "sv", "--queues", "2")
    mq.send_lines("sv", map(str, range(1, 1501)), "-q", "0")
    mq.send_lines("sv", ["URGENT"], "-q", "1")
    out = mq.work / "sv.out"
    # one write per run (printf of what the handler read), so the lines keep the runs' order
    append = handler_script(mq.work / "append.sh", f'printf "%s\\n" "$(cat)" >> {out}')
    mq.ok("consume", "sv", "-g", "sg", "--from", "first", "-e", "--exec", append,
          "--threads", "1", "--batch", str(batch))
    lines = out.read_text().splitlines()
    assert sorted(lines) == sorted([*map(str, range(1, 1501)), "URGENT"])
    # handed out in the first round (a batch of queue 0, then queue 1's); at worst after the
    # two batches a lone thread may have out (--threads 1) if queue 1's pull came a turn late
    assert lines.index("URGENT") < 3 * batch, lines.index("URGENT")
    assert mq.committed_total("sg", "sv") == 1501


RUN = """
    import asyncio, sys
    import store
    mode = sys.argv[1]
    handled = []
    if mode == "run":
        with store.Consumer("t", group="g", start_from="first") as consumer:
            consumer.run(lambda msg: handled.append(msg.queue_id), threads=1, exit_at_end=True)
    else:
        async def main():
            async with store.AsyncConsumer("t", group="g", start_from="first") as consumer:
                async def handler(msg):
                    handled.append(msg.queue_id)
                await consumer.run(handler, concurrency=1, exit_at_end=True)
        asyncio.run(main())
    print(" ".join(map(str, handled)))
"""


@pytest.mark.parametrize("mode", ["run", "async-run"])
def test_python_handlers_serve_every_queue_in_turn(mq: MQ, mode: str) -> None:
    mq.ok("topic", "create", "t", "--queues", "4")
    for q in range(4):
        mq.send_lines("t", map(str, range(1500)), "-q", str(q))
    [out] = finish(python(RUN, mode, env=mq.environ(), stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    handled = [int(q) for q in out.split()]
    assert sorted(handled) == sorted(q for q in range(4) for _ in range(1500))
    # A handler's batch is at most 1000 messages (what it gets through in 50 ms, capped) and
    # the first round gives each queue one: the last queue's turn comes after at most three
    # batches of the others, not after their backlogs (4500).
    firsts = [handled.index(q) for q in range(4)]
    assert max(firsts) <= 3 * 1000, firsts
