"""Metadata at scale: what topics cost every command, and what the offsets
journal costs consumers and producers. A benchmark, not a test.

    .venv/bin/python tests/bench/bench_metadata.py [--sizes 1,100,1000,10000] [--runs 7]
        [--baseline DIR] [--count 200000]

1. For stores of 1, 100, 1,000 and 10,000 topics (ratios to the 1-topic store, same run;
   median of ``--runs``): ``mqctl topic list --json`` (and topics listed per second),
   ``Store.open`` in this process, ``mqctl send`` of one message to an existing topic,
   ``mqctl topic create`` of a new topic, and a consumer's start (``mqctl consume T -g G
   --count 1``: process start to its first message). The topics beyond the first are
   written straight into their files (the same bytes ``topic create`` writes, without its
   fsyncs), so setting up 10,000 topics takes seconds.
2. The cost of offset durability: ``mqctl bench consume`` (messages per second; every turn
   commits), and ``mqctl send`` throughput (``seq N | mqctl send``) alone and while 100
   groups commit in a loop (one process committing for 100 groups in turn). With
   ``--baseline DIR`` (a checkout of an older tree) each measurement runs there too,
   interleaved, and the ratio is printed.

Results: ``bench-results/metadata-<UTC>.json``.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "bench-results"
PY = sys.executable


def log(msg: str) -> None:
    sys.stderr.write(f"[bench {time.strftime('%H:%M:%S')}] {msg}\n")
    sys.stderr.flush()


def env_for(tree: Path | None, store: Path | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MQCTL_")}
    env["NO_COLOR"] = "1"
    env["PYTHONPATH"] = str(tree or REPO)
    if store is not None:
        env["MQCTL_STORE"] = str(store)
    return env


def mqctl(tree: Path | None, store: Path, *args: str, input: bytes | None = None) -> float:
    """Run ``mqctl ARGS``; its wall time in seconds (it must succeed)."""
    t0 = time.perf_counter()
    cp = subprocess.run([PY, "-m", "mqctl", *args], input=input, capture_output=True,
                        env=env_for(tree, store), cwd=tree or REPO)
    took = time.perf_counter() - t0
    if cp.returncode != 0:
        raise SystemExit(f"mqctl {' '.join(args)} -> {cp.returncode}: {cp.stderr.decode()[-400:]}")
    return took


def populate(store: Path, n: int) -> None:
    """``n`` topics: t0 through the CLI, the rest written as ``topic create`` writes them."""
    sys.path.insert(0, str(REPO))
    from store.fsutil import with_crc
    from store.layout import Layout
    from store.log.topics import TopicConfig
    mqctl(None, store, "init")
    mqctl(None, store, "topic", "create", "t0")
    lay = Layout(store)
    for i in range(1, n):
        cfg = TopicConfig(f"t{i}", 8, False, int(time.time() * 1000), 0)
        body = (json.dumps(with_crc(cfg.to_json()), indent=2, sort_keys=True) + "\n").encode()
        qdir = lay.topic_cq_dir(cfg.name)
        for q in range(8):
            os.makedirs(qdir / str(q), mode=0o700)
        (qdir / "topic.json").write_bytes(body)
        lay.topic_config(cfg.name).write_bytes(body)
    mqctl(None, store, "send", "t0", "hello")


def median_of(runs: int, fn) -> float:  # noqa: ANN001
    return statistics.median(fn(i) for i in range(runs))


def measure(store: Path, n: int, runs: int) -> dict:
    sys.path.insert(0, str(REPO))
    from store.log.messagestore import Store
    row: dict = {"topics": n}
    row["topicList_s"] = median_of(runs, lambda i: mqctl(None, store, "topic", "list", "--json"))
    row["topicsListedPerS"] = n / row["topicList_s"]

    def open_once(i: int) -> float:
        t0 = time.perf_counter()
        Store.open(store, warn=lambda m: None).close()
        return time.perf_counter() - t0
    row["open_s"] = median_of(runs * 3, open_once)
    row["send_s"] = median_of(runs, lambda i: mqctl(None, store, "send", "t0", f"m{i}"))
    row["topicCreate_s"] = median_of(runs, lambda i: mqctl(None, store, "topic", "create", f"new{i}"))
    row["consumerStart_s"] = median_of(runs, lambda i: mqctl(
        None, store, "consume", "t0", "-g", f"G{i}", "--from", "first", "--count", "1"))
    return row


def scale(sizes: list[int], runs: int, work: Path) -> list[dict]:
    rows = []
    for n in sizes:
        store = work / f"s{n}"
        log(f"{n} topics: populating")
        populate(store, n)
        rows.append(measure(store, n, runs))
        log(json.dumps(rows[-1]))
    base = rows[0]
    for row in rows:
        for k in ("topicList_s", "open_s", "send_s", "topicCreate_s", "consumerStart_s"):
            row[k.replace("_s", "_ratio")] = row[k] / base[k]
    return rows


COMMITTER = """
import sys, time
from store.layout import Layout
from store.log.offsets import ClusterOffsetStore
store = ClusterOffsetStore(Layout(__import__('pathlib').Path(sys.argv[1])))
i = 0
while True:
    store.commit(f"g{i % 100}", {("t0", i % 8): i})
    i += 1
"""


def journal_cost(trees: list[Path | None], count: int, runs: int, work: Path) -> list[dict]:
    rows = []
    for r in range(runs):
        for tree in trees:
            name = "baseline" if tree is not None else "this"
            d = Path(tempfile.mkdtemp(dir=work))
            cp = subprocess.run([PY, "-m", "mqctl", "bench", "consume", "--count", str(count), "--repeat", "1",
                                 "--dir", str(d), "--json"], capture_output=True, env=env_for(tree), cwd=tree or REPO)
            rate = None
            for line in cp.stdout.decode().splitlines():
                obj = json.loads(line)
                rate = obj.get("msgsPerSec") or rate
            store = d / "send"
            mqctl(tree, store, "init")
            mqctl(tree, store, "topic", "create", "t0")
            data = b"".join(b"%d\n" % i for i in range(count))
            alone = mqctl(tree, store, "send", "t0", input=data)
            committer = subprocess.Popen([PY, "-c", COMMITTER, str(store)], env=env_for(tree), cwd=tree or REPO)
            try:
                time.sleep(1.0)   # the committers are running
                busy = mqctl(tree, store, "send", "t0", input=data)
            finally:
                committer.kill()
                committer.wait()
            row = {"tree": name, "round": r, "benchConsumeRate": rate, "sendAlone_mps": count / alone,
                   "sendWhile100GroupsCommit_mps": count / busy}
            rows.append(row)
            log(json.dumps(row))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1,100,1000,10000")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--count", type=int, default=200_000)
    ap.add_argument("--baseline", type=Path, default=None)
    ap.add_argument("--skip-scale", action="store_true")
    ap.add_argument("--skip-journal", action="store_true")
    a = ap.parse_args()
    out: dict = {}
    with tempfile.TemporaryDirectory(prefix="bench-meta-") as tmp:
        work = Path(tmp)
        if not a.skip_scale:
            out["scale"] = scale([int(x) for x in a.sizes.split(",")], a.runs, work)
        if not a.skip_journal:
            trees: list[Path | None] = [None] + ([a.baseline] if a.baseline else [])
            out["journal"] = journal_cost(trees, a.count, max(1, a.runs // 2), work)
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"metadata-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    path.write_text(json.dumps(out, indent=2))
    print(json.dumps(out, indent=2))
    log(f"wrote {path}")


if __name__ == "__main__":
    main()
