"""``mqctl bench produce|consume``: the built-in benchmark.

Both run against a throwaway store created in a temporary directory (``--dir`` chooses where:
put it on the disk you care about; a tmpfs measures memory, not the disk) and removed
afterwards, so a benchmark never leaves data in a real store.

``bench produce`` stores ``--count`` bodies of ``--size`` bytes in-process through
``Store.put_bodies`` (the fast path ``mqctl send`` uses), ``--batch`` bodies per call, and
reports msgs/s, MiB/s and the peak RSS of the process.

``bench consume`` measures the consumer runtime across processes: for each member count in
``--members`` (e.g. ``1,2``) it starts that many ``mqctl consume`` processes of one group on a
``--queues``-queue topic, waits until they have split the queues, stores ``--count`` messages
in one batch, and reads the members' stdout (raw mode: each body and a newline) until every
message has arrived. The rate is messages over the time from the first to the last line
received, the median of ``--repeat`` runs; ratios are against the first member count.
``--handover`` measures instead how long the survivors take to hold every queue after a
member is killed with SIGKILL (for ``--orderly``: to hold every queue lock), median of
``--runs`` kills.
"""
from __future__ import annotations

import json as jsonlib
import os
import resource
import selectors
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

if TYPE_CHECKING:
    from store.log.broker import Store

bench_app = typer.Typer(help="Built-in benchmarks (on a throwaway store).", no_args_is_help=True)

MIB = 1024 * 1024
DEADLINE_S = 300.0


def register(app: typer.Typer) -> None:
    app.add_typer(bench_app, name="bench")


def _say(msg: str) -> None:
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()


def _emit(json: bool, row: dict[str, Any], text: str) -> None:
    if json:
        sys.stdout.write(jsonlib.dumps(row, separators=(",", ":")) + "\n")
    else:
        sys.stdout.write(text + "\n")
    sys.stdout.flush()


class _Scratch:
    """A temporary directory holding one throwaway store, removed at exit."""

    def __init__(self, where: Optional[str]) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="mqctl-bench-", dir=where))
        self.root = self.dir / "store"

    def open(self) -> Store:
        from store.log.broker import Store
        return Store.open(self.root, create=True)

    def __enter__(self) -> "_Scratch":
        return self

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


def _peak_rss_mib() -> float:
    # ru_maxrss is KiB on Linux (bytes on macOS).
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (MIB if sys.platform == "darwin" else 1024)


# -- produce ---------------------------------------------------------------------------------

