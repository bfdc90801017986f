#!/usr/bin/env python3
"""Produce/consume benchmark: ``mqctl`` against its peers, on this machine, in one run.

Not a test (no ``test_`` prefix: pytest does not collect it). Run from the repository::

    .venv/bin/python tests/bench/bench_produce.py            # about 10-20 minutes
    .venv/bin/python tests/bench/bench_produce.py --quick    # a smoke run of the script itself

What is measured, each variant ``--reps`` times in rep-major order (every variant once, then
again), reported as the median with min-max; ratios are taken per repetition (both sides from
the same repetition), then their median:

* ``cat FILE | mqctl send T``: input through a pipe, as a user's pipeline feeds it, at four
  message sizes: 100 B, 1 KiB, 4 KiB and 64 KiB (``--sizes``), ``--flush async``. The whole
  pipeline is timed, interpreter start-up (~0.1-0.2 s) included; the peers' start-up is not.
  The store and its topic are created first, untimed (``mqctl topic create``, ~15 fsyncs), as
  Redis's server runs before its client is timed; so for ``Producer.send_many``.
* ``mqctl consume T -g bench --from first -e > /dev/null`` on each of those stores, offsets
  committed; beside it the floor of a consume in Python (``consume_floor.py``: start-up,
  one read of the log per 8 MiB, every record's CRC, the bodies written out, one offset file
  persisted) on the same store, and the floor of a consume in C (``consume_floor.c``,
  compiled here: the topic's consume-queue entries read 1,000 at a time, each record they
  point at checked as mqctl checks it, CRC included, bodies written with ``writev``, the
  queues' offsets persisted), both timed as whole processes: what bounds any consumer of
  these bytes, and the part of the Python floor's cost that is the interpreter's. Redis's
  consumer is a program of its own (:data:`_REDIS_CONSUMER`: redis-py and nothing else
  imported) that writes every body and a newline to the same sink, stdout on /dev/null; it is
  reported timed from its first command (the group's creation, which opens the connection) to
  its last XACK, and as a whole process (``_consume_process``), as mqctl's is timed.
* ``--flush sync --batch-size 100`` (one fsync per 100 messages, group commit) at 100 B and
  4 KiB, from a pipe as well.
* Redis Streams: Debian's ``redis-server``, started here on 127.0.0.1 with a temporary
  directory, AOF ``appendfsync everysec`` at every size (XADD pipelined 1000 at a time,
  redis-py + hiredis; then XREADGROUP COUNT 1000 + XACK, the bodies written to /dev/null) and
  ``appendfsync always`` with pipelines of 100 at 100 B and 4 KiB.
* persist-queue's SQLiteQueue (``--npq``, 0 = skipped): ``auto_commit=False`` with
  ``task_done()`` every 100.
* Page-cache write bandwidth: ``os.write`` of 1 MiB blocks to a new file (dd-like), as many
  bytes as mqctl's 4 KiB and 64 KiB runs write, the median of three; each starts after a
  ``sync`` (no dirty pages), as does each mqctl produce run. And the floor of any pipeline
  fed by ``cat``: ``cat FILE`` into a reader that only reads the pipe (1 MiB pipe buffer,
  4 MiB reads), same bytes: what ``mqctl send`` could reach if framing, CRC and the write
  cost nothing.
* The C floor at 4 KiB and 64 KiB: ``cat FILE | pipe_floor OUT``, where ``pipe_floor`` is
  ``tests/bench/pipe_floor.c`` compiled here with ``cc -O2`` into the scratch directory (with
  libdeflate's CRC-32, as fast as mqctl's ISA-L one, when the machine has it; else zlib's):
  it reads the same pipe, cuts lines, frames each as a record (a header of mqctl's size, the
  CRC-32 of the body) and writes them in big appends. ``mqctl send`` against it at 64 KiB
  twice: with the size's ``--mb`` input (100 MB in ``bench_all.py``: 1,525 lines, where the
  process's start, ~40 ms, is a large part of the ~0.1 s) and with ``--pipe-mb`` (1 GB by
  default, 15,258 lines: the steady state's throughput, which the target >= 0.8 is judged
  on; 0 skips it).
* The Python floor at 4 KiB and 64 KiB: ``cat FILE | python -c <the same as pipe_floor.c>``
  (:data:`_PY_FLOOR`: big ``readinto`` a reused buffer, ``bytes.find`` for the newlines, ISA-L's
  or zlib's CRC-32 over memoryview slices, a header packed per record, one ``pwritev`` of
  headers and bodies per read): what any Python program pays for the same pipe and bytes,
  the part of the C floor's lead that is the interpreter's.
* ``--baseline DIR``: the same ``mqctl`` and API runs with another checkout (its ``.venv``),
  in every repetition next to this one's (variants ``base_…``), so a change is measured
  against the code before it under the same load.
* The Python API (``--api``, on by default), in a process of the project's venv:
  ``Producer.send_many`` in batches of 1,000 and the ``Consumer.messages`` iterator
  (offsets committed) at every size, timed from the producer's or consumer's open, the
  library loaded before the timer on both sides: ``from store import Consumer, Producer``
  (which loads the store, and for ``Producer`` its write path, as a program's imports at
  its top would) as the Redis worker imports redis-py first; ``Producer(flush="sync")
  .send_many`` in batches of 100 against Redis ``appendfsync always`` pipelines of 100;
  ``--nsingle`` single ``Producer(flush="sync").send`` calls against SQLite in WAL mode with
  ``synchronous=FULL`` (one INSERT and COMMIT each) and Redis ``appendfsync always`` without
  pipelining; these durable runs are timed from the open store (the peers' setup is not
  timed either), and with ``--baseline`` the single sends run with both checkouts. Each
  single-send run is followed by five times as many single ``flush="async"`` sends (the send
  without its fdatasync); both report the CPU a send took (``process_time``, µs).
* ``--durable-only``: only those durable runs (``--flush sync`` batches of 100, CLI and
  API, single sync sends, SQLite, Redis ``appendfsync always``) and the file system's own
  cost of a durable write, ``tests/bench/fsync_floor.c`` (compiled here): pwrite + fdatasync
  of a single send's record (254 B) and of a batch of 100 (25,400 B), appended as the commit
  log grows, and overwriting a file written and synced first, e.g.
  ``--durable-only --sizes 100 --reps 5 --nsingle 2000 --baseline /work/main``.
* ``--rounds`` (20 a repetition; 0: none): the durable comparisons again, interleaved in small
  rounds, because the whole runs above take seconds each and this disk's fsync latency swings
  10x within a run (SQLite's rate spanned 275-3,611 commits/s in one): single sync sends of
  each checkout and SQLite's commits, ``--round-size`` (100) each, then ``send_many`` of 100
  and Redis ``appendfsync always`` pipelines of 100, ``--round-batches`` (10) each, one side
  after the other, the order reversed every other round. Each side is one process kept open
  through the rounds (:func:`round_worker`), and beside them their floor, ``fsync_floor.c``
  appending a single send's record (254 B) or a batch's (25,400 B) as many times, and
  overwriting as many in a file written and synced first (what a durable write costs when the
  file's size does not change: no journal commit, as SQLite's WAL once it wraps). The ratios
  are taken round by round and their median reported (``..._rounds`` in ``ratios``), with
  each side's rate and CPU a message (the medians of its rounds; Redis's CPU is its client's)
  in ``rounds``. SQLite checkpoints its WAL every 1,000 commits and then writes it again from
  its start: the single sends' ratio is also given for the rounds in which its WAL grew
  (appends, as mqctl's log always makes) and those in which it did not
  (``..._vs_sqlite_wal_appending_rounds``, ``..._wal_overwriting_rounds``). The A/A check
  (``--baseline`` the same code): ``..._vs_base_rounds`` 1.00 for both, where the whole runs'
  ``api_sync_single_100_vs_base`` gave 0.55 beside 2 hogs.
* ``--hogs N``: N CPU hogs (``yes > /dev/null``) run through every repetition, beside mqctl
  and the peers alike (``tests/bench/hogs.py``).
* Every timed write (``mqctl send``, ``Producer.send_many``, the floors, Redis's ``XADD``)
  starts with as many recently freed pages as it will write (:func:`recycle_pages`). On a
  virtual machine whose balloon reports free pages to the host (``virtio_balloon`` with
  free page reporting, as here), memory freed more than ~2 s ago, or never touched, is
  backed by the host again on first use: a write into the page cache then runs ~5x slower
  (100 MB: ~140 ms against ~23 ms measured here). Whichever writer happened to find freshly
  freed pages (after a ``rm`` of the last store, or a floor's ``unlink``) used to win by that
  much: the 0.4-3.0x swings of one size in one run.
* Peak RSS of ``mqctl send`` for 10 million messages from stdin (``/usr/bin/time``).

Targets: produce >= 2x Redis pipelined XADD at every size, CLI and API, on
a busy machine too; at 64 KiB >= 0.8 of the C floor; consume >= 2x Redis XREADGROUP + XACK at
every size; ``--flush sync`` batches of 100 (CLI and API) >= 1.5x Redis ``appendfsync always``
at 100 B and 4 KiB; single sync sends >= SQLite WAL ``synchronous=FULL``; peak RSS for 10 M
messages < 200 MB. ``tests/bench/bench_all.py`` runs this with and without hogs.

The peers run in a separate virtualenv (``.bench-venv``, created on first use): with redis-py
installed, portalocker imports it, which would slow ``mqctl``'s own start-up. ``redis-server``
is installed with apt-get when missing.

Results go to ``bench-results/produce-<UTC time>.json`` (git-ignored) and a table on stdout.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from floors import compile_floor
from hogs import cpu_hogs, loadavg

REPO = Path(__file__).resolve().parents[2]
MQCTL = REPO / ".venv" / "bin" / "mqctl"
BENCH_VENV = REPO / ".bench-venv"
RESULTS = REPO / "bench-results"
PEER_PACKAGES = ["redis", "hiredis", "persist-queue"]


# ==============================================================================================
# Peer worker: runs inside .bench-venv (imports redis / persistqueue, never mqctl or store)
# ==============================================================================================

def recycle_pages(directory: str | Path, total: int) -> None:
    """Write ``total`` bytes to a scratch file in ``directory`` and delete it: the pages it took
    are free again, and warm, when the timed write that follows takes them (see the module's
    docstring: free pages reported to the host cost ~5x on their next use). Untimed."""
    path = Path(directory) / "recycle.tmp"
    block = b"\0" * (1 << 20)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        written = 0
        while written < total:
            written += os.write(fd, block)
    finally:
        os.close(fd)
        path.unlink()


def body_of(i: int, size: int) -> bytes:
    head = b"%010d" % i
    return head + b"x" * (size - len(head))


def peer_worker(spec: dict) -> dict:
    kind, phase, n, size = spec["kind"], spec["phase"], spec["n"], spec["size"]
    if kind == "redis":
        import redis
        r = redis.Redis(host="127.0.0.1", port=spec["port"])
        pipe_n = spec["pipeline"]
        if phase == "produce":
            recycle_pages(spec["scratch"], n * (size + 256))
            t = time.perf_counter()
            p = r.pipeline(transaction=False)
            for i in range(n):
                p.xadd("s", {"b": body_of(i, size)})
                if (i + 1) % pipe_n == 0:
                    p.execute()
            p.execute()
            dt = time.perf_counter() - t
            return {"seconds": dt, "count": r.xlen("s")}
        raise SystemExit("Redis's consume runs as a program of its own: _REDIS_CONSUMER")
    if kind == "pq_sqlite":
        import persistqueue
        path = spec["path"]
        every = spec.get("commit_every", 100)
        if phase == "produce":
            q = persistqueue.SQLiteQueue(path, auto_commit=False, multithreading=False)
            t = time.perf_counter()
            for i in range(n):
                q.put(body_of(i, size))
                if (i + 1) % every == 0:
                    q.task_done()
            q.task_done()
            dt = time.perf_counter() - t
            return {"seconds": dt, "count": n}
        q = persistqueue.SQLiteQueue(path, auto_commit=False, multithreading=False)
        t = time.perf_counter()
        got = 0
        while True:
            try:
                q.get(block=False)
            except persistqueue.Empty:
                break
            got += 1
            if got % every == 0:
                q.task_done()
        q.task_done()
        dt = time.perf_counter() - t
        return {"seconds": dt, "count": got}
    if kind == "sqlite_full":
        # SQLite in WAL mode with synchronous=FULL: one INSERT and one COMMIT (an fsync of
        # the WAL) per message, as a single durable send is
        import sqlite3
        db = sqlite3.connect(spec["path"], isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.execute("CREATE TABLE q (id INTEGER PRIMARY KEY, body BLOB)")
        t = time.perf_counter()
        for i in range(n):
            db.execute("BEGIN")
            db.execute("INSERT INTO q (body) VALUES (?)", (body_of(i, size),))
            db.execute("COMMIT")
        dt = time.perf_counter() - t
        got = db.execute("SELECT count(*) FROM q").fetchone()[0]
        db.close()
        return {"seconds": dt, "count": got}
    raise SystemExit(f"unknown peer kind {kind!r}")


# ==============================================================================================
# Python API worker: runs in the project's venv (imports store, never redis)
# ==============================================================================================

def api_worker(spec: dict) -> dict:
    """``store.Producer`` / ``store.Consumer`` in-process, timed from the first call. The
    library is loaded before the timer, as :func:`peer_worker` loads redis-py before its
    own: ``from store import Consumer, Producer``, as a program's imports would load it,
    which loads the store and (for ``Producer``) its write path; the first open then pays
    for opening the store only."""
    from store import Consumer, Producer
    phase, n, size, root = spec["phase"], spec["n"], spec["size"], spec["path"]
    if phase == "consume":
        t = time.perf_counter()
        got = 0
        with Consumer("T", group="api", path=root, start_from="first") as c:
            for _m in c.messages(exit_at_end=True):
                got += 1
        return {"seconds": time.perf_counter() - t, "count": got}
    bodies = [body_of(i, size) for i in range(n)]
    batch = {"produce": 1000, "sync_many100": 100, "sync_single": 1, "async_single": 1}[phase]
    flush = "async" if phase in ("produce", "async_single") else "sync"
    if phase == "produce":
        recycle_pages(Path(root).parent, n * (size + 256))
    import resource
    ru, waited = resource.getrusage(resource.RUSAGE_SELF), runq_wait_s()
    t, cpu_timed = time.perf_counter(), time.process_time()
    with Producer(root, flush=flush) as p:
        if flush == "sync" or batch == 1:
            # the durable runs are timed from the open store (~15 fsyncs to create it), as
            # SQLite's from its created table and Redis's from its running server
            if batch == 1:
                p.send("T", b"first")   # (and its topic: single sends are timed without it)
            t, cpu_timed = time.perf_counter(), time.process_time()
        cpu = time.process_time()
        if batch == 1:
            for b in bodies:
                p.send("T", b)
        else:
            for i in range(0, n, batch):
                p.send_many("T", bodies[i:i + batch])
        cpu = time.process_time() - cpu
    # cpu_seconds: the sends alone; cpu_timed_seconds: all the timed part (the producer's
    # open and close too, and its background flush's thread)
    seconds, ru_end = time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF)
    # where a run's wall time went beside its CPU: waiting for a CPU (runq_seconds: a busy
    # machine's), and the kernel's share of the CPU (sys_seconds: at 64 KiB, copying into the
    # page cache; measured 25-235 ms per 100 MB for the same code, run to run)
    return {"seconds": seconds, "count": n, "cpu_seconds": cpu,
            "cpu_timed_seconds": time.process_time() - cpu_timed, "sys_seconds": ru_end.ru_stime - ru.ru_stime,
            "runq_seconds": runq_wait_s() - waited}


def runq_wait_s() -> float:
    """Seconds this thread has waited, runnable, for a CPU (``/proc/thread-self/schedstat``'s
    run delay; 0 where the kernel does not keep it)."""
    try:
        with open("/proc/thread-self/schedstat") as fh:
            return int(fh.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


# ==============================================================================================
# Round workers: one durable writer kept open, told how much to write per round (interleaving)
# ==============================================================================================

def round_worker(spec: dict) -> None:
    """A durable writer that stays open between rounds, so that two sides can alternate in
    small rounds (:func:`interleaved_rounds`): it sets up (store and topic, SQLite table, Redis
    connection; untimed), prints ``ready``, then for each line ``N`` read from stdin writes N
    units (a single send or commit, or a batch of ``batch`` messages) and prints one JSON line
    ``{"seconds", "cpu_seconds"}``; it ends at EOF. The kinds run in the venv of their side:
    ``api`` imports ``store`` only, ``sqlite_full`` and ``redis`` never do."""
    kind, size, batch = spec["kind"], spec["size"], spec.get("batch", 1)
    sent = 0

    def bodies(k: int) -> list[bytes]:
        return [body_of(sent + i, size) for i in range(k)]

    if kind == "api":
        from store import Producer
        producer = Producer(spec["path"], flush="sync")
        producer.send("T", b"first")   # (the store and its topic, untimed)

        def unit_many(k: int) -> None:
            b = bodies(k * batch)
            for i in range(0, len(b), batch):
                producer.send_many("T", b[i:i + batch])

        def unit_single(k: int) -> None:
            for b in bodies(k):
                producer.send("T", b)
        write = unit_single if batch == 1 else unit_many
        close = producer.close
    elif kind == "sqlite_full":
        import sqlite3
        db = sqlite3.connect(spec["path"], isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.execute("CREATE TABLE q (id INTEGER PRIMARY KEY, body BLOB)")

        def write(k: int) -> None:
            for b in bodies(k):
                db.execute("BEGIN")
                db.execute("INSERT INTO q (body) VALUES (?)", (b,))
                db.execute("COMMIT")

        def wal_size() -> int:
            try:
                return os.stat(spec["path"] + "-wal").st_size
            except FileNotFoundError:
                return 0
        close = db.close
    elif kind == "redis":
        import redis
        r = redis.Redis(host="127.0.0.1", port=spec["port"])
        r.ping()

        def write(k: int) -> None:
            if batch == 1:
                for b in bodies(k):
                    r.xadd("s", {"b": b})
                return
            b = bodies(k * batch)
            for i in range(0, len(b), batch):
                pipe = r.pipeline(transaction=False)
                for body in b[i:i + batch]:
                    pipe.xadd("s", {"b": body})
                pipe.execute()
        close = r.close
    else:
        raise SystemExit(f"unknown round worker kind {kind!r}")
    print("ready", flush=True)
    for line in sys.stdin:
        k = int(line)
        wal = wal_size() if kind == "sqlite_full" else 0
        t, cpu = time.perf_counter(), time.process_time()
        write(k)
        dt, cpu = time.perf_counter() - t, time.process_time() - cpu
        sent += k * batch
        out = {"seconds": dt, "cpu_seconds": cpu}
        if kind == "sqlite_full":
            # whether the WAL grew: once a checkpoint has let SQLite start it again from its
            # beginning, a commit overwrites blocks (no journal commit for its fdatasync)
            out["wal_grew"] = wal_size() > wal
        print(json.dumps(out), flush=True)
    close()


class RoundSide:
    """One side of :func:`interleaved_rounds`: a :func:`round_worker` process of ``python``."""

    def __init__(self, name: str, python: Path, spec: dict, env: dict[str, str] | None = None) -> None:
        self.start(name, [str(python), __file__, "--round-worker", json.dumps(spec)], env)

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None, cwd: str | None = None) -> None:
        """Run ``argv``, a worker of the same protocol (``ready``; then a line of units in, a
        JSON line out, a round), and wait for it to be ready."""
        self.name = name
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=cwd)
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "ready":
            self.close()
            raise SystemExit(f"round worker {name} ({argv[1:]}) did not start")

    def round(self, units: int) -> dict:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{units}\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"round worker {self.name} ended ({self.proc.wait()})")
        return dict(json.loads(line))

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class FloorSide:
    """The file system's own side in :func:`interleaved_rounds`: each round one run of
    ``fsync_floor MODE SIZE N`` (``fsync_floor.c``: N writes of SIZE bytes, each followed by
    ``fdatasync``, appended or overwriting a file written and synced first; it times itself,
    its start not included)."""

    def __init__(self, name: str, exe: Path, mode: str, size: int, path: Path) -> None:
        self.name, self.exe, self.mode, self.size, self.path = name, exe, mode, size, path

    def round(self, units: int) -> dict:
        seconds = units / fsync_floor_rate(self.exe, self.mode, self.size, units, self.path)
        return {"seconds": seconds, "cpu_seconds": None}   # (its CPU is not measured)

    def close(self) -> None:
        self.path.unlink(missing_ok=True)


def interleaved_rounds(sides: list[RoundSide | FloorSide], rounds: int, units: int) -> dict[str, list[dict]]:
    """``rounds`` rounds of ``units`` each on every side, one side after the other, the order
    reversed every other round: a disk whose fsync latency swings 10x within a minute swings
    much less within one round, so the per-round ratios compare the sides under the same
    disk. Each side's rounds, in order."""
    out: dict[str, list[dict]] = {s.name: [] for s in sides}
    for r in range(rounds):
        for s in (sides if r % 2 == 0 else sides[::-1]):
            out[s.name].append(s.round(units))
    return out


