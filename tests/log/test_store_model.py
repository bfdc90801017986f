"""A model-based test of the store: Hypothesis drives a real store through sends, pulls,
offset commits, reopens and crashes, and checks it against an in-memory model of topics,
queues and committed offsets after every step.

Crashes are real: a child process sends a batch with a failpoint armed and is killed with
SIGKILL at that step (``put-after-log``, ``put-after-cq``, ``put-after-index``). The batch's
records are complete in the log at each of those points, so the model says the next opener
finishes the batch: every message is there, in order, exactly once. A crash before the log
write (``sync-before-fsync`` is not a put point) is not modelled here; the fault suite and the
LazyFS suite cover torn writes and power cuts.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from store.log.messagestore import Store
from store.log.offsets import ClusterOffsetStore
from store.log.record import Draft, java_hash

TOPICS = ("alpha", "beta")
GROUPS = ("g1", "g2")
bodies = st.lists(st.binary(min_size=0, max_size=300).filter(bool), min_size=1, max_size=6)

# A child that sends one batch (bodies as hex on argv) with a failpoint armed in its env.
_CHILD = """
import sys
from store.log.messagestore import Store
from store.log.record import Draft
s = Store.open(sys.argv[1])
s.put([Draft(sys.argv[2], bytes.fromhex(h), queue_id=int(sys.argv[3])) for h in sys.argv[4:]])
"""


class StoreModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root: Path | None = None
        self.store: Store | None = None
        self.queues: dict[str, list[list[bytes]]] = {}
        self.committed: dict[tuple[str, str, int], int] = {}

    @initialize(tmp=st.just(None))
    def open_fresh(self, tmp: None) -> None:
        import tempfile
        self.root = Path(tempfile.mkdtemp(prefix="mqctl-model-")) / "store"
        self.store = Store.open(self.root, create=True, warn=lambda m: None)

    # -- topics --------------------------------------------------------------------------
    @rule(topic=st.sampled_from(TOPICS), n=st.integers(1, 3))
    def create_topic(self, topic: str, n: int) -> None:
        assert self.store is not None
        if topic in self.queues:
            return
        self.store.create_topic(topic, n)
        self.queues[topic] = [[] for _ in range(n)]

    # -- writing -------------------------------------------------------------------------
    @precondition(lambda self: bool(self.queues))
    @rule(data=st.data(), batch=bodies)
    def send_to_queue(self, data: st.DataObject, batch: list[bytes]) -> None:
        assert self.store is not None
        topic = data.draw(st.sampled_from(sorted(self.queues)))
        qid = data.draw(st.integers(0, len(self.queues[topic]) - 1))
        res = self.store.put([Draft(topic, b, queue_id=qid) for b in batch])
        q = self.queues[topic][qid]
        assert [r.queue_offset for r in res] == list(range(len(q), len(q) + len(batch)))
        q.extend(batch)

    @precondition(lambda self: bool(self.queues))
    @rule(data=st.data(), key=st.text(min_size=1, max_size=8), batch=bodies)
    def send_with_sharding_key(self, data: st.DataObject, key: str, batch: list[bytes]) -> None:
        assert self.store is not None
        topic = data.draw(st.sampled_from(sorted(self.queues)))
        res = self.store.put([Draft(topic, b, sharding_key=key) for b in batch])
        qid = abs(java_hash(key)) % len(self.queues[topic])
        assert {r.queue_id for r in res} == {qid}, "a sharding key always selects the same queue"
        self.queues[topic][qid].extend(batch)

    @precondition(lambda self: bool(self.queues))
    @rule(data=st.data(), batch=bodies,
          point=st.sampled_from(["put-after-log", "put-after-cq", "put-after-index"]))
    def crash_mid_batch(self, data: st.DataObject, batch: list[bytes], point: str) -> None:
        assert self.store is not None and self.root is not None
        topic = data.draw(st.sampled_from(sorted(self.queues)))
        qid = data.draw(st.integers(0, len(self.queues[topic]) - 1))
        env = dict(os.environ, MQCTL_FAILPOINTS=point)
        p = subprocess.run([sys.executable, "-c", _CHILD, str(self.root), topic, str(qid)]
                           + [b.hex() for b in batch], env=env, capture_output=True, timeout=60)
        assert p.returncode == -9, p.stderr.decode()[-500:]
        # the records are whole in the log: whoever opens or writes next completes the batch
        self.queues[topic][qid].extend(batch)
        self.reopen()

    # -- consumer offsets ----------------------------------------------------------------
    @precondition(lambda self: bool(self.queues))
    @rule(data=st.data(), group=st.sampled_from(GROUPS))
    def commit_offset(self, data: st.DataObject, group: str) -> None:
        assert self.store is not None
        topic = data.draw(st.sampled_from(sorted(self.queues)))
        qid = data.draw(st.integers(0, len(self.queues[topic]) - 1))
        off = data.draw(st.integers(0, len(self.queues[topic][qid])))
        ClusterOffsetStore(self.store.layout).commit(group, {(topic, qid): off}, increase_only=True)
        key = (group, topic, qid)
        self.committed[key] = max(self.committed.get(key, -1), off)

    # -- reading -------------------------------------------------------------------------
    @precondition(lambda self: bool(self.queues))
    @rule(data=st.data(), count=st.integers(1, 8))
    def pull(self, data: st.DataObject, count: int) -> None:
        assert self.store is not None
        topic = data.draw(st.sampled_from(sorted(self.queues)))
        qid = data.draw(st.integers(0, len(self.queues[topic]) - 1))
        q = self.queues[topic][qid]
        start = data.draw(st.integers(0, len(q)))
        res = self.store.pull(topic, qid, start, count)
        assert [m.body for m in res.messages] == q[start:start + count]
        assert [m.queue_offset for m in res.messages] == list(range(start, start + len(res.messages)))
        assert not res.damaged

    @rule()
    def reopen(self) -> None:
        assert self.store is not None and self.root is not None
        self.store.close()
        self.store = Store.open(self.root, warn=lambda m: None)

    # -- what must hold after every step ---------------------------------------------------
    @invariant()
    def queues_match(self) -> None:
        if self.store is None:
            return
        for topic, qs in self.queues.items():
            for qid, q in enumerate(qs):
                assert self.store.max_offset(topic, qid) == len(q)

    @invariant()
    def offsets_match(self) -> None:
        if self.store is None:
            return
        cos = ClusterOffsetStore(self.store.layout)
        for (group, topic, qid), off in self.committed.items():
            assert cos.read(group, topic, qid) == off

    def teardown(self) -> None:
        if self.store is None:
            return
        try:
            for topic, qs in self.queues.items():
                for qid, q in enumerate(qs):
                    assert [m.body for m in self.store.iter_queue(topic, qid, 0)] == q
            rep = self.store.check()
            assert not rep.problems, rep.problems
        finally:
            self.store.close()
            import shutil
            assert self.root is not None
            shutil.rmtree(self.root.parent, ignore_errors=True)


StoreModel.TestCase.settings = settings(
    max_examples=int(os.environ.get("MQCTL_MODEL_EXAMPLES", "50")), stateful_step_count=20, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


@pytest.mark.timeout(900)
@pytest.mark.slow
class TestStoreModel(StoreModel.TestCase):
    pass
