#!/usr/bin/env python3
"""Every speed comparison in one command, quiet and beside CPU hogs, and one table.

Not a test. Run from the repository::

    .venv/bin/python tests/bench/bench_all.py                  # quiet, then 2 hogs; ~40-60 min
    .venv/bin/python tests/bench/bench_all.py --hogs 2 --mb 30 --reps 5   # loaded only, smaller

For each hog count in ``--hogs`` (``yes > /dev/null`` processes, started before and ended after
each part, beside mqctl and its peers alike) it runs

* ``bench_startup.py --skip startup,xargs,idle``: the floor (``wake_floor.c``: a C consumer
  of the same store woken the same way, inotify), Redis ``XREADGROUP BLOCK``, store ->
  ``consume --json`` stdout, ``--orderly`` and ``--exec`` (a bash handler and a compiled one),
  interleaved round by round (``--rounds``), p50/p99 per mode (the median of the rounds') and
  each p99 over the floor's in the same round (the median of the rounds' ratios);
* ``bench_produce.py --nrss 0``: produce and consume, CLI and Python API, at 100 B-64 KiB
  against Redis Streams; ``--flush sync`` (CLI ``--batch-size 100``, ``send_many`` of 100)
  against Redis ``appendfsync always``; single sync sends against SQLite WAL
  ``synchronous=FULL``; 64 KiB through a pipe against the C floor (``pipe_floor.c``) twice:
  the ``--mb`` run (100 MB: the process's start, ~40 ms, included) and ``--pipe-mb`` (1 GB:
  the pipe's throughput, which the target >= 0.8 is judged on), ``--reps`` interleaved
  repetitions, medians; and the durable comparisons again in small interleaved rounds
  (``--rounds``: 100 single sends against 100 SQLite commits, 10 batches of 100 against 10 Redis
  pipelines, alternating), the median of the rounds' ratios;

* ``bench_members.py --skip idle``: one group's members (1-16) on 16 queues, throughput and
  CPU a message, and how fast 16 members started together settle;

and prints one table: the machine's load during each part, each figure, its target, and
whether it is met. The parts' own JSON results stay in ``bench-results/``; the table is
written there too (``all-<UTC>.txt``), and all the parts' results in one file
(``all-<UTC>.json``). ``--readme`` then writes the README's performance tables from them
(``report.py``); ``--render all-<UTC>.json --readme`` does that again from a saved run.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import report
from hogs import loadavg

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
RESULTS = REPO / "bench-results"


def newest(prefix: str, after: float) -> dict:
    files = [p for p in RESULTS.glob(f"{prefix}-*.json") if p.stat().st_mtime >= after]
    if not files:
        raise SystemExit(f"no bench-results/{prefix}-*.json was written")
    return dict(json.loads(max(files, key=lambda p: p.stat().st_mtime).read_text()))


def run_part(script: str, args: list[str], prefix: str) -> dict:
    t = time.time()
    subprocess.run([sys.executable, str(HERE / script), *args], check=True, cwd=REPO,
                   stdout=subprocess.DEVNULL)
    return newest(prefix, t - 1)


def verdict(value: float, target: float | None, higher: bool = True) -> str:
    if target is None or value != value:
        return ""
    ok = value >= target if higher else value <= target
    return "met" if ok else "NOT met"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hogs", default="0,2", help="CPU hog counts to run every part with (0: a quiet run)")
    ap.add_argument("--reps", type=int, default=5, help="interleaved repetitions of bench_produce")
    ap.add_argument("--mb", type=float, default=100.0, help="payload per produce run, MB")
    ap.add_argument("--nmax", type=int, default=500_000, help="most messages per produce run")
    ap.add_argument("--pipe-mb", type=float, default=1000.0,
                    help="MB of 64 KiB lines for the pipe's throughput against the C floor (0: skip)")
    ap.add_argument("--rounds", type=int, default=3, help="latency rounds (each mode and Redis per round)")
    ap.add_argument("--messages", type=int, default=200, help="messages per latency run")
    ap.add_argument("--members-reps", type=int, default=3, help="repetitions of bench_members")
    ap.add_argument("--skip", default="", help="comma list of parts to skip: latency,produce,members")
    ap.add_argument("--readme", action="store_true", help="write the README's performance tables from the run")
    ap.add_argument("--render", type=Path, help="a saved all-<UTC>.json: render it (with --readme) and run nothing")
    a = ap.parse_args()
    if a.render:
        saved = json.loads(a.render.read_text())
        print(report.render(saved))
        if a.readme:
            write_readme(saved)
        return
    skip = set(filter(None, a.skip.split(",")))
    RESULTS.mkdir(exist_ok=True)
    lines: list[str] = []

    def out(text: str = "") -> None:
        lines.append(text)
        print(text, flush=True)

    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=REPO).stdout.strip()
    run: dict = {"started": started, "commit": commit, "cores": os.cpu_count(), "load_start": loadavg(),
                 "parts": []}
    out(f"mqctl against its peers, {started}; {os.cpu_count()} cores; load at start {loadavg()}")
    out(f"commit {commit}; {a.reps} interleaved repetitions, medians (min-max) of per-repetition ratios")
    for hogs in [int(x) for x in a.hogs.split(",") if x]:
        part: dict = {"hogs": hogs}
        run["parts"].append(part)
        out()
        out(f"=== {hogs} CPU hog{'s' if hogs != 1 else ''} (yes > /dev/null) ===")
        if "latency" not in skip:
            res = run_part("bench_startup.py", ["--skip", "startup,xargs,idle", "--hogs", str(hogs),
                                                "--rounds", str(a.rounds), "--messages", str(a.messages)],
                           "startup")
            part["latency"] = res
            ld = res.get("latency_load", {})
            out(f"latency, store -> consumer (ms), {a.rounds} rounds x {a.messages} messages;"
                f" load {ld.get('load_start', '?')} -> {ld.get('load_end', '?')}")
            out(f"  {'':26s} {'p50':>7s} {'p99':>7s} {'max':>7s} {'p99/floor':>9s}  target p99")
            for name, v in res.get("latency", {}).items():
                if not v.get("received"):
                    out(f"  {name:26s} nothing received")
                    continue
                target = 15.0 if "exec" in name else (10.0 if name.startswith("mqctl") else None)
                ratio = f"{v['p99_x_floor']:8.2f}x" if "p99_x_floor" in v and "floor" not in name else f"{'':9s}"
                out(f"  {name:26s} {v['p50_ms']:7.2f} {v['p99_ms']:7.2f} {v['max_ms']:7.2f} {ratio}  "
                    f"{'<= ' + format(target, 'g') if target else '':7s} {verdict(v['p99_ms'], target, higher=False)}")
        if "produce" not in skip:
            res = run_part("bench_produce.py", ["--nrss", "0", "--reps", str(a.reps), "--mb", str(a.mb),
                                                "--nmax", str(a.nmax), "--pipe-mb", str(a.pipe_mb),
                                                "--hogs", str(hogs)], "produce")
            part["produce"] = res
            m = res["machine"]
            out(f"throughput (msgs/s), N per size {res['counts']}; load per repetition:"
                f" {'; '.join(m.get('loadavg_per_rep', []))}")
            for k, v in res["medians"].items():
                if k.startswith("pagecache"):
                    continue
                out(f"  {k:44s} {v['median']:12,.0f}  ({v['min']:,.0f}-{v['max']:,.0f})")
            for k, v in res.get("rounds", {}).get("sides", {}).items():
                m = v["msgs_per_s"]
                cpu = v["cpu_us_per_msg"]
                out(f"  {k + ' (rounds)':44s} {m['median']:12,.0f}  ({m['min']:,.0f}-{m['max']:,.0f})"
                    + (f"  {cpu['median']:.1f} CPU us/msg" if cpu else ""))
            out("ratios (median of per-repetition ratios; _rounds: of the interleaved rounds' ratios)")
            for k, v in res["ratios"].items():
                if "logbytes" in k or "pagecache" in k:
                    continue
                target = None
                if "(target >= " in k:
                    target = float(k.split("(target >= ")[1].rstrip(")"))
                name = k.split(" (target")[0]
                out(f"  {name:52s} {v['median']:6.2f}  ({v['min']:.2f}-{v['max']:.2f})"
                    f"  {'>= ' + format(target, 'g') if target else '':6s} {verdict(v['median'], target)}")
        if "members" not in skip:
            res = run_part("bench_members.py", ["--skip", "idle", "--reps", str(a.members_reps),
                                                "--hogs", str(hogs)], "members")
            part["members"] = res
            out(f"one group's members, {res['count']:,} x 100 B on {res['queues']} queues;"
                f" load {res['load_start']} -> {res['load_end']}")
            rate = res.get("rate", {}).get("this", {})
            if rate:
                one = rate[str(min(int(k) for k in rate))]["rate"]["median"]
                for n, v in sorted(rate.items(), key=lambda kv: int(kv[0])):
                    x = v["rate"]["median"] / one
                    out(f"  {n:>2} members {v['rate']['median']:12,.0f} msgs/s  x1 {x:5.2f}"
                        f"  {v['cpu_us_per_msg']['median']:5.2f} CPU us/msg  >= 1 {verdict(x, 1.0)}")
            st = res.get("settle", {}).get("this")
            if st:
                out(f"  16 started together: settled {st['settle']['median']:.2f} s after the last join"
                    f"  <= 2 {verdict(st['settle']['median'], 2.0, higher=False)};"
                    f" a joiner's queue after {st['joiner']['median']:.2f} s"
                    f"  <= 0.5 {verdict(st['joiner']['median'], 0.5, higher=False)}")
    out()
    out(f"load at end {loadavg()}")
    run["load_end"] = loadavg()
    path = RESULTS / f"all-{started.replace(':', '')}.txt"
    path.write_text("\n".join(lines) + "\n")
    path.with_suffix(".json").write_text(json.dumps(run, indent=2) + "\n")
    print(f"\nwritten to {path} and {path.with_suffix('.json').name}", file=sys.stderr)
    if a.readme:
        write_readme(run)


def write_readme(run: dict) -> None:
    readme = REPO / "README.md"
    readme.write_text(report.replace_block(readme.read_text(), report.render(run)))
    print(f"README.md's performance tables written from the run of {run['started']}", file=sys.stderr)


if __name__ == "__main__":
    main()
