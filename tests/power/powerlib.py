"""Power-loss harness for tests/power: mqctl stores on LazyFS, cut at chosen or random moments.

* :class:`LazyFS` — one LazyFS mount (``MNT`` over ``BACKING``), its fault fifo, and the power
  cut of ``tools/lazyfs/README.md``: kill every store process, ``sync``, ``lazyfs::clear-cache``,
  ``fusermount3 -u``, mount again. :meth:`LazyFS.arm_crash` arms a crash at an operation
  (LazyFS kills itself there; :meth:`Power.recover_from_crash` then remounts).
* :class:`Power` — the machine: a ``tests.procs.MQ`` (run, start, kill, check) on
  ``MNT/store`` whose ``mqctl`` runs under ``unshare -m`` with the current boot id bound over
  ``/proc/sys/kernel/random/boot_id`` (a new one after every cut, since the store detects a
  restart by the boot id).
* :class:`Ledger` — what was acknowledged (``send --json`` results, matched to the bodies
  fed in input order), what each group handled (its stdout, kept outside the mount: the
  "remote" side effects that survive the cut), and :meth:`Power.verify`, the invariants that
  must hold after every cut.

Every wait is bounded: a hang is a failure, never a stuck CI job.
"""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import termios
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from tests.procs import MQ, MQCTL, Proc, ready, wait_for

REPO = Path(__file__).resolve().parents[2]
BUILD_SH = REPO.parent / "shared" / "tools" / "lazyfs" / "build.sh"
BOOT_ID = "/proc/sys/kernel/random/boot_id"
_BOOT_WRAP = 'mount --bind "$0" ' + BOOT_ID + ' && exec "$@"'
# A Python program's producer (the store of $MQCTL_STORE): one ``Producer(flush="sync").send``
# per body, each result printed as ``send --json`` prints it once the send has returned.
_API_SENDER = """
import json, sys
import store
topic, tag, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
with store.Producer(flush="sync") as producer:
    for i in range(n):
        r = producer.send(topic, f"{tag}-{i:05d}")
        sys.stdout.write(json.dumps({"status": "SEND_OK", "msgId": r.msg_id, "topic": r.topic,
                                     "queueId": r.queue_id, "queueOffset": r.queue_offset}) + "\\n")
        sys.stdout.flush()
"""


def _mounted(path: Path) -> bool:
    target = str(path)
    try:
        with open("/proc/mounts") as f:
            return any(line.split()[1] == target for line in f if len(line.split()) > 1)
    except OSError:
        return False