@bench_app.command("produce")
def produce(
    size: Annotated[int, typer.Option("--size", "-s", min=1, help="Body size in bytes.")] = 100,
    count: Annotated[int, typer.Option("--count", "-n", min=1, help="Messages to store.")] = 200_000,
    batch: Annotated[int, typer.Option("--batch", "-b", min=1, help="Bodies per store write.")] = 1000,
    flush: Annotated[str, typer.Option("--flush", help="async (page cache) or sync (fsync every batch).")] = "async",
    queues: Annotated[int, typer.Option("--queues", min=1, max=1024, help="Queues of the topic.")] = 8,
    dir_: Annotated[Optional[str], typer.Option("--dir", help="Where to create the throwaway store (default: the temp dir).")] = None,
    json: Annotated[bool, typer.Option("--json", "-j", help="One JSON object on stdout.")] = False,
) -> None:
    """Store messages in-process through the producer's fast path; msgs/s, MiB/s, peak RSS."""
    from store.errors import UsageError
    if flush not in ("async", "sync"):
        raise UsageError(f"--flush must be async or sync, not {flush!r}")
    with _Scratch(dir_) as scratch:
        st = scratch.open()
        st.create_topic("BENCH", queues)
        body = (b"0123456789abcdef" * (size // 16 + 1))[:size]
        bodies = [body] * min(batch, count)
        left = count
        t0 = time.perf_counter()
        while left > 0:
            n = min(left, len(bodies))
            st.put_bodies("BENCH", bodies[:n], sync=flush == "sync")
            left -= n
        elapsed = time.perf_counter() - t0
        st.close()
    rate = count / elapsed
    mib = count * size / MIB / elapsed
    row = {"bench": "produce", "size": size, "count": count, "batch": batch, "flush": flush,
           "seconds": round(elapsed, 3), "msgsPerSec": round(rate), "mibPerSec": round(mib, 1),
           "peakRssMiB": round(_peak_rss_mib(), 1)}
    _emit(json, row, f"produce: {count} x {size} B, batch {batch}, flush {flush}: {rate:,.0f} msgs/s, "
                     f"{mib:.1f} MiB/s, {elapsed:.2f} s, peak RSS {row['peakRssMiB']} MiB")


# -- consume ---------------------------------------------------------------------------------

class _Members:
    """``mqctl consume`` member processes of one group on a scratch store."""

    def __init__(self, root: Path, topic: str, group: str, orderly: bool) -> None:
        self.root, self.topic, self.group, self.orderly = root, topic, group, orderly
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self) -> subprocess.Popen[bytes]:
        args = [sys.executable, "-m", "mqctl", "--store", str(self.root), "consume", self.topic,
                "-g", self.group, "--from", "first", "--rebalance-interval", "0.2"]
        if self.orderly:
            args.append("--orderly")
        p = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL)
        self.procs.append(p)
        return p

    def live(self) -> list[subprocess.Popen[bytes]]:
        return [p for p in self.procs if p.poll() is None]

    def split(self, queues: int) -> dict[str, set[int]] | None:
        """clientId -> queues, when the live members hold every queue exactly once."""
        from store.client.members import live_members
        from store.client.qlocks import list_locks
        from store.log.broker import Store
        with Store.open(self.root, recover=False) as st:
            layout = st.layout
        held = {m.clientId: {q["queueId"] for q in m.queues if q.get("topic") == self.topic}
                for m in live_members(layout, self.group)}
        pids = {p.pid for p in self.live()}
        if len(held) != len(pids) or not all(cid.rsplit("@", 1)[-1].isdigit()
                                             and int(cid.rsplit("@", 1)[-1]) in pids for cid in held):
            return None
        flat = [q for s in held.values() for q in s]
        if len(flat) != len(set(flat)) or set(flat) != set(range(queues)):
            return None
        if self.orderly:
            locked = {i.queueId for i in list_locks(layout, self.group)
                      if i.topic == self.topic and i.alive and i.pid in pids}
            if locked != set(range(queues)):
                return None
        return held

    def wait_split(self, queues: int, want_members: int, timeout: float = 60.0,
                   poll: float = 0.005) -> dict[str, set[int]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = self.split(queues)
            if got is not None and (len(got) == want_members or want_members > queues):
                return got
            time.sleep(poll)
        raise RuntimeError(f"members did not split {queues} queues within {timeout:g} s")

    def stop(self) -> None:
        for p in self.live():
            p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            if p.stdout is not None:
                p.stdout.close()


def _peak_rss_of(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def _one_rate_run(scratch: _Scratch, run: int, members: int, count: int, size: int, queues: int,
                  orderly: bool) -> tuple[float, float]:
    """One throughput run: (msgs/s, max member peak RSS MiB)."""
    st = scratch.open()
    topic, group = f"BENCH{run}", f"BG{run}"
    st.create_topic(topic, queues)
    ms = _Members(scratch.root, topic, group, orderly)
    try:
        for _ in range(members):
            ms.start()
        ms.wait_split(queues, members)
        body = (b"0123456789abcdef" * (size // 16 + 1))[:size]
        st.put_bodies(topic, [body] * count)
        sel = selectors.DefaultSelector()
        for p in ms.procs:
            assert p.stdout is not None   # started with stdout=PIPE
            os.set_blocking(p.stdout.fileno(), False)
            sel.register(p.stdout.fileno(), selectors.EVENT_READ)
        lines = 0
        first: float | None = None
        last: float | None = None
        deadline = time.monotonic() + DEADLINE_S
        while lines < count:
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {lines} of {count} messages arrived within {DEADLINE_S:g} s")
            for key, _ev in sel.select(timeout=1.0):
                try:
                    data = os.read(key.fd, 1 << 20)
                except BlockingIOError:
                    continue
                if not data:
                    sel.unregister(key.fd)
                    continue
                now = time.perf_counter()
                first = now if first is None else first
                last = now
                lines += data.count(b"\n")
        sel.close()
        rss = max((_peak_rss_of(p.pid) or 0.0) for p in ms.procs)
    finally:
        ms.stop()
        st.close()
    assert first is not None and last is not None   # count >= 1 lines arrived
    return count / max(last - first, 1e-9), rss


def _handover_runs(scratch: _Scratch, members: int, queues: int, orderly: bool, runs: int) -> list[float]:
    st = scratch.open()
    st.create_topic("HANDOVER", queues)
    st.close()
    ms = _Members(scratch.root, "HANDOVER", "HG", orderly)
    times = []
    try:
        for _ in range(members):
            ms.start()
        for i in range(runs):
            ms.wait_split(queues, members)
            victim = ms.live()[0]
            victim.kill()
            t0 = time.perf_counter()
            victim.wait()
            ms.wait_split(queues, members - 1)
            times.append(time.perf_counter() - t0)
            _say(f"  hand-over {i + 1}/{runs}: {times[-1] * 1000:.0f} ms")
            ms.start()
    finally:
        ms.stop()
    return times


def _rebalance_run(scratch: _Scratch, count: int, size: int, queues: int, orderly: bool) -> dict[str, Any]:
    """Members join and leave (SIGTERM) while ``count`` messages are consumed: duplicates,
    hand-over pauses per queue, and the throughput of the run.

    Every body is ``q<queue>-<seq>`` padded to ``size``: a duplicate is a (queue, seq) seen
    twice; a hand-over pause is the time between the last line of a queue from its old owner
    and the first from its new one (the queues always have a backlog during the run)."""
    from store.client.members import live_members
    st = scratch.open()
    layout = st.layout
    topic, group = "REBAL", "RG"
    st.create_topic(topic, queues)
    per = -(-count // queues)
    for q in range(queues):
        n = min(per, count - q * per)
        if n <= 0:
            break
        for lo in range(0, n, 100_000):
            st.put_bodies(topic, [(b"q%03d-%09d" % (q, i)).ljust(size, b".") for i in range(lo, min(n, lo + 100_000))],
                          queue_id=q)
    st.close()
    total = sum(max(0, min(per, count - q * per)) for q in range(queues))
    seen = bytearray(queues * per)
    ms = _Members(scratch.root, topic, group, orderly)
    sel = selectors.DefaultSelector()
    owners: dict[int, subprocess.Popen[bytes]] = {}
    partial: dict[int, bytes] = {}
    last_time: dict[int, float] = {}
    last_pid: dict[int, int] = {}
    pauses: list[float] = []
    dupes = unique = 0
    events = [(0.10, "join"), (0.20, "join"), (0.35, "leave"), (0.50, "join"), (0.65, "leave"),
              (0.80, "join")]
    log: list[str] = []

    def add(p: subprocess.Popen[bytes]) -> None:
        assert p.stdout is not None   # started with stdout=PIPE
        os.set_blocking(p.stdout.fileno(), False)
        sel.register(p.stdout.fileno(), selectors.EVENT_READ)
        owners[p.stdout.fileno()] = p
        partial[p.stdout.fileno()] = b""

    def joined(p: subprocess.Popen[bytes]) -> bool:
        return any(m.pid == p.pid for m in live_members(layout, group))

    def read_ready(timeout: float) -> None:
        nonlocal dupes, unique
        for key, _ev in sel.select(timeout=timeout):
            try:
                data = os.read(key.fd, 1 << 20)
            except BlockingIOError:
                continue
            if not data:
                sel.unregister(key.fd)
                continue
            now = time.perf_counter()
            pid = owners[key.fd].pid
            buf = partial[key.fd] + data
            cut = buf.rfind(b"\n") + 1
            partial[key.fd] = buf[cut:]
            for line in buf[:cut].splitlines():
                q, i = int(line[1:4]), int(line[5:14])
                k = q * per + i
                if seen[k]:
                    dupes += 1
                else:
                    seen[k] = 1
                    unique += 1
                if q in last_pid and last_pid[q] != pid:
                    pauses.append(now - last_time[q])
                last_pid[q], last_time[q] = pid, now

    first = None
    waiting_for: subprocess.Popen[bytes] | None = None
    try:
        add(ms.start())
        deadline = time.monotonic() + DEADLINE_S
        while unique < total:
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {unique} of {total} messages arrived within {DEADLINE_S:g} s")
            read_ready(0.05)
            if first is None and unique:
                first = time.perf_counter()
            if waiting_for is not None and (waiting_for.poll() is not None or joined(waiting_for)):
                waiting_for = None
            while events and waiting_for is None and unique >= events[0][0] * total:
                _frac, what = events.pop(0)
                if what == "join":
                    waiting_for = ms.start()
                    add(waiting_for)
                else:
                    victim = ms.live()[0]
                    victim.send_signal(signal.SIGTERM)
                log.append(f"{what} at {unique / total:.0%}")
        end = time.perf_counter()
        for p in ms.live():
            p.send_signal(signal.SIGTERM)
        stop_by = time.monotonic() + 30
        while sel.get_map() and time.monotonic() < stop_by:
            read_ready(0.2)   # late output: a duplicate would show up here
    finally:
        sel.close()
        ms.stop()
    pauses.sort()
    return {"duplicates": dupes, "unique": unique, "seconds": end - (first or end),
            "msgsPerSec": unique / max(end - (first or end), 1e-9), "handovers": len(pauses),
            "pauseMedianMs": round(statistics.median(pauses) * 1000, 1) if pauses else None,
            "pauseMaxMs": round(pauses[-1] * 1000, 1) if pauses else None, "events": log}


@bench_app.command("consume")
def consume(
    orderly: Annotated[bool, typer.Option("--orderly", help="Orderly members (queue locks).")] = False,
    members: Annotated[str, typer.Option("--members", "-m", help="Member counts to compare, e.g. 1,2.")] = "1",
    count: Annotated[int, typer.Option("--count", "-n", min=1, help="Messages per run.")] = 200_000,
    size: Annotated[int, typer.Option("--size", "-s", min=1, help="Body size in bytes.")] = 100,
    queues: Annotated[int, typer.Option("--queues", min=1, max=1024, help="Queues of the topic.")] = 8,
    repeat: Annotated[int, typer.Option("--repeat", "-r", min=1, help="Runs per member count (median).")] = 3,
    handover: Annotated[bool, typer.Option("--handover", help="Measure hand-over after kill -9 instead of throughput.")] = False,
    rebalance: Annotated[bool, typer.Option("--rebalance", help="Scenario: members join and leave (SIGTERM) during --count messages; duplicates (must be 0), hand-over pause per queue, throughput against 3 steady members.")] = False,
    runs: Annotated[int, typer.Option("--runs", min=1, help="Kills for --handover (median).")] = 10,
    dir_: Annotated[Optional[str], typer.Option("--dir", help="Where to create the throwaway store (default: the temp dir).")] = None,
    json: Annotated[bool, typer.Option("--json", "-j", help="One JSON object per result on stdout.")] = False,
) -> None:
    """Consume rate of N member processes (stdout mode, read by the benchmark), or the
    hand-over time after a member is killed with SIGKILL (--handover)."""
    from store.errors import UsageError
    try:
        counts = [int(x) for x in members.split(",") if x.strip()]
    except ValueError as exc:
        raise UsageError(f"--members {members!r}: expected counts like 1,2") from exc
    if not counts or min(counts) < 1:
        raise UsageError("--members needs counts of at least 1")
    mode = "orderly" if orderly else "concurrent"
    with _Scratch(dir_) as scratch:
        if rebalance:
            _say(f"rebalance: {count} x {size} B, {queues} queues, {mode}: 3 steady members first")
            steady, _rss = _one_rate_run(scratch, 0, 3, count, size, queues, orderly)
            _say(f"  steady, 3 members: {steady:,.0f} msgs/s; now with members joining and leaving")
            r = _rebalance_run(scratch, count, size, queues, orderly)
            row = {"bench": "consume-rebalance", "mode": mode, "queues": queues, "size": size,
                   "count": count, "duplicates": r["duplicates"], "handovers": r["handovers"],
                   "pauseMedianMs": r["pauseMedianMs"], "pauseMaxMs": r["pauseMaxMs"],
                   "msgsPerSec": round(r["msgsPerSec"]), "steadyMsgsPerSec": round(steady),
                   "ratio": round(r["msgsPerSec"] / steady, 2), "events": r["events"]}
            _emit(json, row, f"rebalance ({mode}, {queues} queues, {count} x {size} B; "
                             f"{', '.join(r['events'])}): {r['duplicates']} duplicates, "
                             f"{r['handovers']} queue hand-overs, pause median {r['pauseMedianMs']} ms, "
                             f"max {r['pauseMaxMs']} ms; {r['msgsPerSec']:,.0f} msgs/s = "
                             f"x{r['msgsPerSec'] / steady:.2f} of steady state ({steady:,.0f} msgs/s)")
            if r["duplicates"]:
                raise typer.Exit(1)
            return
        if handover:
            n = max(max(counts), 2)
            _say(f"hand-over: {n} {mode} members, {queues} queues, {runs} kills")
            times = _handover_runs(scratch, n, queues, orderly, runs)
            med = statistics.median(times)
            row = {"bench": "consume-handover", "mode": mode, "members": n, "queues": queues,
                   "runs": runs, "medianMs": round(med * 1000, 1), "minMs": round(min(times) * 1000, 1),
                   "maxMs": round(max(times) * 1000, 1)}
            _emit(json, row, f"hand-over after kill -9 ({mode}, {n} members, {queues} queues): median "
                             f"{med * 1000:.0f} ms (min {min(times) * 1000:.0f}, max {max(times) * 1000:.0f}, "
                             f"{runs} runs)")
            return
        base = None
        run = 0
        for n in counts:
            rates, rss = [], 0.0
            for k in range(repeat):
                run += 1
                rate, peak = _one_rate_run(scratch, run, n, count, size, queues, orderly)
                rates.append(rate)
                rss = max(rss, peak)
                _say(f"  {mode}, {n} member(s), run {k + 1}/{repeat}: {rate:,.0f} msgs/s")
            med = statistics.median(rates)
            base = med if base is None else base
            row = {"bench": "consume", "mode": mode, "members": n, "queues": queues, "size": size,
                   "count": count, "runs": repeat, "msgsPerSec": round(med),
                   "mibPerSec": round(med * size / MIB, 1), "ratio": round(med / base, 2),
                   "memberPeakRssMiB": round(rss, 1)}
            _emit(json, row, f"consume ({mode}, {n} member(s), {queues} queues, {size} B): median "
                             f"{med:,.0f} msgs/s, {med * size / MIB:.1f} MiB/s, x{med / base:.2f} vs "
                             f"{counts[0]} member(s); member peak RSS {rss:.0f} MiB")
