#!/usr/bin/env python3
"""Where a member of a many-member group spends its CPU. Not a test::

    .venv/bin/python tests/bench/member_profile.py --members 16 [--cprofile OUT] [--perf OUT]

``--members`` ``mqctl consume`` processes of one group on a topic of ``--queues`` queues (as
``bench_members.py`` starts them), ``--count`` 100-byte messages stored at once after the
group settled, read from their stdout. Printed: msgs/s, the CPU all members spent per message
(``/proc``), and that CPU split between the members' main threads (pulls, checks, writes to
stdout) and their other threads (the offset writer's commits); ``cpu_s`` in seconds, also as
user and system time (clock ticks).

``--cprofile OUT``: the first member runs under cProfile, its main thread profiled from just
before the messages are stored until the last line is out, in thread CPU time (a wall-clock
profile of a member among 16 on 2 cores is mostly time spent waiting for a core); other
threads are profiled for their whole life, each to ``OUT.<thread name>``. Builtin calls cost
much more under the profiler than outside it: compare its shares with the thread split.
``--perf OUT``: ``perf record -e cpu-clock`` of every member over the same span (C level:
the interpreter, the kernel's copies, page faults).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench_members import read_lines

HERE = Path(__file__).resolve().parents[2]
TICK = os.sysconf("SC_CLK_TCK")

# Run in the profiled member: `mqctl` with cProfile on the main thread between SIGUSR1 and
# SIGUSR2 (dumped to argv[1]), and on every other thread for its whole life.
_PROFILED = """
import cProfile, signal, sys, threading, time
out = sys.argv[1]
sys.argv = ["mqctl"] + sys.argv[2:]
main_prof = cProfile.Profile(time.thread_time)
signal.signal(signal.SIGUSR1, lambda *_: main_prof.enable())
def _dump(*_):
    main_prof.disable()
    main_prof.dump_stats(out)
signal.signal(signal.SIGUSR2, _dump)
_run = threading.Thread.run
def run(self):
    p = cProfile.Profile(time.thread_time)
    p.enable()
    try:
        _run(self)
    finally:
        p.disable()
        p.dump_stats(f"{out}.{self.name}")
threading.Thread.run = run
from mqctl.entry import main
main()
"""


def thread_times(pid: int) -> dict[int, tuple[float, float, float]]:
    """Thread id -> (user, system, on-CPU) seconds of every thread of ``pid``: user and
    system in clock ticks (``stat``), on-CPU to the nanosecond (``schedstat``)."""
    out: dict[int, tuple[float, float, float]] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return out
    for tid in tids:
        try:
            fields = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
            ns = int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
        except FileNotFoundError:
            continue
        out[int(tid)] = (int(fields[11]) / TICK, int(fields[12]) / TICK, ns / 1e9)
    return out


def split(pids: list[int], before: dict[int, dict[int, tuple[float, float, float]]],
          after: dict[int, dict[int, tuple[float, float, float]]]) -> dict[str, float]:
    """CPU seconds between ``before`` and ``after``: main threads and the others, on CPU
    (``main``, ``other``), and user and system time (ticks: coarse)."""
    got = dict.fromkeys(("main", "other", "main_user", "main_sys", "other_user", "other_sys"), 0.0)
    for pid in pids:
        for tid, (u, s, cpu) in after[pid].items():
            u0, s0, cpu0 = before[pid].get(tid, (0.0, 0.0, 0.0))
            kind = "main" if tid == pid else "other"
            got[kind] += cpu - cpu0
            got[f"{kind}_user"] += u - u0
            got[f"{kind}_sys"] += s - s0
    return {k: round(v, 3) for k, v in got.items()}


def run(args: argparse.Namespace) -> dict[str, Any]:
    from mqctl import benchrun as br
    with br.Scratch(None) as scratch:
        st = scratch.open()
        st.create_topic("B", args.queues)
        ms = br.Members(scratch.root, "B", "G", False)
        perf = None
        try:
            for i in range(args.members):
                if i == 0 and args.cprofile:
                    ms.procs.append(subprocess.Popen(
                        [sys.executable, "-c", _PROFILED, str(Path(args.cprofile).resolve()),
                         "--store", str(scratch.root), "consume", "B", "-g", "G", "--from", "first",
                         "--rebalance-interval", "0.2"],
                        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL))
                else:
                    ms.start()
            ms.wait_split(args.queues, args.members)
            time.sleep(0.5)   # past the members' first commits and looks
            pids = [p.pid for p in ms.procs]
            if args.perf:
                perf = subprocess.Popen(["perf", "record", "-e", "cpu-clock", "-F", "2000", "-o", args.perf,
                                         "-p", ",".join(map(str, pids))],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                time.sleep(1.0)   # (perf attaches to every thread)
            if args.cprofile:
                ms.procs[0].send_signal(signal.SIGUSR1)
                time.sleep(0.1)
            before = {pid: thread_times(pid) for pid in pids}
            st.put_bodies("B", [b"x" * 100] * args.count)
            first, last = read_lines(ms.procs, args.count)
            time.sleep(0.3)   # their last commits
            after = {pid: thread_times(pid) for pid in pids}
            if perf is not None:
                perf.send_signal(signal.SIGINT)
                perf.wait()
            if args.cprofile:
                ms.procs[0].send_signal(signal.SIGUSR2)
                time.sleep(0.3)
        finally:
            if perf is not None and perf.poll() is None:
                perf.kill()
                perf.wait()
            ms.stop()
            st.close()
    cpu = split(pids, before, after)
    return {"members": args.members, "rate": round(args.count / max(last - first, 1e-9)),
            "cpu_us_per_msg": round((cpu["main"] + cpu["other"]) / args.count * 1e6, 2),
            "main_us_per_msg": round(cpu["main"] / args.count * 1e6, 2),
            "other_us_per_msg": round(cpu["other"] / args.count * 1e6, 2),
            "cpu_s": cpu, "load": " ".join(f"{x:.2f}" for x in os.getloadavg())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--members", type=int, default=16)
    ap.add_argument("--queues", type=int, default=16)
    ap.add_argument("--count", type=int, default=200_000)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--cprofile", help="profile the first member (main thread: thread CPU time) to this file")
    ap.add_argument("--perf", help="perf record every member to this file")
    args = ap.parse_args()
    sys.path.insert(0, str(HERE))
    for _ in range(args.reps):
        print(json.dumps(run(args)), flush=True)


if __name__ == "__main__":
    main()