class LazyFS:
    """One LazyFS file system: ``base/mnt`` shows ``base/backing`` through LazyFS's cache."""

    def __init__(self, binary: Path, base: Path, cache: str = "128MB") -> None:
        self.binary = binary
        self.base = base
        self.mnt = base / "mnt"
        self.backing = base / "backing"
        self.faults = base / "faults.fifo"
        self.done = base / "done.fifo"
        # LazyFS takes the argument after --config-path for an option when it contains "-o"
        # (strcasestr), as pytest's "pytest-of-root" does: keep the config where it cannot.
        self._cfg_dir = Path(tempfile.mkdtemp(prefix="lazyfs_", dir="/tmp"))
        self.config = self._cfg_dir / "lazyfs.toml"
        assert "-o" not in str(self.config).lower()
        self.boot_file = base / "boot_id"
        self.cache = cache
        self.proc: subprocess.Popen | None = None
        self.log: Path = base / "lazyfs-0.log"
        self.mounts = 0
        self._done_fd: int | None = None

    # -- mount / unmount ---------------------------------------------------------------------
    def start(self) -> None:
        """Mount (again) and start a new "boot": a fresh boot id for every command after."""
        for d in (self.mnt, self.backing):
            d.mkdir(parents=True, exist_ok=True)
        for fifo in (self.faults, self.done):
            if not fifo.exists():
                os.mkfifo(fifo)
        self.config.write_text(
            "[faults]\n"
            f'fifo_path="{self.faults}"\n'
            f'fifo_path_completed="{self.done}"\n'
            "[cache]\napply_eviction=false\n"
            f'[cache.simple]\ncustom_size="{self.cache}"\nblocks_per_page=1\n'
            "[filesystem]\nlog_all_operations=false\n"
            f'logfile="{self.base / "lazyfs-ops.log"}"\n')
        self.boot_file.write_text(str(uuid.uuid4()) + "\n")
        if self._done_fd is None:   # keep a reader (and writer) on the completion fifo
            self._done_fd = os.open(self.done, os.O_RDWR | os.O_NONBLOCK)
        self.mounts += 1
        self.log = self.base / f"lazyfs-{self.mounts}.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [str(self.binary), str(self.mnt), "--config-path", str(self.config),
                 "-o", "modules=subdir", "-o", f"subdir={self.backing}", "-f"],
                cwd=self.binary.parent.parent, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 30
        while not _mounted(self.mnt):
            if self.proc.poll() is not None:
                raise AssertionError(f"LazyFS exited {self.proc.returncode} before mounting: "
                                     f"{self.log.read_text(errors='replace')[-2000:]}")
            if time.monotonic() > deadline:
                raise AssertionError("LazyFS did not mount within 30 s")
            time.sleep(0.02)
        # the fault worker opens its fifo right after mounting; wait until it reads it
        wait_for(lambda: "running LazyFS" in self.log.read_text(errors="replace"), 20,
                 what="LazyFS's fault worker")

    def crashed(self) -> bool:
        """LazyFS killed itself (an armed crash fault fired)."""
        return self.proc is not None and self.proc.poll() is not None

    def stop(self) -> None:
        """Unmount and wait for LazyFS to exit (kill it, by pid, if it does not)."""
        if _mounted(self.mnt):
            r = subprocess.run(["fusermount3", "-u", str(self.mnt)], capture_output=True, timeout=30)
            if r.returncode != 0 and _mounted(self.mnt):
                subprocess.run(["fusermount3", "-u", "-z", str(self.mnt)], capture_output=True,
                               timeout=30)
        if self.proc is not None:
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                try:
                    os.kill(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(timeout=15)
        if _mounted(self.mnt):
            subprocess.run(["umount", "-l", str(self.mnt)], capture_output=True, timeout=30)

    def close(self) -> None:
        try:
            self.stop()
        finally:
            if self._done_fd is not None:
                os.close(self._done_fd)
                self._done_fd = None
            shutil.rmtree(self._cfg_dir, ignore_errors=True)

    # -- fault commands ----------------------------------------------------------------------
    def _log_count(self, marker: str) -> int:
        try:
            return self.log.read_text(errors="replace").count(marker)
        except FileNotFoundError:
            return 0

    def _write_command(self, line: str) -> None:
        deadline = time.monotonic() + 15
        while True:
            try:
                fd = os.open(self.faults, os.O_WRONLY | os.O_NONBLOCK)
                break
            except OSError:   # ENXIO: no reader yet
                if time.monotonic() > deadline or self.crashed():
                    raise AssertionError(f"LazyFS is not reading its fault fifo ({line})") from None
                time.sleep(0.02)
        try:
            os.write(fd, (line + "\n").encode())
            # LazyFS takes one read() as one command: a command written while the last is still
            # in the fifo joins it into one unknown line and both are dropped (a checkpoint not
            # waited for, then a clear-cache that never finishes). Return once it was read.
            read_by = time.monotonic() + 60   # after the command before it ran (a checkpoint)
            while _unread(fd):
                if time.monotonic() > read_by or self.crashed():
                    raise AssertionError(f"LazyFS did not read its command ({line})")
                time.sleep(0.005)
        finally:
            os.close(fd)

    def clear_cache(self) -> None:
        """Drop every unsynced byte; returns when LazyFS says it is done."""
        assert self._done_fd is not None
        try:   # drain stale notices
            while os.read(self._done_fd, 4096):
                pass
        except BlockingIOError:
            pass
        self._write_command("lazyfs::clear-cache")
        got = b""
        deadline = time.monotonic() + 60
        while b"finished::clear-cache" not in got:
            left = deadline - time.monotonic()
            if left <= 0 or self.crashed():
                raise AssertionError("LazyFS did not finish clear-cache")
            if ready(self._done_fd, None, min(left, 0.5))[0]:
                try:
                    got += os.read(self._done_fd, 4096)
                except BlockingIOError:
                    pass

    def checkpoint(self, wait: bool = True) -> None:
        """Write back everything cached, as the kernel's periodic writeback would."""
        before = self._log_count("checkpoint is done")
        self._write_command("lazyfs::cache-checkpoint")
        if wait:
            wait_for(lambda: self._log_count("checkpoint is done") > before or self.crashed(), 60,
                     what="LazyFS cache-checkpoint")

    def arm_crash(self, timing: str, op: str, from_rgx: str) -> str:
        """LazyFS kills itself ``timing`` (before|after) the first ``op`` on a path matching
        ``from_rgx`` (a full match of the path LazyFS sees: start it with ``.*``)."""
        line = f"lazyfs::crash::timing={timing}::op={op}::from_rgx={from_rgx}"
        before_ok = self._log_count("VALID crash fault")
        before_bad = self._log_count("INVALID crash fault")
        self._write_command(line)
        wait_for(lambda: self._log_count("VALID crash fault") > before_ok, 20,
                 what=f"LazyFS to accept {line}")
        assert self._log_count("INVALID crash fault") == before_bad, f"LazyFS refused {line}"
        return line


def _unread(fd: int) -> int:
    """Bytes written to a pipe and not yet read (FIONREAD answers on either end)."""
    return int(struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0])