# ==============================================================================================
# Driver
# ==============================================================================================

def log(msg: str) -> None:
    sys.stderr.write(f"[bench {time.strftime('%H:%M:%S')}] {msg}\n")
    sys.stderr.flush()


def sh(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=True, **kw)


def ensure_redis() -> str:
    exe = shutil.which("redis-server")
    if exe:
        return exe
    log("redis-server missing: apt-get update && apt-get install -y redis-server")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    sh(["apt-get", "update", "-q"], env=env, stdout=subprocess.DEVNULL)
    sh(["apt-get", "install", "-y", "-q", "--no-install-recommends", "redis-server"], env=env,
       stdout=subprocess.DEVNULL)
    exe = shutil.which("redis-server")
    if not exe:
        raise SystemExit("redis-server could not be installed")
    return exe


def ensure_bench_venv() -> Path:
    py = BENCH_VENV / "bin" / "python"
    if py.exists():
        ok = subprocess.run([str(py), "-c", "import redis, hiredis, persistqueue"], capture_output=True)
        if ok.returncode == 0:
            return py
    log(f"creating {BENCH_VENV} with {', '.join(PEER_PACKAGES)}")
    base = getattr(sys, "_base_executable", None) or shutil.which("python3") or sys.executable
    sh([base, "-m", "venv", str(BENCH_VENV)])
    sh([str(py), "-m", "pip", "install", "-q", *PEER_PACKAGES], stdout=subprocess.DEVNULL)
    return py


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """A redis-server of our own on 127.0.0.1, stopped (by its pid) when done."""

    def __init__(self, exe: str, workdir: Path, fsync: str) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix=f"redis-{fsync}-", dir=workdir))
        self.port = free_port()
        self.proc = subprocess.Popen(
            [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir),
             "--appendonly", "yes", "--appendfsync", fsync, "--save", "", "--daemonize", "no",
             "--logfile", str(self.dir / "redis.log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as c:
                    c.sendall(b"PING\r\n")
                    if c.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.stop()
                raise SystemExit(f"redis-server did not start (see {self.dir}/redis.log)")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


# Redis's consumer as a program of its own (the peers' venv: ``python -c`` this, PORT, N), as
# ``mqctl consume -e > /dev/null`` is one: a new group read with XREADGROUP COUNT 1000 + XACK of
# every batch, each body and a newline written to stdout (one ``writev`` per 1,024 buffers:
# stdout is the same sink as mqctl's, /dev/null), nothing else imported. It reports on stderr
# the messages read and the seconds from its group's creation (its first command, which opens
# the connection) to the last XACK; the driver times the whole process too (interpreter,
# redis-py's import, ~100 ms of CPU with redis-py 8: it imports asyncio and logging).
_REDIS_CONSUMER = """
import os, sys, time
import redis
r = redis.Redis(host="127.0.0.1", port=int(sys.argv[1]))
out, nl, got = sys.stdout.fileno(), b"\\n", 0
t = time.perf_counter()
r.xgroup_create("s", "g", id="0", mkstream=True)
while True:
    res = r.xreadgroup("g", "c", {"s": ">"}, count=1000)
    if not res or not res[0][1]:
        break
    batch = res[0][1]
    iov = []
    for _mid, fields in batch:
        iov += (fields[b"b"], nl)
    for i in range(0, len(iov), 1024):
        os.writev(out, iov[i:i + 1024])
    r.xack("s", "g", *[mid for mid, _ in batch])
    got += len(batch)
sys.stderr.write(f"{got} {time.perf_counter() - t}\\n")
"""


def redis_consume(py: Path, port: int, n: int) -> tuple[float, float]:
    """:data:`_REDIS_CONSUMER` on the stream of the server at ``port``, stdout to /dev/null:
    (seconds from its first command to its last, seconds of the whole process)."""
    t = time.perf_counter()
    p = subprocess.run([str(py), "-c", _REDIS_CONSUMER, str(port)], stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True, timeout=3600)
    whole = time.perf_counter() - t
    got = p.stderr.split()
    if p.returncode != 0 or len(got) != 2 or got[0] != str(n):
        raise SystemExit(f"Redis consumer failed ({p.returncode}), expected {n} messages: {p.stderr[-2000:]}")
    return float(got[1]), whole


def run_peer(py: Path, spec: dict) -> dict:
    p = subprocess.run([str(py), __file__, "--peer-worker", json.dumps(spec)], capture_output=True, timeout=3600)
    if p.returncode != 0:
        raise SystemExit(f"peer worker {spec} failed: {p.stderr.decode()[-2000:]}")
    out = json.loads(p.stdout)
    if out["count"] != spec["n"]:
        raise SystemExit(f"peer worker {spec}: expected {spec['n']} messages, got {out['count']}")
    return out


PURE_ZLIB = False


def mqctl_env(store: Path) -> dict[str, str]:
    env = dict(os.environ, MQCTL_STORE=str(store), NO_COLOR="1")
    env.pop("MQCTL_FAILPOINTS", None)
    if PURE_ZLIB:
        env["MQCTL_PURE_ZLIB"] = "1"
    return env


def mqctl_crc() -> str:
    """Which CRC-32 the mqctl processes use (store.log.record picks ISA-L's when installed)."""
    py = MQCTL.parent / "python"
    p = subprocess.run([str(py), "-c", "import store.log.record as r; print(r.crc32.__module__)"],
                       capture_output=True, text=True, env=mqctl_env(Path("/nonexistent")))
    return p.stdout.strip() or "?"


def run_mqctl(args: list[str], store: Path, stdin_path: Path | None = None, stdout=subprocess.DEVNULL,
              pipe: bool = True, exe: Path | None = None) -> dict:
    """Run one mqctl process; wall time (start-up included) and its CPU time. With
    ``stdin_path`` and ``pipe``, the input comes through a pipe from ``cat`` (as in a user's
    pipeline; timed from cat's start), else from the file itself."""
    before = os.times()
    cat = None
    if stdin_path and pipe:
        t = time.perf_counter()
        cat = subprocess.Popen(["cat", str(stdin_path)], stdout=subprocess.PIPE)
        stdin = cat.stdout
    else:
        stdin = open(stdin_path, "rb") if stdin_path else subprocess.DEVNULL
        t = time.perf_counter()
    try:
        p = subprocess.run([str(exe or MQCTL), *args], stdin=stdin, stdout=stdout, stderr=subprocess.PIPE,
                           env=mqctl_env(store), timeout=3600)
        dt = time.perf_counter() - t
    finally:
        if stdin_path:
            stdin.close()
        if cat is not None:
            cat.wait()
    after = os.times()
    if p.returncode != 0:
        raise SystemExit(f"mqctl {' '.join(args)} failed ({p.returncode}): {p.stderr.decode()[-2000:]}")
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return {"seconds": dt, "cpu_seconds": cpu, "stderr": p.stderr.decode().strip()[-300:]}


def write_input(path: Path, n: int, size: int) -> None:
    with open(path, "wb") as fh:
        block = []
        for i in range(n):
            block.append(body_of(i, size))
            if len(block) == 10000:
                fh.write(b"\n".join(block) + b"\n")
                block = []
        if block:
            fh.write(b"\n".join(block) + b"\n")


def page_cache_bandwidth(workdir: Path, total: int, tries: int = 3) -> float:
    """Bytes per second of os.write(1 MiB) appends to a new file (no fsync): dd to page cache.
    The median of ``tries`` runs, each after a sync: one alone swings 5-10x here (a write into
    pages the balloon reported to the host runs at a fifth of one into recently freed pages;
    see :func:`recycle_pages`)."""
    path = workdir / "ddtest"
    block = b"\0" * (1 << 20)
    rates = []
    for _ in range(tries):
        os.sync()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            t = time.perf_counter()
            written = 0
            while written < total:
                written += os.write(fd, block)
            dt = time.perf_counter() - t
        finally:
            os.close(fd)
            path.unlink()
        rates.append(written / dt)
    return statistics.median(rates)


_PIPE_READER = """
import fcntl, os
try:
    fcntl.fcntl(0, 1031, 1 << 20)   # F_SETPIPE_SZ, as mqctl send does
except OSError:
    pass
buf = bytearray(4 << 20)
while os.readv(0, [buf]):
    pass
"""


_PY_FLOOR = """
import fcntl, os, struct, sys
try:
    from isal.isal_zlib import crc32
except ImportError:
    from zlib import crc32
try:
    fcntl.fcntl(0, 1031, 1 << 20)   # F_SETPIPE_SZ, as mqctl send does
except OSError:
    pass
HEADER = 91                          # mqctl's fixed record part, as in pipe_floor.c
head = struct.Struct("<i4xI8xqq51xi")   # TOTAL, CRC, record number, position, BODYLENGTH
out = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
buf = bytearray(8 << 20)
view = memoryview(buf)
have = pos = records = 0
while True:
    n = os.readv(0, [view[have:]])
    have += n
    start, parts = 0, []
    find = buf.find
    i = find(b"\\n", 0, have)
    while i >= 0:
        body = view[start:i]
        parts += (head.pack(HEADER + i - start, crc32(body), records, pos, i - start), body)
        pos += HEADER + i - start
        records += 1
        start = i + 1
        i = find(b"\\n", start, have)
    for k in range(0, len(parts), 1024):
        os.writev(out, parts[k:k + 1024])
    buf[:have - start] = buf[start:have]
    have -= start
    if n == 0:
        break
print(records)
"""


def py_floor_seconds(stdin_path: Path, out: Path) -> float:
    """``cat FILE | python -c _PY_FLOOR OUT`` (the project venv's interpreter, ISA-L's CRC
    when installed), timed as :func:`c_floor_seconds`, after a sync."""
    os.sync()
    recycle_pages(out.parent, stdin_path.stat().st_size * 9 // 8)
    t = time.perf_counter()
    cat = subprocess.Popen(["cat", str(stdin_path)], stdout=subprocess.PIPE)
    try:
        subprocess.run([str(MQCTL.parent / "python"), "-c", _PY_FLOOR, str(out)], stdin=cat.stdout, check=True,
                       stdout=subprocess.DEVNULL)
    finally:
        assert cat.stdout is not None
        cat.stdout.close()
        cat.wait()
    dt = time.perf_counter() - t
    out.unlink()
    return dt


def pipe_floor_seconds(stdin_path: Path) -> float:
    """``cat FILE | python -c <read the pipe and drop it>``, timed as :func:`run_mqctl` times
    ``send``: the least any pipeline fed by ``cat`` through a pipe can take."""
    t = time.perf_counter()
    cat = subprocess.Popen(["cat", str(stdin_path)], stdout=subprocess.PIPE)
    try:
        subprocess.run([sys.executable, "-S", "-c", _PIPE_READER], stdin=cat.stdout, check=True)
    finally:
        assert cat.stdout is not None
        cat.stdout.close()
        cat.wait()
    return time.perf_counter() - t


def peak_rss(n: int, workdir: Path) -> dict:
    """Peak RSS of `mqctl send T` reading n short lines from a pipe."""
    store = workdir / "rss-store"
    seq = subprocess.Popen(["seq", "1", str(n)], stdout=subprocess.PIPE)
    t = time.perf_counter()
    timer = ["/usr/bin/time", "-f", "%M"] if Path("/usr/bin/time").exists() else []
    p = subprocess.run(timer + [str(MQCTL), "send", "T"], stdin=seq.stdout, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, env=mqctl_env(store), timeout=7200)
    seq.stdout.close()
    seq.wait()
    dt = time.perf_counter() - t
    if p.returncode != 0:
        raise SystemExit(f"rss run failed: {p.stderr.decode()[-1000:]}")
    err = p.stderr.decode().strip().splitlines()
    kib = int(err[-1]) if timer else -1
    shutil.rmtree(store, ignore_errors=True)
    return {"n": n, "peak_rss_mb": kib / 1024, "seconds": dt, "msgs_per_s": n / dt, "summary": err[0] if err else ""}


def run_api(spec: dict, exe: Path | None = None) -> dict:
    p = subprocess.run([str((exe or MQCTL).parent / "python"), __file__, "--api-worker", json.dumps(spec)],
                       capture_output=True, timeout=3600, env=mqctl_env(Path(spec["path"])))
    if p.returncode != 0:
        raise SystemExit(f"api worker {spec} failed: {p.stderr.decode()[-2000:]}")
    out = json.loads(p.stdout)
    if out["count"] != spec["n"]:
        raise SystemExit(f"api worker {spec}: expected {spec['n']} messages, got {out['count']}")
    return out


def fsync_floor_rate(exe: Path, mode: str, size: int, n: int, out: Path) -> float:
    """Durable writes per second of ``fsync_floor MODE SIZE N`` (pwrite + fdatasync each)."""
    p = subprocess.run([str(exe), mode, str(size), str(n), str(out)], check=True, capture_output=True, text=True)
    return n / float(p.stdout.split()[3])


def consume_floor_seconds(store: Path, n: int) -> float:
    """``python consume_floor.py STORE > /dev/null`` (this checkout's interpreter), timed as
    :func:`run_mqctl` times ``consume``, start-up included."""
    t = time.perf_counter()
    p = subprocess.run([str(MQCTL.parent / "python"), str(REPO / "tests" / "bench" / "consume_floor.py"), str(store)],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=3600)
    dt = time.perf_counter() - t
    if p.returncode != 0 or p.stderr.split()[:1] != [str(n)]:
        raise SystemExit(f"consume_floor.py failed ({p.returncode}): {p.stderr[-500:]}")
    return dt


def consume_c_floor_seconds(exe: Path, store: Path, n: int) -> float:
    """``consume_floor STORE T > /dev/null`` (``consume_floor.c``), timed as
    :func:`consume_floor_seconds`."""
    t = time.perf_counter()
    p = subprocess.run([str(exe), str(store), "T"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                       timeout=3600)
    dt = time.perf_counter() - t
    if p.returncode != 0 or p.stderr.split()[:1] != [str(n)]:
        raise SystemExit(f"consume_floor.c failed ({p.returncode}): {p.stderr[-500:]}")
    return dt


def compile_crc_floor(name: str, workdir: Path) -> Path | None:
    """``<name>.c`` with libdeflate's CRC-32 when the machine has the library (as fast as the
    ISA-L CRC mqctl uses), else with zlib's (3-4x slower: a floor above the truth)."""
    quiet: list[str] = []
    exe = compile_floor(name, workdir, quiet.append, ("-DWITH_LIBDEFLATE", "-l:libdeflate.so.0"))
    if exe is None:
        log(f"{name}.c: libdeflate not found, built with zlib's CRC-32 (slower than mqctl's ISA-L)")
        exe = compile_floor(name, workdir, log, ("-lz",))
    return exe


def c_floor_seconds(exe: Path, stdin_path: Path, out: Path) -> float:
    """``cat FILE | pipe_floor OUT``, timed as :func:`run_mqctl` times ``send``, after a sync."""
    os.sync()
    recycle_pages(out.parent, stdin_path.stat().st_size * 9 // 8)
    t = time.perf_counter()
    cat = subprocess.Popen(["cat", str(stdin_path)], stdout=subprocess.PIPE)
    try:
        subprocess.run([str(exe), str(out)], stdin=cat.stdout, check=True, stdout=subprocess.DEVNULL)
    finally:
        assert cat.stdout is not None
        cat.stdout.close()
        cat.wait()
    dt = time.perf_counter() - t
    out.unlink()
    return dt


def summarise(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": values}


def fmt(x: float) -> str:
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= div:
            return f"{x / div:.3g} {unit}"
    return f"{x:.3g}"



# The durable comparisons run in rounds (``--rounds``): side names, their peers, and what each
# round of a side writes (messages a unit).
ROUND_SINGLE = "api_sync_single_100"
ROUND_SQLITE = "sqlite_wal_full_single_100"
ROUND_MANY = "api_sync_many100_100"
ROUND_REDIS = "redis_always_p100_100"
ROUND_FLOOR = "fsync_floor_append"


def durable_rounds(a: argparse.Namespace, rep: int, sides: list[tuple[str, Path | None]], peer_py: Path,
                   redis_exe: str, workdir: Path, out: dict[str, list[dict]], fsync_exe: Path | None) -> None:
    """One repetition's ``--rounds`` interleaved rounds: single sync sends of each checkout
    against SQLite WAL ``synchronous=FULL`` commits (``--round-size`` each), then ``send_many``
    of 100 against Redis ``appendfsync always`` pipelines of 100 (``--round-batches``), each
    side a :func:`round_worker` kept open through the rounds, on its own fresh store; with
    ``fsync_exe``, the floor of each (:class:`FloorSide`: 254-byte appends, or 25,400). Appends
    each round's figures to ``out[side]`` (with ``msgs``: how many the round wrote)."""
    checkouts = sides if rep % 2 == 0 else sides[::-1]
    for what in ("single", "many"):
        opened: list[RoundSide | FloorSide] = []
        srv = None
        try:
            for prefix, exe in checkouts:
                store = workdir / f"rounds-{prefix}store"
                shutil.rmtree(store, ignore_errors=True)
                spec = {"kind": "api", "path": str(store), "size": 100, "batch": 1 if what == "single" else 100}
                opened.append(RoundSide(prefix + (ROUND_SINGLE if what == "single" else ROUND_MANY),
                                        (exe or MQCTL).parent / "python", spec, mqctl_env(store)))
            if what == "single":
                db = workdir / "rounds-sqlite.db"
                for f in workdir.glob("rounds-sqlite.db*"):
                    f.unlink()
                opened.append(RoundSide(ROUND_SQLITE, peer_py, {"kind": "sqlite_full", "path": str(db), "size": 100}))
                units, per_unit = a.round_size, 1
            else:
                srv = RedisServer(redis_exe, workdir, "always")
                opened.append(RoundSide(ROUND_REDIS, peer_py, {"kind": "redis", "port": srv.port, "size": 100,
                                                               "batch": 100}))
                units, per_unit = a.round_batches, 100
            if fsync_exe is not None:
                size = 254 * per_unit   # (a 100-byte send's record, or a batch of 100 of them)
                for mode in ("append", "overwrite"):
                    opened.append(FloorSide(f"fsync_floor_{mode}_{size}", fsync_exe, mode, size,
                                            workdir / "rounds-floor.dat"))
            os.sync()
            got = interleaved_rounds(opened, a.rounds, units)
            for name, rs in got.items():
                out.setdefault(name, []).extend({**r, "msgs": units * per_unit} for r in rs)
            log(f"  {a.rounds} rounds of {what} durable sends: " + "; ".join(
                f"{name} {fmt(statistics.median(r['msgs'] / r['seconds'] for r in out[name][-a.rounds:]))} msgs/s"
                for name in got))
        finally:
            for side in opened:
                side.close()
            if srv is not None:
                srv.stop()
            for f in workdir.glob("rounds-*"):
                shutil.rmtree(f, ignore_errors=True) if f.is_dir() else f.unlink()


def round_summary(rounds: dict[str, list[dict]], baseline: bool) -> tuple[dict, dict]:
    """From every round of :func:`durable_rounds`: each side's rate and CPU µs a message (the
    medians of its rounds), and the ratios of the sides, taken round by round (the same
    round's figures of both sides), then their median."""
    sides: dict[str, dict] = {}
    for name, rs in rounds.items():
        cpu = [r["cpu_seconds"] / r["msgs"] * 1e6 for r in rs if r["cpu_seconds"] is not None]
        sides[name] = {"msgs_per_s": summarise([r["msgs"] / r["seconds"] for r in rs]),
                       "cpu_us_per_msg": summarise(cpu) if cpu else None,
                       "rounds": len(rs), "msgs_per_round": rs[0]["msgs"] if rs else 0}

    def per_round(a_side: str, b_side: str) -> dict | None:
        pairs = list(zip(rounds.get(a_side, []), rounds.get(b_side, [])))
        if not pairs:
            return None
        # a's rate over b's in the same round (both wrote as many messages)
        return summarise([(y["seconds"] / y["msgs"]) / (x["seconds"] / x["msgs"]) for x, y in pairs])

    wanted = [(f"{ROUND_SINGLE}_vs_sqlite_wal_full_rounds (target >= 1)", ROUND_SINGLE, ROUND_SQLITE),
              (f"{ROUND_MANY}_vs_redis_always_p100_rounds (target >= 1.5)", ROUND_MANY, ROUND_REDIS)]
    wanted += [(f"{ROUND_SINGLE}_vs_{ROUND_FLOOR}_254_rounds", ROUND_SINGLE, f"{ROUND_FLOOR}_254"),
               (f"{ROUND_SQLITE}_vs_{ROUND_FLOOR}_254_rounds", ROUND_SQLITE, f"{ROUND_FLOOR}_254"),
               (f"{ROUND_MANY}_vs_{ROUND_FLOOR}_25400_rounds", ROUND_MANY, f"{ROUND_FLOOR}_25400"),
               (f"{ROUND_REDIS}_vs_{ROUND_FLOOR}_25400_rounds", ROUND_REDIS, f"{ROUND_FLOOR}_25400"),
               # what a durable write costs when the file's size does not change (no journal commit)
               ("fsync_floor_overwrite_vs_append_254_rounds", "fsync_floor_overwrite_254", f"{ROUND_FLOOR}_254"),
               ("fsync_floor_overwrite_vs_append_25400_rounds", "fsync_floor_overwrite_25400",
                f"{ROUND_FLOOR}_25400")]
    if baseline:
        wanted += [(f"base_{ROUND_SINGLE}_vs_sqlite_wal_full_rounds", f"base_{ROUND_SINGLE}", ROUND_SQLITE),
                   (f"base_{ROUND_MANY}_vs_redis_always_p100_rounds", f"base_{ROUND_MANY}", ROUND_REDIS),
                   (f"{ROUND_SINGLE}_vs_base_rounds", ROUND_SINGLE, f"base_{ROUND_SINGLE}"),
                   (f"{ROUND_MANY}_vs_base_rounds", ROUND_MANY, f"base_{ROUND_MANY}")]
    ratios = {}
    for key, x, y in wanted:
        r = per_round(x, y)
        if r is not None:
            ratios[key] = r
    # single sends against SQLite, split by what SQLite's WAL did in the round: grew (appends,
    # as mqctl's log always does) or was written again from its start (overwrites)
    for grew, tag in ((True, "wal_appending"), (False, "wal_overwriting")):
        pairs = [(x, y) for x, y in zip(rounds.get(ROUND_SINGLE, []), rounds.get(ROUND_SQLITE, []))
                 if y.get("wal_grew") is grew]
        if pairs:
            ratios[f"{ROUND_SINGLE}_vs_sqlite_{tag}_rounds"] = summarise(
                [(y["seconds"] / y["msgs"]) / (x["seconds"] / x["msgs"]) for x, y in pairs])
    return sides, ratios



def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--peer-worker", help=argparse.SUPPRESS)
    ap.add_argument("--api-worker", help=argparse.SUPPRESS)
    ap.add_argument("--round-worker", help=argparse.SUPPRESS)
    ap.add_argument("--hogs", type=int, default=0,
                    help="CPU hogs (yes > /dev/null) running through every repetition, beside mqctl and the peers alike")
    ap.add_argument("--api", action=argparse.BooleanOptionalAction, default=True,
                    help="the Python API too (Producer.send_many, the Consumer iterator, sync sends)")
    ap.add_argument("--nsingle", type=int, default=1000, help="single sync sends per run (Python API, SQLite, Redis)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--sizes", default="100,1024,4096,65536", help="message sizes in bytes, comma separated")
    ap.add_argument("--mb", type=float, default=400.0,
                    help="payload per produce run, MB (N = this / size, at most --nmax)")
    ap.add_argument("--nmax", type=int, default=1_000_000, help="most messages per produce run")
    ap.add_argument("--pipe-mb", type=float, default=1000.0,
                    help="MB of 64 KiB lines for the pipe's throughput against the C floor (0: skip)")
    ap.add_argument("--nsync", type=int, default=100_000, help="100-byte messages per --flush sync --batch-size 100 run")
    ap.add_argument("--nsync4k", type=int, default=20_000, help="4 KiB messages per --flush sync --batch-size 100 run")
    ap.add_argument("--npq", type=int, default=0, help="messages per persist-queue run (0: skip)")
    ap.add_argument("--nrss", type=int, default=10_000_000, help="messages for the peak-RSS run (0: skip)")
    ap.add_argument("--workdir", default=None, help="scratch directory (default: a temp dir under /tmp)")
    ap.add_argument("--quick", action="store_true", help="tiny sizes: check that the script works")
    ap.add_argument("--baseline", default=None, metavar="DIR",
                    help="another checkout (with its .venv) run beside this one in every repetition")
    ap.add_argument("--pure-zlib", action="store_true",
                    help="make mqctl use zlib's CRC even when ISA-L (isal) is installed")
    ap.add_argument("--rounds", type=int, default=20,
                    help="interleaved rounds per repetition of the durable comparisons (0: none): single sync "
                         "sends against SQLite, send_many of 100 against Redis appendfsync always")
    ap.add_argument("--round-size", type=int, default=100, help="single sends (or SQLite commits) per round")
    ap.add_argument("--round-batches", type=int, default=10, help="batches of 100 per round")
    ap.add_argument("--durable-only", action="store_true",
                    help="only the durable runs: --flush sync batches of 100 (CLI, API), single sync sends "
                         "(both checkouts with --baseline), SQLite WAL FULL and Redis appendfsync always")
    a = ap.parse_args()
    global PURE_ZLIB
    PURE_ZLIB = a.pure_zlib
    if a.peer_worker:
        print(json.dumps(peer_worker(json.loads(a.peer_worker))))
        return
    if a.api_worker:
        print(json.dumps(api_worker(json.loads(a.api_worker))))
        return
    if a.round_worker:
        round_worker(json.loads(a.round_worker))
        return
    if a.quick:
        a.reps, a.mb, a.nmax, a.nsync, a.nsync4k, a.npq, a.nrss = 1, 8.0, 20_000, 2_000, 500, min(a.npq, 2_000), 50_000
        a.pipe_mb = min(a.pipe_mb, 16.0)
        a.nsingle = 100
        a.rounds = min(a.rounds, 4)
    if not MQCTL.exists():
        raise SystemExit(f"{MQCTL} not found: create the project venv first")
    base_exe = None
    if a.baseline:
        base_exe = Path(a.baseline).resolve() / ".venv" / "bin" / "mqctl"
        if not base_exe.exists():
            raise SystemExit(f"{base_exe} not found: the baseline checkout needs its venv")
    import compileall
    for root in (REPO, *([base_exe.parents[2]] if base_exe is not None else [])):
        for pkg in ("mqctl", "store"):   # timed as installed: bytecode compiled once, not per process
            compileall.compile_dir(root / pkg, quiet=1)
    sizes = [int(x) for x in a.sizes.split(",") if x]
    counts = {size: max(100, min(a.nmax, int(a.mb * 1e6 / size))) for size in sizes}
    sync_sizes = [s for s in (100, 4096) if s in sizes] or sizes[:1]

    redis_exe = ensure_redis()
    peer_py = ensure_bench_venv()
    workdir = Path(a.workdir or tempfile.mkdtemp(prefix="mqctl-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    machine = {
        "nproc": os.cpu_count(), "python": platform.python_version(), "kernel": platform.release(),
        "loadavg_start": loadavg(), "uptime_start": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
        "redis": subprocess.run([redis_exe, "--version"], capture_output=True, text=True).stdout.strip(),
        "mqctl_crc32": mqctl_crc(),
    }
    log(f"workdir {workdir}; machine load {machine['loadavg_start']}; N per size {counts}")

    inputs = {size: workdir / f"in{size}" for size in sizes}
    for size, path in ([] if a.durable_only else inputs.items()):
        write_input(path, counts[size], size)
    # the pipe's throughput: 64 KiB lines, enough of them that the process's start is small
    big_n = int(a.pipe_mb * 1e6) // 65536 if 65536 in sizes and not a.durable_only else 0
    big_input = workdir / "in65536big"
    if big_n:
        write_input(big_input, big_n, 65536)
    sync_counts = {size: a.nsync4k if size >= 4096 else a.nsync for size in sync_sizes}
    sync_inputs = {size: workdir / f"insync{size}" for size in sync_sizes}
    for size, path in sync_inputs.items():
        write_input(path, sync_counts[size], size)

    runs: dict[str, list[float]] = {}
    extra: dict[str, list] = {}
    rounds: dict[str, list[dict]] = {}   # each side's rounds (seconds, cpu_seconds), every repetition's
    loads: list[str] = []

    def rec(name: str, msgs_per_s: float, **more) -> None:
        runs.setdefault(name, []).append(msgs_per_s)
        if more:
            extra.setdefault(name, []).append(more)
        log(f"  {name}: {fmt(msgs_per_s)} msgs/s {more if more else ''}")

    def label(size: int) -> str:
        return f"{size // 1024}k" if size >= 1024 else str(size)

    floor_exe = compile_crc_floor("pipe_floor", workdir)
    consume_exe = None if a.durable_only else compile_crc_floor("consume_floor", workdir)
    fsync_exe = compile_floor("fsync_floor", workdir, log) if a.durable_only or (a.api and a.rounds) else None
    hogs = cpu_hogs(a.hogs).start()   # (stopped at exit too, if the run is interrupted)
    machine["hogs"] = a.hogs
    machine["loadavg_hogs_started"] = loadavg()
    sides: list[tuple[str, Path | None]] = [("", None)] + ([("base_", base_exe)] if base_exe is not None else [])
    for rep in range(a.reps):
        loads.append(loadavg())
        log(f"repetition {rep + 1}/{a.reps}; load {loads[-1]}")
        # -- mqctl, and the page cache, per size ------------------------------------------
        for size in ([] if a.durable_only else sizes):
            n, tag = counts[size], label(size)
            store = workdir / "store"
            shutil.rmtree(store, ignore_errors=True)
            if size >= 4096:
                # The page cache's write speed depends on how much is dirty already
                # (writeback throttling): the dd-like write and mqctl's run both start after
                # a sync, and the dd writes as many bytes as mqctl's commit log will hold.
                os.sync()
                bw = page_cache_bandwidth(workdir, n * (size + 154))
                rec(f"pagecache_write_bytes_per_s_{tag}", bw)
                rec(f"pipe_floor_{tag}", n / pipe_floor_seconds(inputs[size]))
                if floor_exe is not None:
                    rec(f"c_floor_{tag}", n / c_floor_seconds(floor_exe, inputs[size], workdir / "floor.out"))
                rec(f"py_floor_{tag}", n / py_floor_seconds(inputs[size], workdir / "floor.out"))
            # this checkout and the baseline's (when given), in alternating order by repetition
            for prefix, exe in (sides if rep % 2 == 0 else sides[::-1]):
                run_mqctl(["topic", "create", "T"], store, exe=exe)   # (untimed: the server's part)
                os.sync()
                recycle_pages(workdir, n * (size + 256))
                r = run_mqctl(["send", "T"], store, inputs[size], exe=exe)
                log_bytes = sum(p.stat().st_size for p in (store / "commitlog").iterdir())
                rec(f"{prefix}mqctl_produce_{tag}", n / r["seconds"], cpu_s=round(r["cpu_seconds"], 2),
                    log_bytes=log_bytes)
                r = run_mqctl(["consume", "T", "-g", "bench", "--from", "first", "-e"], store, exe=exe)
                rec(f"{prefix}mqctl_consume_{tag}", n / r["seconds"], cpu_s=round(r["cpu_seconds"], 2))
                if not prefix:
                    # the floor of a consume in Python, on the same store (consume_floor.py)
                    rec(f"consume_floor_{tag}", n / consume_floor_seconds(store, n))
                    if consume_exe is not None:   # and in C (consume_floor.c)
                        rec(f"consume_c_floor_{tag}", n / consume_c_floor_seconds(consume_exe, store, n))
                shutil.rmtree(store, ignore_errors=True)
                if a.api:
                    run_mqctl(["topic", "create", "T"], store, exe=exe)
                    os.sync()
                    spec = {"n": n, "size": size, "path": str(store)}
                    r = run_api(spec | {"phase": "produce"}, exe)
                    rec(f"{prefix}api_produce_{tag}", n / r["seconds"], cpu_us=round(r["cpu_timed_seconds"] / n * 1e6, 2),
                        cpu_sends_us=round(r["cpu_seconds"] / n * 1e6, 2),
                        sys_ms=round(r.get("sys_seconds", 0) * 1e3, 1), runq_ms=round(r.get("runq_seconds", 0) * 1e3, 1))
                    rec(f"{prefix}api_consume_{tag}", n / run_api(spec | {"phase": "consume"}, exe)["seconds"])
                    shutil.rmtree(store, ignore_errors=True)
        if big_n and floor_exe is not None:
            # the pipe's throughput (--pipe-mb of 64 KiB lines): the C floor, then each checkout
            rec("c_floor_64k_big", big_n / c_floor_seconds(floor_exe, big_input, workdir / "floor.out"))
            (workdir / "floor.out").unlink(missing_ok=True)
            for prefix, exe in (sides if rep % 2 == 0 else sides[::-1]):
                store = workdir / "store"
                shutil.rmtree(store, ignore_errors=True)
                run_mqctl(["topic", "create", "T"], store, exe=exe)
                os.sync()
                recycle_pages(workdir, big_n * (65536 + 256))
                r = run_mqctl(["send", "T"], store, big_input, exe=exe)
                rec(f"{prefix}mqctl_produce_64k_big", big_n / r["seconds"], cpu_s=round(r["cpu_seconds"], 2))
                # the consumer's throughput on the same store: ~1 s of reading, where the
                # 100 MB run's ~0.1 s is half the process's start
                r = run_mqctl(["consume", "T", "-g", "bench", "--from", "first", "-e"], store, exe=exe)
                rec(f"{prefix}mqctl_consume_64k_big", big_n / r["seconds"], cpu_s=round(r["cpu_seconds"], 2))
                if a.api:   # and the iterator's, judged there too (its first turn is ~20 ms of a 100 MB run)
                    r = run_api({"n": big_n, "size": 65536, "path": str(store), "phase": "consume"}, exe)
                    rec(f"{prefix}api_consume_64k_big", big_n / r["seconds"])
                shutil.rmtree(store, ignore_errors=True)
        for size in sync_sizes:
            store = workdir / "store"
            for prefix, exe in (sides if rep % 2 == 0 else sides[::-1]):
                shutil.rmtree(store, ignore_errors=True)
                run_mqctl(["topic", "create", "T"], store, exe=exe)   # (untimed, as above)
                os.sync()
                r = run_mqctl(["send", "T", "--flush", "sync", "--batch-size", "100"], store, sync_inputs[size],
                              exe=exe)
                rec(f"{prefix}mqctl_produce_sync_b100_{label(size)}", sync_counts[size] / r["seconds"],
                    cpu_s=round(r["cpu_seconds"], 2))
                shutil.rmtree(store, ignore_errors=True)
                if a.api:
                    spec = {"n": sync_counts[size], "size": size, "path": str(store), "phase": "sync_many100"}
                    rec(f"{prefix}api_sync_many100_{label(size)}", sync_counts[size] / run_api(spec, exe)["seconds"])
                    shutil.rmtree(store, ignore_errors=True)
        if a.api and a.nsingle:
            store = workdir / "store"
            spec = {"n": a.nsingle, "size": 100, "path": str(store), "phase": "sync_single"}
            for prefix, exe in (sides if rep % 2 == 0 else sides[::-1]):
                shutil.rmtree(store, ignore_errors=True)
                os.sync()
                r = run_api(spec, exe)
                rec(f"{prefix}api_sync_single_100", a.nsingle / r["seconds"],
                    cpu_us=round(r["cpu_seconds"] / a.nsingle * 1e6, 1))
                # the same sends with flush="async": the CPU of a send without its fdatasync
                shutil.rmtree(store, ignore_errors=True)
                n_async = 5 * a.nsingle
                r = run_api({**spec, "n": n_async, "phase": "async_single"}, exe)
                rec(f"{prefix}api_async_single_100", n_async / r["seconds"],
                    cpu_us=round(r["cpu_seconds"] / n_async * 1e6, 1))
            shutil.rmtree(store, ignore_errors=True)
            os.sync()
            db = workdir / "sqlite.db"
            p = run_peer(peer_py, {"kind": "sqlite_full", "phase": "produce", "path": str(db), "n": a.nsingle, "size": 100})
            rec("sqlite_wal_full_single_100", a.nsingle / p["seconds"])
            for f in workdir.glob("sqlite.db*"):
                f.unlink()
        if fsync_exe is not None and a.durable_only:
            # one record of a single 100-byte send (254 bytes) and one batch of 100 of them,
            # appended as the commit log is, and overwriting a file written and synced first
            for fsize, fn in ((254, a.nsingle or 1000), (25_400, max(100, a.nsync // 100))):
                for mode in ("append", "overwrite"):
                    rec(f"fsync_floor_{mode}_{fsize}", fsync_floor_rate(fsync_exe, mode, fsize, fn, workdir / "fsync.dat"))
        # -- Redis Streams -------------------------------------------------------------------
        plan = [] if a.durable_only else [("everysec", 1000, size, counts[size], "") for size in sizes]
        if big_n:
            plan.append(("everysec", 1000, 65536, big_n, "_big"))   # beside the consumer's --pipe-mb run
        plan += [("always", 100, size, sync_counts[size], "") for size in sync_sizes]
        if a.nsingle:
            plan.append(("always", 1, 100, a.nsingle, ""))
        for fsync, pipe, size, n, suffix in plan:
            srv = RedisServer(redis_exe, workdir, fsync)
            try:
                p = run_peer(peer_py, {"kind": "redis", "phase": "produce", "port": srv.port, "n": n,
                                       "size": size, "pipeline": pipe, "scratch": str(workdir)})
                tag = f"redis_{fsync}_p{pipe}_{label(size)}{suffix}"
                rec(f"{tag}_produce", n / p["seconds"])
                if fsync == "everysec":
                    loop, whole = redis_consume(peer_py, srv.port, n)
                    rec(f"{tag}_consume", n / loop)
                    # the peer's whole process (interpreter, redis-py, connection), as mqctl's is timed
                    rec(f"{tag}_consume_process", n / whole)
            finally:
                srv.stop()
        # -- the durable comparisons again, interleaved in small rounds ------------------------
        if a.api and a.rounds:
            durable_rounds(a, rep, sides, peer_py, redis_exe, workdir, rounds, fsync_exe)
        # -- persist-queue -------------------------------------------------------------------
        if a.npq:
            pqdir = workdir / "pq"
            shutil.rmtree(pqdir, ignore_errors=True)
            p = run_peer(peer_py, {"kind": "pq_sqlite", "phase": "produce", "path": str(pqdir), "n": a.npq, "size": 100})
            rec("pq_sqlite_b100_produce_100", a.npq / p["seconds"])
            c = run_peer(peer_py, {"kind": "pq_sqlite", "phase": "consume", "path": str(pqdir), "n": a.npq, "size": 100})
            rec("pq_sqlite_b100_consume_100", a.npq / c["seconds"])
            shutil.rmtree(pqdir, ignore_errors=True)

    machine["loadavg_hogs_end"] = loadavg()
    hogs.stop()
    rss = peak_rss(a.nrss, workdir) if a.nrss else None
    if rss:
        log(f"peak RSS for {a.nrss} messages: {rss['peak_rss_mb']:.1f} MB ({fmt(rss['msgs_per_s'])} msgs/s)")
    machine["loadavg_end"] = loadavg()
    machine["loadavg_per_rep"] = loads
    machine["uptime_end"] = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    shutil.rmtree(workdir, ignore_errors=True)

    med = {k: summarise(v) for k, v in runs.items()}

    def ratio_runs(a_key: str, b_key: str, scale: float = 1.0) -> dict:
        """Ratio per repetition (both from the same repetition), then its median."""
        rs = [x * scale / y for x, y in zip(runs.get(a_key, []), runs.get(b_key, [])) if y]
        return summarise(rs) if rs else {"median": float("nan"), "min": float("nan"), "max": float("nan"), "runs": []}

    ratios: dict[str, dict] = {}
    for size in ([] if a.durable_only else sizes):
        tag = label(size)
        ratios[f"produce_{tag}_vs_redis_xadd_p1000 (target >= 2)"] = ratio_runs(
            f"mqctl_produce_{tag}", f"redis_everysec_p1000_{tag}_produce")
        # at 64 KiB the consumer's target is judged on the bigger run (--pipe-mb), when it ran
        judged = "" if size == 65536 and "redis_everysec_p1000_64k_big_consume" in runs else " (target >= 2)"
        ratios[f"consume_{tag}_vs_redis_xreadgroup_xack{judged}"] = ratio_runs(
            f"mqctl_consume_{tag}", f"redis_everysec_p1000_{tag}_consume")
        ratios[f"consume_floor_{tag}_vs_redis_xreadgroup_xack"] = ratio_runs(
            f"consume_floor_{tag}", f"redis_everysec_p1000_{tag}_consume")
        ratios[f"consume_{tag}_vs_consume_floor"] = ratio_runs(f"mqctl_consume_{tag}", f"consume_floor_{tag}")
        if f"consume_c_floor_{tag}" in runs:
            ratios[f"consume_c_floor_{tag}_vs_redis_xreadgroup_xack"] = ratio_runs(
                f"consume_c_floor_{tag}", f"redis_everysec_p1000_{tag}_consume")
            ratios[f"consume_{tag}_vs_consume_c_floor"] = ratio_runs(f"mqctl_consume_{tag}", f"consume_c_floor_{tag}")
            ratios[f"consume_floor_{tag}_vs_consume_c_floor"] = ratio_runs(f"consume_floor_{tag}",
                                                                           f"consume_c_floor_{tag}")
            if a.api:
                ratios[f"api_consume_{tag}_vs_consume_c_floor"] = ratio_runs(f"api_consume_{tag}",
                                                                             f"consume_c_floor_{tag}")
        ratios[f"consume_{tag}_vs_redis_process"] = ratio_runs(
            f"mqctl_consume_{tag}", f"redis_everysec_p1000_{tag}_consume_process")
        if f"pagecache_write_bytes_per_s_{tag}" in runs:
            want = " (target >= 0.5)" if size == 65536 else ""
            ratios[f"produce_{tag}_payload_vs_pagecache{want}"] = ratio_runs(
                f"mqctl_produce_{tag}", f"pagecache_write_bytes_per_s_{tag}", float(size))
            ratios[f"pipe_floor_{tag}_payload_vs_pagecache"] = ratio_runs(
                f"pipe_floor_{tag}", f"pagecache_write_bytes_per_s_{tag}", float(size))
            ratios[f"produce_{tag}_vs_pipe_floor"] = ratio_runs(f"mqctl_produce_{tag}", f"pipe_floor_{tag}")
            if f"c_floor_{tag}" in runs:
                # at 64 KiB the target is judged on the bigger input (--pipe-mb), when it ran
                want = " (target >= 0.8)" if size == 65536 and "c_floor_64k_big" not in runs else ""
                ratios[f"produce_{tag}_vs_c_floor{want}"] = ratio_runs(f"mqctl_produce_{tag}", f"c_floor_{tag}")
                ratios[f"py_floor_{tag}_vs_c_floor"] = ratio_runs(f"py_floor_{tag}", f"c_floor_{tag}")
                if a.baseline:
                    ratios[f"base_produce_{tag}_vs_c_floor"] = ratio_runs(f"base_mqctl_produce_{tag}",
                                                                          f"c_floor_{tag}")
            ratios[f"produce_{tag}_vs_py_floor"] = ratio_runs(f"mqctl_produce_{tag}", f"py_floor_{tag}")
            ratios[f"produce_{tag}_logbytes_vs_pagecache"] = summarise([
                x * e["log_bytes"] / counts[size] / y for x, e, y in
                zip(runs[f"mqctl_produce_{tag}"], extra[f"mqctl_produce_{tag}"], runs[f"pagecache_write_bytes_per_s_{tag}"])])
        if a.baseline:
            for what in ("mqctl_produce", "mqctl_consume") + (("api_produce", "api_consume") if a.api else ()):
                ratios[f"base_{what}_{tag}_vs_redis"] = ratio_runs(
                    f"base_{what}_{tag}", f"redis_everysec_p1000_{tag}_{what.split('_')[1]}")
                ratios[f"{what}_{tag}_vs_base"] = ratio_runs(f"{what}_{tag}", f"base_{what}_{tag}")
        if a.api:
            ratios[f"api_produce_{tag}_vs_redis_xadd_p1000 (target >= 2)"] = ratio_runs(
                f"api_produce_{tag}", f"redis_everysec_p1000_{tag}_produce")
            api_big = size == 65536 and "redis_everysec_p1000_64k_big_consume" in runs and "api_consume_64k_big" in runs
            ratios[f"api_consume_{tag}_vs_redis_xreadgroup_xack{'' if api_big else ' (target >= 2)'}"] = ratio_runs(
                f"api_consume_{tag}", f"redis_everysec_p1000_{tag}_consume")
    if "c_floor_64k_big" in runs:
        ratios["produce_64k_big_vs_c_floor (target >= 0.8)"] = ratio_runs("mqctl_produce_64k_big", "c_floor_64k_big")
        if "redis_everysec_p1000_64k_big_consume" in runs:
            ratios["consume_64k_big_vs_redis_xreadgroup_xack (target >= 2)"] = ratio_runs(
                "mqctl_consume_64k_big", "redis_everysec_p1000_64k_big_consume")
            if "api_consume_64k_big" in runs:
                ratios["api_consume_64k_big_vs_redis_xreadgroup_xack (target >= 2)"] = ratio_runs(
                    "api_consume_64k_big", "redis_everysec_p1000_64k_big_consume")
        if a.baseline:
            ratios["base_produce_64k_big_vs_c_floor"] = ratio_runs("base_mqctl_produce_64k_big", "c_floor_64k_big")
    for size in sync_sizes:
        tag = label(size)
        ratios[f"sync_b100_{tag}_vs_redis_always_p100 (target >= 1.5)"] = ratio_runs(
            f"mqctl_produce_sync_b100_{tag}", f"redis_always_p100_{tag}_produce")
        if a.api:
            ratios[f"api_sync_many100_{tag}_vs_redis_always_p100 (target >= 1.5)"] = ratio_runs(
                f"api_sync_many100_{tag}", f"redis_always_p100_{tag}_produce")
        if a.baseline:
            ratios[f"base_sync_b100_{tag}_vs_redis_always_p100"] = ratio_runs(
                f"base_mqctl_produce_sync_b100_{tag}", f"redis_always_p100_{tag}_produce")
            if a.api:
                ratios[f"base_api_sync_many100_{tag}_vs_redis_always_p100"] = ratio_runs(
                    f"base_api_sync_many100_{tag}", f"redis_always_p100_{tag}_produce")
    if a.api and a.nsingle:
        ratios["api_sync_single_100_vs_sqlite_wal_full (target >= 1)"] = ratio_runs(
            "api_sync_single_100", "sqlite_wal_full_single_100")
        ratios["api_sync_single_100_vs_redis_always_p1"] = ratio_runs(
            "api_sync_single_100", "redis_always_p1_100_produce")
        if a.baseline:
            ratios["base_api_sync_single_100_vs_sqlite_wal_full"] = ratio_runs(
                "base_api_sync_single_100", "sqlite_wal_full_single_100")
            ratios["api_sync_single_100_vs_base"] = ratio_runs("api_sync_single_100", "base_api_sync_single_100")
            ratios["api_async_single_100_vs_base"] = ratio_runs("api_async_single_100", "base_api_async_single_100")
    if "fsync_floor_append_254" in runs:
        for fsize in (254, 25_400):
            ratios[f"fsync_floor_overwrite_vs_append_{fsize}"] = ratio_runs(
                f"fsync_floor_overwrite_{fsize}", f"fsync_floor_append_{fsize}")
        if a.api and a.nsingle:
            ratios["api_sync_single_100_vs_fsync_floor_append_254"] = ratio_runs(
                "api_sync_single_100", "fsync_floor_append_254")
            ratios["sqlite_wal_full_single_100_vs_fsync_floor_append_254"] = ratio_runs(
                "sqlite_wal_full_single_100", "fsync_floor_append_254")
        if a.api:
            ratios["api_sync_many100_100_batches_vs_fsync_floor_append_25400"] = ratio_runs(
                "api_sync_many100_100", "fsync_floor_append_25400", 0.01)
    round_sides, round_ratios = round_summary(rounds, a.baseline is not None)
    ratios.update(round_ratios)
    if a.npq:
        ratios["produce_100_vs_pq_sqlite"] = ratio_runs("mqctl_produce_100", "pq_sqlite_b100_produce_100")
    result = {"started": started, "machine": machine, "args": vars(a), "counts": counts, "pipe_big_count": big_n,
              "sync_counts": sync_counts, "medians": med,
              "extra": extra, "ratios": ratios, "peak_rss": rss,
              "rounds": {"sides": round_sides, "runs": rounds, "per_rep": a.rounds,
                         "round_size": a.round_size, "round_batches": a.round_batches}}
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"produce-{started.replace(':', '')}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")

    print(f"\nmqctl produce/consume benchmark, {started}; load {machine['loadavg_start']} -> {machine['loadavg_end']}"
          f" (per repetition: {', '.join(loads)})")
    print(f"N per size: {', '.join(f'{label(k)} {v:,}' for k, v in counts.items())}; sync b100:"
          f" {', '.join(f'{label(k)} {v:,}' for k, v in sync_counts.items())};"
          f" {a.reps} repetitions; input through a pipe; mqctl CRC-32 from {machine['mqctl_crc32']}\n")
    print(f"{'variant':42s} {'median msgs/s':>14s} {'min-max':>20s}")
    for k, v in med.items():
        unit = " B/s" if k.startswith("pagecache") else ""
        print(f"{k:42s} {fmt(v['median']) + unit:>14s} {fmt(v['min']) + '-' + fmt(v['max']):>20s}")
    print()
    for k, v in ratios.items():
        print(f"{k:58s} {v['median']:6.2f}  ({v['min']:.2f}-{v['max']:.2f})")
    if round_sides:
        print(f"\ndurable sends in interleaved rounds ({a.rounds} a repetition; {a.round_size} single sends or"
              f" {a.round_batches} batches of 100 a round): medians of the rounds (min-max)")
        for k, v in round_sides.items():
            m, c = v["msgs_per_s"], v["cpu_us_per_msg"]
            print(f"{k:42s} {fmt(m['median']):>14s} {fmt(m['min']) + '-' + fmt(m['max']):>20s}"
                  + (f"  CPU {c['median']:.1f} us/msg" if c else ""))
    for k in [k for k in extra if "single" in k]:
        us = sorted(e["cpu_us"] for e in extra[k])
        print(f"{'CPU us per send, ' + k:58s} {us[len(us) // 2]:6.1f}  ({us[0]:.1f}-{us[-1]:.1f})")
    if rss:
        print(f"{'peak RSS sending ' + format(a.nrss, ',') + ' messages (target < 200 MB)':58s} {rss['peak_rss_mb']:6.1f} MB"
              f"  ({fmt(rss['msgs_per_s'])} msgs/s)")
    print(f"\nwritten to {out}")


if __name__ == "__main__":
    main()
