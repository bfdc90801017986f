"""``Consumer.run`` hands a backlog to its threads in batches; a stop ends a batch early: the
handler is called for no message after the stop, and what it was not called for is delivered
again, later, with nothing committed past the last message handled."""
from __future__ import annotations

import store
from tests.procs import MQ


def test_stop_inside_a_batch_hands_the_rest_back(mq: MQ) -> None:
    path = str(mq.root)
    n = 3000
    with store.Admin(path) as admin:
        admin.create_topic("S", queues=1)
    with store.Producer(path) as p:
        p.send_many("S", [f"m{i}" for i in range(n)])
    seen: list[str] = []
    with store.Consumer("S", "G", path, start_from="first") as c:

        def handler(m: store.Message) -> None:
            seen.append(m.text)
            if len(seen) == 5:
                c.stop()

        c.run(handler, threads=1)   # returns once stopped
    # one thread, a backlog of 3000: the batch in hand was hundreds of messages long
    assert seen == [f"m{i}" for i in range(5)]
    rest: list[str] = []
    with store.Consumer("S", "G", path, start_from="first") as c:
        c.run(lambda m: rest.append(m.text), exit_at_end=True)
    assert sorted(rest, key=lambda t: int(t[1:])) == [f"m{i}" for i in range(5, n)]   # each once