# -- the machine ---------------------------------------------------------------------------------

def ndjson(data: bytes) -> list[dict]:
    """Complete JSON lines only (a process killed mid-line leaves a torn last line)."""
    out = []
    for line in data.split(b"\n"):
        line = line.strip()
        if not line:
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out


def first_lines(text: str, n: int = 3) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return " | ".join(lines[:n]) if lines else "(no output)"


@dataclass
class Producer:
    """A ``send --json`` process fed from a file; results matched to bodies by position."""
    proc: Proc
    topic: str
    bodies: list[str]
    sync: bool


@dataclass
class Group:
    """A consumer group the test runs; what it handled is its members' stdout (outside)."""
    name: str
    topic: str
    mode: str = "cluster"            # cluster | orderly | broadcast
    client_id: str | None = None     # broadcast: the client whose offsets file is checked
    outputs: list[Path] = field(default_factory=list)

    def flags(self) -> list[str]:
        f = ["--orderly"] if self.mode == "orderly" else []
        if self.mode == "broadcast":
            f += ["--broadcast", "--client-id", self.client_id or f"{self.name}-client"]
        return f

    def handled(self) -> dict[str, dict]:
        got: dict[str, dict] = {}
        for path in self.outputs:
            if path.exists():
                for env in ndjson(path.read_bytes()):
                    got[env["msgId"]] = env
        return got


@dataclass
class Ledger:
    acked: dict[str, dict] = field(default_factory=dict)       # msgId -> result + body (sync)
    async_acked: dict[str, dict] = field(default_factory=dict)  # msgId -> result + body (async)
    bodies: set[str] = field(default_factory=set)               # every body ever fed

    def record(self, results: list[dict], bodies: list[str], sync: bool) -> list[dict]:
        assert len(results) <= len(bodies), "more results than messages sent"
        out = []
        for res, body in zip(results, bodies):
            assert res.get("status") == "SEND_OK", res
            entry = dict(res, body=body)
            (self.acked if sync else self.async_acked)[res["msgId"]] = entry
            out.append(entry)
        return out


