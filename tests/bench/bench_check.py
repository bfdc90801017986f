#!/usr/bin/env python3
"""``store check`` and ``store recover`` beside a full consume of the same store.

Not a test. Builds stores of N 100-byte messages over 8 queues once (``mqctl send T --flush
async``, in ``--workdir``, by default under /tmp), then runs, interleaved rep by rep, a full
consume with a fresh group (``consume T -g G --from first -e > /dev/null``, the baseline),
``store check`` and ``store recover``, each as a whole ``mqctl`` process under
``/usr/bin/time`` (wall time, peak RSS). Reports each command's median, spread and its ratio
to the consume of the same rep, with the load average before and after::

    .venv/bin/python tests/bench/bench_check.py --sizes 1000000,10000000 --reps 3
    .venv/bin/python tests/bench/bench_check.py --sizes 1000000 --hog      # beside a CPU hog per core
    .venv/bin/python tests/bench/bench_check.py --sizes 1000000 --base /path/to/other/checkout

``--base`` adds the check and recover of another checkout (run with ``PYTHONPATH`` at it, same
interpreter) to the interleave. The stores are deleted at the end unless ``--keep``; a kept
store is reused by the next run with the same ``--workdir``.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MQCTL = [sys.executable, "-m", "mqctl"]
TIME = "/usr/bin/time"


def env_for(store: Path, code: Path) -> dict[str, str]:
    env = dict(os.environ, MQCTL_STORE=str(store), NO_COLOR="1", PYTHONPATH=str(code))
    env.pop("MQCTL_FAILPOINTS", None)
    return env


def build(store: Path, n: int) -> float:
    """A store of ``n`` 100-byte messages on topic T, 8 queues."""
    done = store / ".bench-built"
    if done.exists():
        return float(done.read_text())
    shutil.rmtree(store, ignore_errors=True)
    env = env_for(store, REPO)
    subprocess.run([*MQCTL, "topic", "create", "T", "--queues", "8"], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t = time.perf_counter()
    p = subprocess.Popen([*MQCTL, "send", "T", "--flush", "async"], stdin=subprocess.PIPE,
                         stdout=subprocess.DEVNULL, env=env)
    assert p.stdin is not None
    pad = b"x" * 90
    step = 100_000
    for a in range(0, n, step):
        p.stdin.write(b"".join(b"%010d" % i + pad + b"\n" for i in range(a, min(a + step, n))))
    p.stdin.close()
    if p.wait() != 0:
        raise SystemExit("building the store failed")
    dt = time.perf_counter() - t
    done.write_text(str(dt))
    return dt


def timed(args: list[str], store: Path, code: Path) -> dict[str, float]:
    """One mqctl process: wall seconds, CPU seconds and peak RSS (MB) from /usr/bin/time."""
    fmt = "BENCH %e %U %S %M"
    p = subprocess.run([TIME, "-f", fmt, *MQCTL, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       env=env_for(store, code), cwd=code, timeout=7200)
    err = p.stderr.decode()
    line = [x for x in err.splitlines() if x.startswith("BENCH ")]
    if p.returncode != 0 or not line:
        raise SystemExit(f"mqctl {' '.join(args)} failed ({p.returncode}): {err[-2000:]}")
    wall, user, sys_, rss = line[-1].split()[1:]
    return {"s": float(wall), "cpu": float(user) + float(sys_), "mb": int(rss) / 1024}


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1000000", help="messages per store, comma separated")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--workdir", default="/tmp/mqctl-bench-check")
    ap.add_argument("--keep", action="store_true", help="keep the stores for the next run")
    ap.add_argument("--hog", action="store_true", help="run `yes > /dev/null` per core meanwhile")
    ap.add_argument("--base", type=Path, default=None, help="another checkout: its check and recover too")
    ap.add_argument("--json", type=Path, default=None, help="write the raw runs here")
    args = ap.parse_args()
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    sizes = [int(x) for x in args.sizes.split(",")]
    cmds: list[tuple[str, list[str], Path]] = [("consume", [], REPO), ("check", ["store", "check"], REPO),
                                               ("recover", ["store", "recover"], REPO)]
    if args.base is not None:
        cmds += [("check@base", ["store", "check"], args.base.resolve()),
                 ("recover@base", ["store", "recover"], args.base.resolve())]
    hogs: list[subprocess.Popen[bytes]] = []
    results: dict[str, dict[str, list[dict[str, float]]]] = {}
    try:
        for n in sizes:
            store = work / f"store-{n}"
            built = build(store, n)
            print(f"# {n:,} messages: store built in {built:.1f} s, "
                  f"{sum(f.stat().st_size for f in (store / 'commitlog').iterdir()) / 1e6:.0f} MB of log", flush=True)
            if args.hog and not hogs:
                hogs = [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) for _ in range(os.cpu_count() or 1)]
            runs: dict[str, list[dict[str, float]]] = {name: [] for name, _, _ in cmds}
            load0 = loadavg()
            for rep in range(args.reps):
                for name, cmd, code in cmds:
                    if name == "consume":
                        cmd = ["consume", "T", "-g", f"bench{time.time_ns()}", "--from", "first", "-e"]
                    runs[name].append(timed(cmd, store, code))
                print(f"  rep {rep + 1}: " + ", ".join(f"{k} {v[-1]['s']:.2f} s" for k, v in runs.items()), flush=True)
            print(f"  load before {load0}, after {loadavg()}{' (with a CPU hog per core)' if hogs else ''}")
            base = [r["s"] for r in runs["consume"]]
            base_cpu = [r["cpu"] for r in runs["consume"]]
            for name, rs in runs.items():
                s = [r["s"] for r in rs]
                cpu = [r["cpu"] for r in rs]
                ratio = [x / b for x, b in zip(s, base)]
                cratio = [x / b for x, b in zip(cpu, base_cpu)]
                print(f"  {name:13s} wall median {statistics.median(s):6.2f} s ({min(s):.2f}-{max(s):.2f}), "
                      f"cpu {statistics.median(cpu):6.2f} s, max RSS {max(r['mb'] for r in rs):4.0f} MB; "
                      f"to consume of the same rep: wall {statistics.median(ratio):.2f} "
                      f"({min(ratio):.2f}-{max(ratio):.2f}), cpu {statistics.median(cratio):.2f} "
                      f"({min(cratio):.2f}-{max(cratio):.2f})", flush=True)
            results[str(n)] = runs
    finally:
        for h in hogs:
            h.kill()
            h.wait()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
