"""Soak: producers with sharding keys, an orderly and a concurrent consumer group, a
transaction producer with ``tx check --loop``, and random ``kill -9``s, all at once for a bounded
time (``MQCTL_SOAK_SECONDS``, default 45); then every invariant is checked and the figures are
printed (run with ``-s`` to see them):

* every acknowledged message is consumed at least once by each group;
* in the orderly group, each key's first deliveries come in the order the key was sent;
* duplicates (by message id) only as redeliveries after kills: bounded by the kills of that
  group times what one member may hold uncommitted;
* each transaction is resolved at most once, and every one whose check says COMMIT is committed;
* ``store check`` is clean.

The seed of the kill schedule is printed (``MQCTL_SOAK_SEED`` replays it).
"""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.faults.faultutil import LOGGING_HANDLER, drop_torn_by_kills, read_handler_log
from tests.procs import MQ, MQCTL, handler_script, wait_for

TOPIC, TX_TOPIC, QUEUES = "soak", "soaktx", 4


def popen(p) -> subprocess.Popen:
    """The Popen of a Proc (consumers, the check service) or a bare Popen (a producer's send)."""
    return p.p if hasattr(p, "p") else p
PRODUCERS, KEYS_PER_PRODUCER, BATCH = 2, 4, 10


@pytest.mark.slow
def test_soak(mq: MQ, tmp_path: Path) -> None:
    seconds = float(os.environ.get("MQCTL_SOAK_SECONDS", "45"))
    seed = int(os.environ.get("MQCTL_SOAK_SEED", str(random.SystemRandom().randrange(1 << 30))))
    print(f"\nsoak: {seconds:g} s, seed {seed}")
    rng = random.Random(seed)
    mq.ok("topic", "create", TOPIC, "--queues", str(QUEUES))
    mq.ok("topic", "create", TX_TOPIC, "--queues", "2")
    handler = handler_script(tmp_path / "handler.sh", LOGGING_HANDLER)
    answer = handler_script(tmp_path / "answer.sh", """
        #!/bin/sh
        case "$(cat)" in c*) echo COMMIT ;; r*) echo ROLLBACK ;; *) echo UNKNOWN ;; esac
    """)
    orderly_log = tmp_path / "orderly.log"
    stop = threading.Event()
    lock = threading.Lock()
    procs: dict[str, object] = {}          # role -> the live process in that role
    all_procs: list = []
    kills: Counter = Counter()
    killed_pids: set[int] = set()
    attempted: set[str] = set()            # every body a producer tried to send
    acked: list[dict] = []                 # send results read back
    bodies_of: dict[str, str] = {}         # msgId -> body
    sent_batches = resends = 0
    tx_sent: dict[str, str] = {}           # txId -> body
    errors: list[str] = []

    def start(role: str) -> None:
        if role.startswith("orderly"):
            p = mq.start("consume", TOPIC, "-g", "ORD", "--orderly", "--from", "first", "--exec", handler,
                         "--rebalance-interval", "0.5", extra_env={"HANDLER_LOG": str(orderly_log)})
        elif role.startswith("conc"):
            p = mq.start("consume", TOPIC, "-g", "CON", "--from", "first", "--json", "--threads", "4",
                         "--rebalance-interval", "0.5")
        else:  # the transaction check service
            p = mq.start("tx", "check", "--check-cmd", answer, "--timeout", "1s", "--interval", "1s", "--loop")
        with lock:
            procs[role] = p
            all_procs.append((role, p))

    # -- producers: a batch at a time; a batch whose send was killed is sent again --------------------
    def producer(n: int) -> None:
        nonlocal sent_batches, resends
        seq = Counter()
        keys = [f"p{n}k{i}" for i in range(KEYS_PER_PRODUCER)]
        while not stop.is_set():
            lines = []
            for i in range(BATCH):
                k = keys[(sent_batches + i) % len(keys)]
                seq[k] += 1
                lines.append(f"{k}:{k}-{seq[k]}")
            with lock:
                attempted.update(ln.split(":", 1)[1] for ln in lines)
            while not stop.is_set():
                p = subprocess.Popen(MQCTL + ["send", TOPIC, "--key-delimiter", ":", "--json"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=mq.environ())
                with lock:
                    procs[f"producer{n}"] = p
                out, err = p.communicate("".join(f"{ln}\n" for ln in lines).encode(), timeout=60)
                with lock:
                    procs.pop(f"producer{n}", None)
                    sent_batches += 1
                res = [json.loads(x) for x in out.splitlines() if x.strip()]
                if p.returncode == 0 and len(res) == len(lines):
                    with lock:
                        acked.extend(res)
                        for r, ln in zip(res, lines):
                            bodies_of[r["msgId"]] = ln.split(":", 1)[1]
                    break
                if p.returncode != -signal.SIGKILL:
                    errors.append(f"send exited {p.returncode}: {err.decode()[-500:]}")
                    break
                with lock:
                    resends += 1  # killed: at-least-once producer, send the same batch again
            time.sleep(0.15 + rng.random() * 0.1)

    def tx_producer() -> None:
        i = 0
        while not stop.is_set():
            i += 1
            body = f"{rng.choice('ccr')}-{i}"
            res = mq.run("tx", "send", TX_TOPIC, body)
            if res.returncode == 0:
                with lock:
                    tx_sent[json.loads(res.stdout)["txId"]] = body
            else:
                errors.append(f"tx send exited {res.returncode}: {res.stderr[-300:]}")
            time.sleep(0.8)

    def killer() -> None:
        while not stop.wait(rng.uniform(2.0, 5.0)):
            with lock:
                live = sorted(((r, p) for r, p in procs.items() if popen(p).poll() is None), key=lambda x: x[0])
                if not live:
                    continue
                role, p = rng.choice(live)
                pid = p.pid
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
            kills[role.rstrip("0123456789")] += 1
            killed_pids.add(pid)
            if not role.startswith("producer"):
                try:
                    popen(p).wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
                start(role)

    for role in ("orderly0", "orderly1", "conc0", "conc1", "txcheck"):
        start(role)
    threads = [threading.Thread(target=producer, args=(n,), daemon=True) for n in range(PRODUCERS)]
    threads += [threading.Thread(target=tx_producer, daemon=True), threading.Thread(target=killer, daemon=True)]
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join(timeout=90)
    assert not errors, errors

    # -- drain: both groups deliver everything, then stop cleanly ---------------------------------------
    def con_delivered() -> list[dict]:
        out = []
        for role, p in all_procs:
            if role.startswith("conc"):
                out += [json.loads(x) for x in p.stdout().splitlines() if x.strip().startswith(b"{")]
        return out

    want = {r["msgId"] for r in acked}
    wait_for(lambda: want <= {r[3] for r in read_handler_log(orderly_log)}, timeout=180, what="the orderly group to drain")
    wait_for(lambda: want <= {e["msgId"] for e in con_delivered()}, timeout=180, what="the concurrent group to drain")
    final_check = mq.run("tx", "check", "--check-cmd", answer, "--timeout", "0", timeout=120)
    for role, p in list(procs.items()):
        if hasattr(p, "stop"):
            assert p.stop() == 0, f"{role}: {p.stderr()[-1000:]}"
    assert final_check.returncode == 0, final_check.stderr

    # -- invariants ---------------------------------------------------------------------------------------
    # (a body of a batch whose send was killed may be stored though never acknowledged)
    ordered, torn = drop_torn_by_kills(read_handler_log(orderly_log, with_pid=True), attempted, killed_pids)
    con = con_delivered()
    violations = []
    first_seq: dict[str, int] = {}
    seen = set()
    for _t, _q, _off, _mid, body in ordered:
        if body in seen:  # a redelivery, or a copy the producer resent after a kill
            continue
        seen.add(body)
        key, _, s = body.rpartition("-")
        if int(s) <= first_seq.get(key, 0):
            violations.append(f"orderly: {body} after {key}-{first_seq[key]}")
        first_seq[key] = max(first_seq.get(key, 0), int(s))
    missing_ord = want - {r[3] for r in ordered}
    missing_con = want - {e["msgId"] for e in con}
    dup_ord = len(ordered) - len({r[3] for r in ordered})
    dup_con = len(con) - len({e["msgId"] for e in con})
    for e in con:
        if e["msgId"] in bodies_of and e["body"] != bodies_of[e["msgId"]]:
            violations.append(f"concurrent: wrong body for {e['msgId']}")

    from store.log.messagestore import Store
    from store.tx.transaction import load
    tx_states = Counter()
    tx_bad = []
    with Store.open(mq.root) as store:
        real = Counter(m.uniq_key for q in range(2) for m in store.iter_queue(TX_TOPIC, q, 0))
        for tx, body in tx_sent.items():
            st = load(store, tx).state
            tx_states[st] += 1
            if real[tx] > 1:
                tx_bad.append(f"{tx} committed {real[tx]} times")
            if (real[tx] == 1) != (st == "COMMITTED"):
                tx_bad.append(f"{tx}: state {st} with {real[tx]} committed copies")
            if body[0] == "c" and st != "COMMITTED":
                tx_bad.append(f"{tx} ({body}) is {st}, its check says COMMIT")
            if body[0] == "r" and st != "ROLLED_BACK":
                tx_bad.append(f"{tx} ({body}) is {st}, its check says ROLLBACK")
    check = mq.check()

    # one member holds at most a persist interval (5 s) of deliveries uncommitted, plus what
    # it pulled ahead; each kill of a member may cost that much again
    rate = len(acked) / max(seconds, 1)
    per_kill = int(5 * rate * 1.5) + 64 * QUEUES
    figures = {
        "seconds": seconds, "seed": seed, "acknowledged": len(acked), "sendBatches": sent_batches,
        "batchesResent": resends, "kills": dict(kills), "orderlyDeliveries": len(ordered), "orderlyDuplicates": dup_ord,
        "concurrentDeliveries": len(con), "concurrentDuplicates": dup_con, "missingOrderly": len(missing_ord),
        "missingConcurrent": len(missing_con), "orderViolations": len(violations), "transactions": dict(tx_states),
        "transactionViolations": len(tx_bad), "storeCheck": check.returncode, "truncatedHandlerBodies": torn,
    }
    print("soak figures: " + json.dumps(figures))
    assert not missing_ord and not missing_con, (sorted(missing_ord)[:5], sorted(missing_con)[:5])
    assert not violations, violations[:10]
    assert not tx_bad, tx_bad[:10]
    assert dup_ord <= kills["orderly"] * per_kill, figures
    assert dup_con <= kills["conc"] * per_kill, figures
    assert check.returncode == 0, check.out + check.stderr
    assert kills, "the soak killed nothing"