class Power(MQ):
    """The machine under test: a LazyFS mount, the store on it, the processes using it. An
    :class:`procs.MQ` whose every ``mqctl`` runs in a mount namespace of its own with this
    boot's id bound over ``/proc/sys/kernel/random/boot_id``."""

    def __init__(self, fs: LazyFS, work: Path) -> None:
        super().__init__(fs.mnt / "store", work, cwd=work)
        self.fs = fs
        self.ledger = Ledger()
        self.groups: dict[str, Group] = {}
        self.cuts = 0
        self._verify_n = 0

    def argv(self, *args: str) -> list[str]:
        return ["unshare", "-m", "--", "sh", "-c", _BOOT_WRAP, str(self.fs.boot_file),
                *MQCTL, *args]

    def where(self) -> str:
        return f" (after {self.cuts} cuts)"

    # -- power ------------------------------------------------------------------------------
    def power_cut(self) -> None:
        """README's procedure: kill everything, sync, drop the unsynced bytes, remount with a
        new boot id."""
        self.kill_all()
        os.sync()
        self.fs.clear_cache()
        self.fs.stop()
        self.fs.start()
        self.cuts += 1

    def recover_from_crash(self) -> None:
        """After an armed crash fault fired (LazyFS is gone with its cache): reboot."""
        self.kill_all()
        self.fs.stop()
        self.fs.start()
        self.cuts += 1

    # -- producing ---------------------------------------------------------------------------
    def bodies(self, tag: str, n: int) -> list[str]:
        out = [f"{tag}-{i:05d}" for i in range(n)]
        self.ledger.bodies.update(out)
        return out

    def send(self, topic: str, bodies: list[str], sync: bool = True, *extra: str) -> list[dict]:
        """Send to completion; every result is acknowledged."""
        cp = self.ok("send", topic, "--json", "--flush", "sync" if sync else "async", *extra,
                     input="".join(b + "\n" for b in bodies))
        results = ndjson(cp.stdout)
        assert len(results) == len(bodies), f"send printed {len(results)} results for {len(bodies)}"
        return self.ledger.record(results, bodies, sync)

    def start_producer(self, topic: str, tag: str, n: int, sync: bool = True,
                       batch: int = 16) -> Producer:
        bodies = self.bodies(tag, n)
        src = self.work / f"{tag}.in"
        src.write_text("".join(b + "\n" for b in bodies))
        with open(src, "rb") as fin:
            proc = self.start("send", topic, "--json", "--flush", "sync" if sync else "async",
                              "--batch-size", str(batch), stdin=fin)
        return Producer(proc, topic, bodies, sync)

    def start_api_producer(self, topic: str, tag: str, n: int) -> Producer:
        """A Python program sending ``n`` bodies with single ``Producer(flush="sync").send``
        calls (the bodies of :meth:`bodies`), each result printed once its send returned."""
        bodies = self.bodies(tag, n)
        name = self.fresh("api")
        with open(self.work / f"{name}.out", "ab") as fout, open(self.work / f"{name}.err", "wb") as ferr:
            p = subprocess.Popen(["unshare", "-m", "--", "sh", "-c", _BOOT_WRAP, str(self.fs.boot_file),
                                  sys.executable, "-c", _API_SENDER, topic, tag, str(n)],
                                 stdin=subprocess.DEVNULL, stdout=fout, stderr=ferr, env=self.environ(),
                                 cwd=self.cwd)
        proc = Proc(p, self.work / f"{name}.out", self.work / f"{name}.err", ["api-send", topic, tag])
        self.procs.append(proc)
        return Producer(proc, topic, bodies, True)

    def collect(self, producers: Iterable[Producer]) -> int:
        """Record what producers printed (call after they exited or were killed)."""
        n = 0
        for p in producers:
            n += len(self.ledger.record(ndjson(p.proc.stdout()), p.bodies, p.sync))
        return n

    # -- consuming ---------------------------------------------------------------------------
    def group(self, name: str, topic: str, mode: str = "cluster") -> Group:
        g = Group(name, topic, mode, client_id=f"{name}-client" if mode == "broadcast" else None)
        self.groups[name] = g
        return g

    def _out(self, g: Group) -> Path:
        path = self.work / f"{self.fresh(g.name + '.')}.out"
        g.outputs.append(path)
        return path

    def start_consumer(self, g: Group, *extra: str) -> Proc:
        return self.start("consume", g.topic, "-g", g.name, "--from", "first", "--json",
                          *g.flags(), *extra, out=self._out(g))

    def drain_group(self, g: Group, timeout: float = 60.0, check: bool = True) -> list[dict]:
        """Run the group to the end of its queues (-e); returns what this run delivered."""
        path = self._out(g)
        cp = self.run("consume", g.topic, "-g", g.name, "--from", "first", "-e", "--json",
                      *g.flags(), timeout=timeout)
        path.write_bytes(cp.stdout)
        assert not check or cp.returncode == 0, (f"consume -g {g.name} ({g.mode}) exited {cp.returncode} "
                                    f"after {self.cuts} cuts: {first_lines(cp.stderr)}")
        return ndjson(cp.stdout)

    def read_topic(self, topic: str) -> list[dict]:
        """Every message of the topic, via a fresh group (a consumer that hangs fails)."""
        self._verify_n += 1
        return self.drain(topic, f"verify{self._verify_n}", timeout=90)

    def status(self, topic: str) -> dict[int, dict]:
        cp = self.ok("topic", "status", topic, "--json")
        return {row["queueId"]: row for row in ndjson(cp.stdout)}

    def committed(self, g: Group) -> dict[int, int]:
        if g.mode == "broadcast":
            return {}
        cp = self.run("offsets", "show", "-g", g.name, "--topic", g.topic, "--json")
        if cp.returncode == 3:   # the group has no offsets (lost with the cut, or never made)
            return {}
        assert cp.returncode == 0, f"offsets show -g {g.name}: {first_lines(cp.stderr)}"
        return {row["queueId"]: row["offset"] for row in ndjson(cp.stdout)}

    # -- the invariants ----------------------------------------------------------------------
    def reopen(self) -> None:
        """The first command after a cut, as a user's would be: any command that opens the
        store recovers it (``store check`` only reads, so it comes after)."""
        self.ok("topic", "list", "--json", timeout=90)

    def verify(self, topics: Iterable[str], *, retained_from: dict | None = None) -> dict[str, list[dict]]:
        """After a cut: the store opens by itself and is clean; every sync-acknowledged message
        is there exactly once with its id and body; queue offsets are dense up to maxOffset;
        no message is foreign; no group's committed offset is past a message it never handled.
        ``retained_from``: {topic: {queueId: minOffset}} below which retention may have deleted.
        Returns the messages read, per topic."""
        where = f"after cut {self.cuts}"
        self.reopen()
        self.check_clean()
        got: dict[str, list[dict]] = {}
        for topic in topics:
            msgs = self.read_topic(topic)
            got[topic] = msgs
            status = self.status(topic)
            by_id: dict[str, list[dict]] = {}
            per_queue: dict[int, list[int]] = {}
            for m in msgs:
                by_id.setdefault(m["msgId"], []).append(m)
                per_queue.setdefault(m["queueId"], []).append(m["queueOffset"])
                assert m["body"] in self.ledger.bodies, f"{where}: foreign message {m}"
            for q, offs in per_queue.items():
                offs.sort()
                assert len(offs) == len(set(offs)), f"{where}: {topic} queue {q} repeats offsets"
                lo = offs[0]
                assert offs == list(range(lo, lo + len(offs))), (
                    f"{where}: {topic} queue {q} offsets not dense: "
                    f"{sorted(set(range(lo, offs[-1] + 1)) - set(offs))[:10]} missing")
            for q, row in status.items():
                n = len(per_queue.get(q, []))
                if row["maxOffset"] > row["minOffset"]:
                    end = max(per_queue.get(q, [row["minOffset"] - 1])) + 1
                    assert end == row["maxOffset"], (
                        f"{where}: {topic} queue {q}: consumer read {n} messages up to offset "
                        f"{end}, but topic status says maxOffset {row['maxOffset']} "
                        f"(minOffset {row['minOffset']})")
            missing, changed, dup = [], [], []
            for mid, ack in self.ledger.acked.items():
                if ack["topic"] != topic:
                    continue
                if retained_from is not None:
                    floor = retained_from.get(topic, {}).get(ack["queueId"], 0)
                    if ack["queueOffset"] < floor:
                        continue
                found = by_id.get(mid, [])
                if not found:
                    missing.append(ack)
                elif len(found) > 1:
                    dup.append(mid)
                elif found[0]["body"] != ack["body"]:
                    changed.append((ack, found[0]))
            assert not missing, (
                f"{where}: {len(missing)} sync-acknowledged messages of {topic} lost, e.g. "
                f"{[(a['body'], a['queueId'], a['queueOffset']) for a in missing[:5]]}")
            assert not dup, f"{where}: acknowledged messages present more than once: {dup[:5]}"
            assert not changed, f"{where}: acknowledged message changed: {changed[:3]}"
        for g in self.groups.values():
            if g.topic not in got:
                continue
            self.check_not_skipped(g, got[g.topic])
        return got

    def check_not_skipped(self, g: Group, msgs: list[dict]) -> None:
        """No committed offset of ``g`` points past a surviving message it never handled."""
        committed = self.committed(g)
        if not committed:
            return
        handled = g.handled()
        skipped = [m for m in msgs
                   if m["queueOffset"] < committed.get(m["queueId"], 0) and m["msgId"] not in handled]
        assert not skipped, (
            f"after cut {self.cuts}: group {g.name} ({g.mode}) committed offsets {committed} past "
            f"{len(skipped)} messages it never handled, e.g. "
            f"{[(m['body'], m['queueId'], m['queueOffset']) for m in skipped[:5]]}")

    def send_after_cut_and_deliver(self, topics: Iterable[str], n: int = 24) -> None:
        """New sync messages to every topic; every group must deliver all of them."""
        k = self.fresh("")
        fresh: dict[str, set[str]] = {}
        for topic in topics:
            acked = self.send(topic, self.bodies(f"after{self.cuts}-{topic}-{k}", n))
            fresh[topic] = {a["msgId"] for a in acked}
        for g in self.groups.values():
            if g.topic not in fresh:
                continue
            delivered = {m["msgId"] for m in self.drain_group(g)}
            lost = fresh[g.topic] - delivered
            assert not lost, (
                f"after cut {self.cuts}: group {g.name} ({g.mode}) did not deliver {len(lost)} of "
                f"{len(fresh[g.topic])} messages sent after the cut (committed "
                f"{self.committed(g)}, status {self.status(g.topic)})")


