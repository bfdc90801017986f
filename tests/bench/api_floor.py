"""The floor of ``Consumer.messages()``: ``python api_floor.py STORE [TOPIC]`` prints JSON.

What the iterator must do at least, the way the Python API must do it, with nothing else: one
thread reads every queue of the topic with the store's own checked reads (the C check loop,
several queues served by one read of the log: ``Store.pull_many``, else ``pull_records``),
and builds a :class:`store.Message` for every record (bodies as ``bytes``), reading each
body's length. No group, no member thread, no hand-over between threads, no offsets kept,
no locks. Timed from the store's opening, as bench_consume.py times the iterator from the
Consumer's creation: an iterator that gets near this is bound by the reads and the
messages, not by what it does around them.
"""
from __future__ import annotations

import json
import sys
import time

from store.client.message import MessageRows
from store.log.messagestore import Store

PULL = 1000                 # messages a queue per read, as a member's pulls ask
PULL_BYTES = 4 * 1024 * 1024


def main(path: str, topic: str = "T") -> dict[str, float]:
    t = time.perf_counter()
    cpu = time.process_time()
    count = nbytes = 0
    st = Store.open(path)
    try:
        queues = range(st.topic(topic).queues)
        at = {q: st.min_offset(topic, q) for q in queues}
        ends = {q: st.max_offset(topic, q) for q in queues}
        while True:
            asked = [(q, at[q], PULL, PULL_BYTES) for q in queues if at[q] < ends[q]]
            if not asked:
                break
            got = st.pull_many(topic, asked, full=True) if len(asked) > 1 else {}
            if not got:   # one queue left, or records too big to share a read
                q = asked[0][0]
                got = {q: st.pull_records(topic, q, at[q], PULL, PULL_BYTES)}
            for q, c in got.items():
                if c.next_offset <= at[q]:
                    raise SystemExit(f"no progress on queue {q} at {at[q]}")
                at[q] = c.next_offset
                for m in MessageRows(topic, q, c.offsets, c.bodies, c.born, c.stored,  # type: ignore[arg-type]
                                     c.phys, c.reconsume, c.props):
                    count += 1
                    nbytes += len(m.body)
    finally:
        st.close()
    return {"seconds": time.perf_counter() - t, "count": count, "bytes": nbytes,
            "cpu_seconds": time.process_time() - cpu}


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:3])))
