"""Power cuts during consumption (clustering, orderly, broadcast), transactions (half
messages, commit/rollback, the check service) and retention (``store clean``)."""
from __future__ import annotations

import time

import pytest

from tests.power.powerlib import Power, ndjson, wait_for

pytestmark = [pytest.mark.power, pytest.mark.slow]

SMALL = ["--max-message-size", "4096", "--segment-size", "73728"]


def test_cut_during_consumption(power: Power) -> None:
    power.ok("init", *SMALL)
    power.ok("topic", "create", "feed", "--queues", "4")
    power.send("feed", power.bodies("pre-sync", 200), True)
    power.send("feed", power.bodies("pre-async", 300), False)
    groups = [power.group("clu", "feed"), power.group("ord", "feed", "orderly"),
              power.group("bc", "feed", "broadcast")]
    p = power.start_producer("feed", "live", 3000, sync=True, batch=8)
    consumers = [power.start_consumer(g) for g in groups]
    consumers.append(power.start_consumer(groups[0]))   # a second clustering member
    for g in groups:
        wait_for(lambda g=g: len(g.handled()) >= 100, 60, what=f"group {g.name} to consume")
    power.fs.checkpoint()
    power.send("feed", power.bodies("late-async", 100), False)
    wait_for(lambda: len(groups[0].handled()) >= 450, 60, what="clu to consume the async data")
    power.power_cut()
    power.collect([p])
    power.verify(["feed"])
    power.send_after_cut_and_deliver(["feed"])
    power.power_cut()
    power.verify(["feed"])
    power.send_after_cut_and_deliver(["feed"])


def _tx_send(power: Power, topic: str, body: str, outcome: int) -> dict:
    cp = power.run("tx", "send", topic, body, "--flush", "sync", "--exec", f"sh -c 'exit {outcome}'")
    rows = ndjson(cp.stdout)
    assert cp.returncode == 0 and rows, f"tx send exited {cp.returncode}: {cp.stderr[:300]}"
    return rows[-1]


def test_cut_during_transactions_and_check_service(power: Power) -> None:
    """Committed transactions are delivered exactly once, rolled-back ones never, and every
    unknown one is resolved by the check service after the cut as its answer says."""
    power.ok("init")
    power.ok("topic", "create", "pay", "--queues", "2")
    power.ledger.bodies.update([f"tx-{i}-{k}" for i in range(40) for k in ("commit", "rollback", "unknown")])
    want: dict[str, str] = {}    # body -> COMMIT | ROLLBACK (final outcome)
    for i in range(4):
        for kind, code in (("commit", 0), ("rollback", 1), ("unknown", 3)):
            body = f"tx-{i}-{kind}"
            res = _tx_send(power, "pay", body, code)
            want[body] = {"commit": "COMMIT", "rollback": "ROLLBACK"}.get(kind, "")
            if kind == "unknown":
                want[body] = "COMMIT" if i % 2 == 0 else "ROLLBACK"
            assert res.get("state"), res
    # two-step transactions resolved by hand, and a check service running when the power goes
    halves = []
    for i in range(4, 10):
        body = f"tx-{i}-unknown"
        halves.append((_tx_send(power, "pay", body, 3), body))
        want[body] = "COMMIT" if i % 2 == 0 else "ROLLBACK"
    for res, body in halves[:2]:
        power.ok("tx", "commit" if want[body] == "COMMIT" else "rollback", res["txId"], "--flush", "sync")
    script = power.work / "check.sh"
    script.write_text("#!/bin/sh\nif grep -Eq -- '-[0-9]*[02468]-unknown$'; then echo COMMIT; else echo ROLLBACK; fi\n")
    script.chmod(0o755)
    g = power.group("acct", "pay")
    power.start_consumer(g)
    checker = power.start("tx", "check", "--check-cmd", str(script), "--timeout", "0", "--loop",
                          "--interval", "500ms")
    for i in range(10, 16):   # more work arriving while the check service runs
        body = f"tx-{i}-unknown"
        _tx_send(power, "pay", body, 3)
        want[body] = "COMMIT" if i % 2 == 0 else "ROLLBACK"
    time.sleep(0.5)   # the check service runs a few passes, then the power goes
    assert checker.alive(), f"tx check --loop exited: {checker.stderr()[-500:]}"
    power.power_cut()

    def settle_and_check() -> None:
        power.reopen()
        power.check_clean()
        power.ok("tx", "check", "--check-cmd", str(script), "--timeout", "0", timeout=90)
        left = power.ok("tx", "list", "--json").stdout
        assert not ndjson(left), f"after cut {power.cuts}: unresolved transactions remain: {left[:300]!r}"
        msgs = power.verify(["pay"])["pay"]
        seen: dict[str, int] = {}
        for m in msgs:
            seen[m["body"]] = seen.get(m["body"], 0) + 1
        wrong = {b: (w, seen.get(b, 0)) for b, w in want.items()
                 if (w == "COMMIT") != (seen.get(b, 0) == 1) or seen.get(b, 0) > 1}
        assert not wrong, (f"after cut {power.cuts}: transactions delivered wrongly "
                           f"(body: (outcome, copies)): {dict(list(wrong.items())[:6])}")

    settle_and_check()
    power.send_after_cut_and_deliver(["pay"])
    power.power_cut()
    settle_and_check()
    power.send_after_cut_and_deliver(["pay"])


def test_cut_during_retention(power: Power) -> None:
    """A cut during and after ``store clean``: what the clean kept stays, every acknowledged
    message at or above each queue's new minimum is there, and the store stays clean."""
    power.ok("init", *SMALL)
    power.ok("topic", "create", "logs", "--queues", "2")
    power.send("logs", power.bodies("old", 1500), True)     # ~3 segments
    g = power.group("keep", "logs")
    power.drain_group(g)
    p = power.start_producer("logs", "during", 2000, sync=True, batch=8)
    cleaner = power.run("store", "clean", "--older-than", "0s", "--json", timeout=60)
    assert cleaner.returncode == 0, f"store clean exited {cleaner.returncode}: {cleaner.stderr[:300]}"
    power.start_consumer(g)
    wait_for(lambda: len(ndjson(p.proc.stdout())) >= 50, 60, what="the producer after the clean")
    power.power_cut()
    power.collect([p])

    def floors() -> dict:
        return {"logs": {q: row["minOffset"] for q, row in power.status("logs").items()}}

    power.reopen()
    power.check_clean()
    first = floors()
    assert any(v > 0 for v in first["logs"].values()), f"store clean deleted nothing: {first}"
    power.verify(["logs"], retained_from=first)
    power.send_after_cut_and_deliver(["logs"])
    power.run("store", "clean", "--older-than", "0s", timeout=60)
    power.power_cut()
    power.verify(["logs"], retained_from=floors())
    power.send_after_cut_and_deliver(["logs"])