def find_lazyfs() -> tuple[Path | None, str]:
    """Build (or find) LazyFS; (binary, "") or (None, why not)."""
    if not Path("/dev/fuse").exists():
        return None, "no /dev/fuse: LazyFS needs FUSE"
    if os.geteuid() != 0:
        return None, "not root: LazyFS tests mount FUSE and bind-mount the boot id"
    for tool in ("unshare", "sh"):
        if shutil.which(tool) is None:
            return None, f"{tool} is missing"
    if not BUILD_SH.exists():
        return None, f"{BUILD_SH} not found"
    try:
        cp = subprocess.run(["bash", str(BUILD_SH)], capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        return None, "LazyFS build took more than 15 minutes"
    if cp.returncode != 0:
        tail = first_lines("\n".join(cp.stderr.strip().splitlines()[-5:]), 5)
        lacking = [t for t in ("g++", "cmake", "fusermount3") if shutil.which(t) is None]
        if not Path("/usr/include/fuse3/fuse.h").exists():
            lacking.append("libfuse3-dev")
        if lacking:
            return None, f"LazyFS cannot be built: {', '.join(lacking)} missing ({tail})"
        raise RuntimeError(f"LazyFS build failed: {tail}")
    binary = Path(cp.stdout.strip().splitlines()[-1])
    if not binary.exists() or shutil.which("fusermount3") is None:
        return None, "LazyFS build produced no binary or fusermount3 is missing"
    return binary, ""
