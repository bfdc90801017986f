"""The loops behind ``mqctl bench produce|consume`` (the command and its output are in
``mqctl/commands/bench.py``, which describes what each measures).

Every run uses a throwaway store in a temporary directory (:class:`Scratch`), removed
afterwards. Consumer members are real ``mqctl consume`` processes (:class:`Members`); the
benchmark reads their stdout (raw mode: each body and a newline) itself.
"""
from __future__ import annotations

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
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional

if TYPE_CHECKING:
    from store import LockRow, MemberRow, Store

MIB = 1024 * 1024
DEADLINE_S = 300.0



def ready_chunks(sel: Any, timeout: float) -> Iterator[tuple[int, bytes]]:
    """``(fd, data)`` for each registered pipe with data ready within ``timeout``; a pipe
    found closed is unregistered."""
    for key, _ev in sel.select(timeout=timeout):
        try:
            data = os.read(key.fd, 1 << 20)
        except BlockingIOError:
            continue
        if not data:
            sel.unregister(key.fd)
            continue
        yield key.fd, data

def _body(size: int) -> bytes:
    return (b"0123456789abcdef" * (size // 16 + 1))[:size]


def members(root: Path, group: str) -> list[MemberRow]:
    """The live members of ``group`` (none while no member has joined it yet)."""
    from store import Admin, Store
    from store.errors import GroupNotFoundError
    with Store.open(root, recover=False) as st:
        try:
            return Admin.of(st).consumers(group)
        except GroupNotFoundError:
            return []


def locks(root: Path, group: str) -> list[LockRow]:
    """The queue locks of ``group``, holders probed."""
    from store import Admin, Store
    from store.errors import GroupNotFoundError
    with Store.open(root, recover=False) as st:
        try:
            return Admin.of(st).locks(group)
        except GroupNotFoundError:
            return []


class Scratch:
    """A temporary directory holding one throwaway store, removed at exit."""

    def __init__(self, where: Optional[str]) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="mqctl-bench-", dir=where))
        self.root = self.dir / "store"

    def open(self) -> Store:
        from store import Store
        return Store.open(self.root, create=True)

    def __enter__(self) -> Scratch:
        return self

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


def produce_run(where: Optional[str], size: int, count: int, batch: int, sync: bool, queues: int) -> float:
    """Store ``count`` bodies of ``size`` bytes, ``batch`` per write; the seconds it took."""
    with Scratch(where) as scratch:
        st = scratch.open()
        st.create_topic("BENCH", queues)
        bodies = [_body(size)] * min(batch, count)
        left = count
        t0 = time.perf_counter()
        while left > 0:
            n = min(left, len(bodies))
            st.put_bodies("BENCH", bodies[:n], sync=sync)
            left -= n
        elapsed = time.perf_counter() - t0
        st.close()
    return elapsed


def peak_rss_mib() -> float:
    """This process's peak resident memory, MiB."""
    # ru_maxrss is KiB on Linux (bytes on macOS).
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (MIB if sys.platform == "darwin" else 1024)


class Members:
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
        held = {m.client_id: {q["queueId"] for q in m.queues if q.get("topic") == self.topic}
                for m in members(self.root, self.group)}
        pids = {p.pid for p in self.live()}
        if len(held) != len(pids) or not all(cid.rsplit("@", 1)[-1].isdigit()
                                             and int(cid.rsplit("@", 1)[-1]) in pids for cid in held):
            return None
        flat = [q for s in held.values() for q in s]
        if len(flat) != len(set(flat)) or set(flat) != set(range(queues)):
            return None
        if self.orderly:
            locked = {r.queue_id for r in locks(self.root, self.group)
                      if r.topic == self.topic and r.alive and r.pid in pids}
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


def peak_rss_of(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def one_rate_run(scratch: Scratch, run: int, members: int, count: int, size: int, queues: int,
                  orderly: bool) -> tuple[float, float]:
    """One throughput run: (msgs/s, max member peak RSS MiB)."""
    st = scratch.open()
    topic, group = f"BENCH{run}", f"BG{run}"
    st.create_topic(topic, queues)
    ms = Members(scratch.root, topic, group, orderly)
    try:
        for _ in range(members):
            ms.start()
        ms.wait_split(queues, members)
        st.put_bodies(topic, [_body(size)] * count)
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
            for _fd, data in ready_chunks(sel, 1.0):
                now = time.perf_counter()
                first = now if first is None else first
                last = now
                lines += data.count(b"\n")
        sel.close()
        rss = max((peak_rss_of(p.pid) or 0.0) for p in ms.procs)
    finally:
        ms.stop()
        st.close()
    assert first is not None and last is not None   # count >= 1 lines arrived
    return count / max(last - first, 1e-9), rss


def handover_runs(scratch: Scratch, members: int, queues: int, orderly: bool, runs: int,
                  say: Callable[[str], None]) -> list[float]:
    """Seconds the survivors take to hold every queue after one of ``members`` is killed with
    SIGKILL, ``runs`` times (``say`` reports each)."""
    st = scratch.open()
    st.create_topic("HANDOVER", queues)
    st.close()
    ms = Members(scratch.root, "HANDOVER", "HG", orderly)
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
            say(f"  hand-over {i + 1}/{runs}: {times[-1] * 1000:.0f} ms")
            ms.start()
    finally:
        ms.stop()
    return times


def rebalance_run(scratch: Scratch, count: int, size: int, queues: int, orderly: bool) -> dict[str, Any]:
    """Members join and leave (SIGTERM) while ``count`` messages are consumed: duplicates,
    hand-over pauses per queue, and the throughput of the run.

    Every body is ``q<queue>-<seq>`` padded to ``size``: a duplicate is a (queue, seq) seen
    twice; a hand-over pause is the time between the last line of a queue from its old owner
    and the first from its new one (the queues always have a backlog during the run)."""
    st = scratch.open()
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
    ms = Members(scratch.root, topic, group, orderly)
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
        return any(m.pid == p.pid for m in members(scratch.root, group))

    def read_ready(timeout: float) -> None:
        nonlocal dupes, unique
        for fd, data in ready_chunks(sel, timeout):
            now = time.perf_counter()
            pid = owners[fd].pid
            buf = partial[fd] + data
            cut = buf.rfind(b"\n") + 1
            partial[fd] = buf[cut:]
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
