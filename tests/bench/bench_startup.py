"""Shell speed: start-up of one-message commands, many small producers, wake-up
latency of a waiting consumer, and what an idle consumer costs. A benchmark, not a test.

    .venv/bin/python tests/bench/bench_startup.py [--runs 30] [--idle-seconds 60] [--quick]

In one run:

1. Start-up, one process per command (hyperfine ``-N`` when installed, else an interleaved
   loop; median and min of ``--runs``): ``python -c pass`` (the floor), the one-command Typer
   app of ``tests/bench/typer_baseline.py`` (the yardstick: flock + one framed append),
   ``mqctl send t hello`` (target <= 1.0x the Typer app), ``mqctl --help`` (<= 1.2x) and
   ``redis-cli XADD`` (the peer).
2. Many small producers: 1,000 single-message sends through ``xargs -P4 -n1``: messages per
   second of ``mqctl send``, the Typer app, and ``redis-cli XADD`` in the same loop.
3. End-to-end latency: 200 messages sent one at a time (a pause between them, so the consumer
   is waiting each time) to a consumer in follow mode; store timestamp (ms) -> the line on the
   consumer's stdout (target p50 <= 2 ms, p99 <= 10 ms); the same for ``--exec`` (the
   handler's start: ``exec`` a bash script reading ``$EPOCHREALTIME``, ``exec-bin`` a compiled
   handler reading the clock first thing in ``main``, without a shell's own start-up) and for an ``--orderly`` consumer; Redis Streams ``XREADGROUP BLOCK`` as
   the peer (entry id ms -> line); and the floor, ``tests/bench/wake_floor.c`` compiled here:
   a C consumer of the same store that waits as mqctl's does (inotify on the store directory,
   the ``checkpoint`` file's change), reads the new consume-queue entries and records and
   writes one JSON line per wake-up, nothing else. Both timestamps are whole milliseconds
   taken by the server/store, so every side carries the same 0-1 ms rounding; every line is
   stamped on arrival by the same reader thread of this process. For mqctl the latency from
   the start of ``put`` (ns) is given too. ``--rounds N`` repeats every mode (``--modes``,
   in that order: by default the floor, Redis, ``--json``, ``--orderly``, ``--exec``), one of
   each per round, and reports the median of each round's p50/p99, and each side's p99
   divided by the floor's of the same round (median of the rounds); ``--hogs N`` runs N CPU
   hogs (``yes > /dev/null``) beside them all (targets on a busy machine: p99 <= 10 ms for
   stdout and orderly, <= 15 ms for ``--exec``); ``--baseline DIR`` (a copy of an older ``mqctl``/``store``
   tree, put first on ``PYTHONPATH``) runs it too, interleaved with this tree, round by round.
4. CPU seconds used by an idle follow-mode consumer over ``--idle-seconds`` (target < 0.05).

``redis-server``/``redis-cli`` are installed with apt-get when missing; the Redis consumer
runs in ``.bench-venv`` (redis-py, see bench_produce.py), never in the project's venv
(portalocker would import redis-py there). Results: ``bench-results/startup-<UTC>.json``.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench_produce import RedisServer  # (run as a script: tests/bench/ is on sys.path)
from floors import compile_floor
from hogs import cpu_hogs, loadavg

REPO = Path(__file__).resolve().parents[2]
BENCH_VENV = REPO / ".bench-venv"
RESULTS = REPO / "bench-results"
PY = sys.executable
MQCTL = str(Path(PY).parent / "mqctl")
BASELINE = str(REPO / "tests" / "bench" / "typer_baseline.py")


def log(msg: str) -> None:
    sys.stderr.write(f"[bench {time.strftime('%H:%M:%S')}] {msg}\n")
    sys.stderr.flush()


def pct(values: list[float], p: float) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, max(0, round(p / 100 * (len(v) - 1))))]


# -- redis -----------------------------------------------------------------------------------

def ensure_redis() -> tuple[str, str]:
    if not (shutil.which("redis-server") and shutil.which("redis-cli")):
        log("installing redis-server with apt-get")
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "update", "-q"], env=env, stdout=subprocess.DEVNULL, check=True)
        subprocess.run(["apt-get", "install", "-y", "-q", "--no-install-recommends", "redis-server"],
                       env=env, stdout=subprocess.DEVNULL, check=True)
    return shutil.which("redis-server") or "redis-server", shutil.which("redis-cli") or "redis-cli"


def bench_python() -> str | None:
    py = BENCH_VENV / "bin" / "python"
    if not py.exists():
        log(f"creating {BENCH_VENV} with redis")
        subprocess.run([getattr(sys, "_base_executable", PY), "-m", "venv", str(BENCH_VENV)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", "redis", "hiredis"], check=True)
    ok = subprocess.run([str(py), "-c", "import redis"], capture_output=True).returncode == 0
    return str(py) if ok else None


# -- 1. start-up -----------------------------------------------------------------------------

def startup(cmds: dict[str, str], runs: int, env: dict[str, str]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    if shutil.which("hyperfine"):
        tmp = Path(tempfile.mkstemp(suffix=".json")[1])
        args = ["hyperfine", "-N", "--warmup", "3", "--runs", str(runs), "--export-json", str(tmp)]
        for name, c in cmds.items():
            args += ["-n", name, c]
        subprocess.run(args, env=env, check=True, stdout=subprocess.DEVNULL)
        for r in json.loads(tmp.read_text())["results"]:
            out[r["command"]] = {"median_ms": r["median"] * 1000, "min_ms": r["min"] * 1000, "tool": "hyperfine"}
        return out
    times: dict[str, list[float]] = {n: [] for n in cmds}
    for _ in range(3):   # warm-up
        for c in cmds.values():
            subprocess.run(c, shell=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(runs):   # interleaved, so load changes hit every command alike
        for n, c in cmds.items():
            t = time.perf_counter()
            subprocess.run(c, shell=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            times[n].append((time.perf_counter() - t) * 1000)
    # the shell's own cost, measured the same way, is subtracted from every command
    sh = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run("exec true", shell=True, stdout=subprocess.DEVNULL)
        sh.append((time.perf_counter() - t) * 1000)
    base = statistics.median(sh)
    for n, v in times.items():
        out[n] = {"median_ms": statistics.median(v) - base, "min_ms": min(v) - min(sh), "tool": "loop"}
    return out


# -- 2. many small producers ---------------------------------------------------------------------

def xargs_rate(cmd: str, n: int, env: dict[str, str]) -> float:
    t = time.perf_counter()
    subprocess.run(f"seq {n} | xargs -P4 -n1 {cmd}", shell=True, env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return n / (time.perf_counter() - t)


# -- 3. end-to-end latency ---------------------------------------------------------------------------

class LineReader(threading.Thread):
    """Reads a process's stdout lines, stamping each with time.time_ns() on arrival."""

    def __init__(self, stream) -> None:  # type: ignore[no-untyped-def]
        super().__init__(daemon=True)
        self.stream = stream
        self.lines: list[tuple[int, bytes]] = []
        self.start()

    def run(self) -> None:
        for line in iter(self.stream.readline, b""):
            self.lines.append((time.time_ns(), line))


def wait_lines(reader: LineReader, n: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while len(reader.lines) < n and time.monotonic() < deadline:
        time.sleep(0.0005)
    return len(reader.lines) >= n


HANDLER_C = r"""
#include <stdio.h>
#include <time.h>
int main(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    char body[256];
    size_t n = fread(body, 1, sizeof body - 1, stdin);
    body[n] = 0;
    FILE *f = fopen(MARKS, "a");
    if (!f) return 1;
    fprintf(f, "%lld %s\n", (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec, body);
    return fclose(f) != 0;
}
"""


def mq_latency(store: Path, mode: str, n: int, gap: float, env: dict[str, str], tmp: Path,
               floor_exe: Path | None = None) -> dict:
    """``mode``: stdout (``--json``), exec (handler start), orderly (``--orderly --json``) or
    floor (``floor_exe``, the C consumer of ``wake_floor.c``, on the same kind of topic as
    stdout's: 4 queues, messages spread over them)."""
    import store as mq
    topic = f"lat-{mode}"
    with mq.Store.open(store, create=True) as st:
        st.create_topic(topic, 4, order=(mode == "orderly"))
    args = [MQCTL, "--store", str(store), "consume", topic, "-g", f"g-{mode}", "--from", "last"]
    marks = tmp / f"exec-{mode}.txt"
    if mode == "floor":
        assert floor_exe is not None
        args = [str(floor_exe), str(store), topic, "4"]
    elif mode == "exec-bin":
        # The handler's start in the strict sense: a compiled handler reads the clock first
        # thing in main(), so a shell's own start-up (about 1 ms for bash) is not counted.
        handler = tmp / "handler-bin"
        src = tmp / "handler.c"
        src.write_text(HANDLER_C.replace("MARKS", json.dumps(str(marks))))
        subprocess.run([shutil.which("cc") or "cc", "-O2", "-o", str(handler), str(src)], check=True)
        args += ["--exec", str(handler)]
    elif mode == "exec":
        handler = tmp / "handler.sh"
        if shutil.which("bash"):   # $EPOCHREALTIME: the start time without forking date(1)
            handler.write_text(f"#!{shutil.which('bash')}\nt=${{EPOCHREALTIME/[.,]/}}000\n"
                               f"printf '%s %s\\n' \"$t\" \"$(cat)\" >> {marks}\n")
        else:
            handler.write_text(f"#!/bin/sh\nt=$(date +%s%N)\nprintf '%s %s\\n' \"$t\" \"$(cat)\" >> {marks}\n")
        handler.chmod(0o755)
        args += ["--exec", str(handler)]
    else:
        args += ["--json"] + (["--orderly"] if mode == "orderly" else [])
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    reader = LineReader(proc.stdout)
    if mode == "floor":
        wait_lines(reader, 1)   # its "ready": watching, and the queues' ends taken
    try:
        # warm up until the consumer holds its queues and delivers
        with mq.Producer(path=store) as prod:
            got = 0
            for i in range(200):
                prod.send(topic, b"warm", sharding_key=str(i) if mode == "orderly" else None)
                time.sleep(0.05)
                got = len(reader.lines) if not mode.startswith("exec") else (len(marks.read_text().splitlines()) if marks.exists() else 0)
                if got:
                    break
            time.sleep(1.5)
            base = len(reader.lines) if not mode.startswith("exec") else len(marks.read_text().splitlines())
            sent: dict[str, tuple[int, int]] = {}
            for i in range(n):
                body = f"m{i}"
                t0 = time.time_ns()
                r = prod.send(topic, body.encode(), sharding_key=str(i) if mode == "orderly" else None)
                sent[body] = (t0, r.store_timestamp if hasattr(r, "store_timestamp") else 0)
                time.sleep(gap)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            have = len(reader.lines) if not mode.startswith("exec") else len(marks.read_text().splitlines())
            if have >= base + n:
                break
            time.sleep(0.01)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    from_store, from_put = [], []
    if mode.startswith("exec"):
        rows = [(int(a), b.strip().encode()) for a, _, b in
                (line.partition(" ") for line in marks.read_text().splitlines()[base:])]
    else:
        rows = [(t, json.loads(line)["body"].encode()) for t, line in reader.lines[base:]
                if line.startswith(b"{")]
    for t_ns, body in rows:
        key = body.decode()
        if key not in sent:
            continue
        t0, sts = sent[key]
        from_put.append((t_ns - t0) / 1e6)
        if sts:
            from_store.append(t_ns / 1e6 - sts)
    res = summarize(from_store, n) | {"from_put": summarize(from_put, n)}
    if mode == "floor":   # its own clock, before its write: the wait alone, without the pipe and reader
        own = [json.loads(line)["latencyUs"] / 1000 for _t, line in reader.lines[base:] if line.startswith(b"{")]
        res["own"] = summarize(own, n)
    return res


def latency_rounds(store: Path, a: argparse.Namespace, env: dict[str, str], work: Path,
                   redis: RedisServer | None = None, rpy: str | None = None) -> dict:
    """Every mode of ``--modes``, in its order, ``--rounds`` times (so load changes hit all
    alike); mqctl's modes for this tree and ``--baseline`` alternately. Per mode: the median of
    the rounds' p50 and p99, and of each round's p99 over the floor's p99 in that round."""
    trees = {"": env}
    if a.baseline is not None:
        trees[" [baseline]"] = dict(env, PYTHONPATH=str(a.baseline.resolve()))
    modes = [m for m in a.modes.split(",") if m]
    floor_exe = compile_floor("wake_floor", work, log) if "floor" in modes else None
    runs: dict[str, list[dict]] = {}
    for r in range(a.rounds):
        for mode in modes:
            if mode == "redis":
                if redis is not None and rpy is not None:
                    log(f"latency: redis XREADGROUP BLOCK, {a.messages} messages, round {r + 1}/{a.rounds}")
                    runs.setdefault(REDIS, []).append(
                        redis_latency(rpy, redis, a.messages, a.gap) | {"from_put": {"received": 0}})
                continue
            if mode == "floor":
                if floor_exe is not None:
                    log(f"latency: C floor (wake_floor.c), {a.messages} messages, round {r + 1}/{a.rounds}")
                    d = work / f"lat{r}-floor"
                    d.mkdir()
                    runs.setdefault(FLOOR, []).append(
                        mq_latency(work / f"store{r}", "floor", a.messages, a.gap, env, d, floor_exe))
                continue
            for tag, tenv in (trees.items() if r % 2 == 0 else reversed(trees.items())):
                log(f"latency: mqctl consume ({mode}){tag}, {a.messages} messages, round {r + 1}/{a.rounds}")
                d = work / f"lat{r}-{mode}{'-base' if tag else ''}"
                d.mkdir()
                runs.setdefault(f"mqctl {mode}{tag}", []).append(
                    mq_latency(work / f"store{r}{'-base' if tag else ''}", mode, a.messages, a.gap, tenv, d))
    floor_p99 = [x.get("p99_ms") if x.get("received") else None for x in runs.get(FLOOR, [])]
    out = {}
    for name, rs in runs.items():
        ok = [x for x in rs if x.get("received")]
        if not ok:
            out[name] = rs[0]
            continue
        med = {k: statistics.median(x[k] for x in ok) for k in ("p50_ms", "p99_ms", "max_ms")}
        fp = [x["from_put"] for x in ok if x["from_put"].get("received")]
        x_floor = [x["p99_ms"] / f for x, f in zip(rs, floor_p99) if x.get("received") and f]
        out[name] = {"received": sum(x["received"] for x in ok), "sent": sum(x["sent"] for x in rs),
                     "rounds": len(rs), **med,
                     "from_put": {"received": sum(x["received"] for x in fp),
                                  **{k: statistics.median(x[k] for x in fp) for k in ("p50_ms", "p99_ms")}}
                     if fp else {"received": 0},
                     "per_round_p50": [round(x["p50_ms"], 2) for x in ok],
                     "per_round_p99": [round(x["p99_ms"], 2) for x in ok]}
        if x_floor:
            out[name]["p99_x_floor"] = statistics.median(x_floor)
        own = [x["own"] for x in ok if x.get("own", {}).get("received")]
        if own:
            out[name]["own"] = {k: statistics.median(x[k] for x in own) for k in ("p50_ms", "p99_ms", "max_ms")}
    return out


REDIS = "redis XREADGROUP BLOCK"
FLOOR = "C floor (wake_floor.c)"


def summarize(lat: list[float], n: int) -> dict:
    if not lat:
        return {"received": 0, "sent": n}
    return {"received": len(lat), "sent": n, "p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99), "max_ms": max(lat)}


REDIS_CONSUMER = r"""
import sys, time, redis
r = redis.Redis(port=int(sys.argv[1]))
try:
    r.xgroup_create("lat", "g", id="$", mkstream=True)
except redis.ResponseError:
    pass
print("ready", flush=True)
while True:
    for _s, entries in r.xreadgroup("g", "c", {"lat": ">"}, count=1, block=0):
        for eid, _f in entries:
            print(eid.decode(), flush=True)
            r.xack("lat", "g", eid)
"""


def redis_latency(rpy: str, redis: RedisServer, n: int, gap: float) -> dict:
    proc = subprocess.Popen([rpy, "-c", REDIS_CONSUMER, str(redis.port)], stdout=subprocess.PIPE)
    reader = LineReader(proc.stdout)
    try:
        wait_lines(reader, 1)
        with socket.create_connection(("127.0.0.1", redis.port)) as c:
            f = c.makefile("rb")
            for i in range(n):
                c.sendall(f"XADD lat * i {i}\r\n".encode())
                f.readline()   # $len
                f.readline()   # the id
                time.sleep(gap)
        wait_lines(reader, n + 1)
    finally:
        proc.kill()
        proc.wait()
    lat = [t / 1e6 - int(line.split(b"-")[0]) for t, line in reader.lines[1:]]
    return summarize(lat, n)


# -- 4. idle CPU ---------------------------------------------------------------------------------------

def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / tick   # utime + stime


def idle_cpu(store: Path, seconds: float, env: dict[str, str]) -> dict:
    import store as mq
    with mq.Store.open(store, create=True) as st:
        st.create_topic("idle", 4)
    proc = subprocess.Popen([MQCTL, "--store", str(store), "consume", "idle", "-g", "idle", "--json"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        time.sleep(3)   # start-up and first rebalance done
        c0 = cpu_seconds(proc.pid)
        time.sleep(seconds)
        c1 = cpu_seconds(proc.pid)
        if proc.poll() is not None:
            raise SystemExit(f"the idle consumer exited ({proc.returncode})")
    finally:
        proc.terminate()
        proc.wait(timeout=15)
    return {"seconds": seconds, "cpu_s": round(c1 - c0, 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--sends", type=int, default=1000)
    ap.add_argument("--messages", type=int, default=200)
    ap.add_argument("--gap", type=float, default=0.02, help="pause between latency messages (s)")
    ap.add_argument("--rounds", type=int, default=1, help="latency runs per mqctl mode (median of each)")
    ap.add_argument("--baseline", type=Path, default=None,
                    help="a directory with an older mqctl/ and store/: latency measured for it too, interleaved")
    ap.add_argument("--modes", default="floor,redis,stdout,orderly,exec,exec-bin",
                    help="latency modes, run in this order every round: floor (wake_floor.c), redis, and"
                         " mqctl's stdout, orderly, exec, exec-bin (floor and exec-bin need a C compiler)")
    ap.add_argument("--idle-seconds", type=float, default=60.0)
    ap.add_argument("--quick", action="store_true", help="fewer runs, 10 s idle: a smoke run")
    ap.add_argument("--hogs", type=int, default=0,
                    help="CPU hogs (yes > /dev/null) running beside the latency runs, mqctl's and Redis's alike")
    ap.add_argument("--skip", default="", help="comma list of parts to skip: startup,xargs,latency,idle")
    a = ap.parse_args()
    if a.quick:
        a.runs, a.sends, a.messages, a.idle_seconds = 10, 200, 50, 10.0
    skip = set(filter(None, a.skip.split(",")))
    import compileall
    for pkg in ("mqctl", "store"):   # PYTHONDONTWRITEBYTECODE: compile once, as tests/conftest.py
        compileall.compile_dir(REPO / pkg, quiet=1)
    work = Path(tempfile.mkdtemp(prefix="bench-startup-"))
    store = work / "store"
    env = dict(os.environ, MQCTL_STORE=str(store), NO_COLOR="1")
    env.pop("MQCTL_FAILPOINTS", None)
    subprocess.run([MQCTL, "init"], env=env, check=True, stdout=subprocess.DEVNULL)
    subprocess.run([MQCTL, "send", "t", "hello"], env=env, check=True, stderr=subprocess.DEVNULL)
    server, cli = ensure_redis()
    redis = RedisServer(server, work, "everysec")
    res: dict = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "python": sys.version.split()[0]}
    try:
        if "startup" not in skip:
            cmds = {
                "python -c pass": f"{PY} -c pass",
                "typer app (flock + 1 append)": f"{PY} {BASELINE} t hello --dir {work / 'tb'}",
                "mqctl send t hello": f"{MQCTL} send t hello",
                "mqctl --help": f"{MQCTL} --help",
                "redis-cli XADD": f"{cli} -p {redis.port} XADD s '*' f hello",
            }
            log(f"start-up: {len(cmds)} commands x {a.runs} runs")
            st = startup(cmds, a.runs, env)
            base = st["typer app (flock + 1 append)"]["median_ms"]
            for v in st.values():
                v["x_typer_app"] = v["median_ms"] / base
            res["startup"] = st
        if "xargs" not in skip:
            log(f"xargs -P4 -n1: {a.sends} single-message sends each")
            res["xargs"] = {
                "mqctl send": xargs_rate(f"{MQCTL} send t", a.sends, env),
                "typer app": xargs_rate(f"{PY} {BASELINE} t --dir {work / 'tb2'}", a.sends, env),
                "redis-cli XADD": xargs_rate(f"{cli} -p {redis.port} XADD s '*' f", a.sends, env),
            }
        if "latency" not in skip:
            rpy = bench_python()
            with cpu_hogs(a.hogs):
                res["latency_load"] = {"hogs": a.hogs, "load_start": loadavg()}
                res["latency"] = latency_rounds(store, a, env, work, redis if rpy else None, rpy)
                res["latency_load"]["load_end"] = loadavg()
        if "idle" not in skip:
            log(f"idle consumer: {a.idle_seconds:g} s")
            res["idle"] = idle_cpu(store, a.idle_seconds, env)
    finally:
        redis.stop()
        shutil.rmtree(work, ignore_errors=True)
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"startup-{time.strftime('%Y-%m-%dT%H%M%SZ', time.gmtime())}.json"
    out.write_text(json.dumps(res, indent=2))
    report(res)
    log(f"results: {out}")


def report(res: dict) -> None:
    if "startup" in res:
        print("\nStart-up (ms; x = median / the Typer app's median)")
        for name, v in res["startup"].items():
            print(f"  {name:32s} median {v['median_ms']:7.1f}  min {v['min_ms']:7.1f}  {v['x_typer_app']:5.2f}x  [{v['tool']}]")
    if "xargs" in res:
        print("\nxargs -P4 -n1, single-message sends (messages/s)")
        for name, v in res["xargs"].items():
            print(f"  {name:32s} {v:8.1f}")
    if "latency" in res:
        ld = res.get("latency_load", {})
        print(f"\nEnd-to-end latency, store timestamp -> consumer output (ms); {ld.get('hogs', 0)} CPU hogs,"
              f" load {ld.get('load_start', '?')} -> {ld.get('load_end', '?')}")
        for name, v in res["latency"].items():
            if not v.get("received"):
                print(f"  {name:32s} nothing received")
                continue
            extra = ""
            if "from_put" in v and v["from_put"].get("received"):
                fp = v["from_put"]
                extra = f"   (from put: p50 {fp['p50_ms']:.2f} p99 {fp['p99_ms']:.2f})"
            if name.endswith(" [baseline]") and name[:-11] in res["latency"]:
                cur = res["latency"][name[:-11]]
                if cur.get("received"):
                    extra += f"   this tree / baseline: p50 {cur['p50_ms'] / v['p50_ms']:.2f}x"
            if "own" in v:
                extra += f"   (its own clock before its write: p50 {v['own']['p50_ms']:.2f} p99 {v['own']['p99_ms']:.2f})"
            if "p99_x_floor" in v and name != FLOOR:
                extra = f"   p99 / floor's {v['p99_x_floor']:.2f}x" + extra
            print(f"  {name:32s} p50 {v['p50_ms']:6.2f}  p99 {v['p99_ms']:7.2f}  max {v['max_ms']:7.2f}  "
                  f"({v['received']}/{v['sent']}){extra}")
    if "idle" in res:
        print(f"\nIdle consumer: {res['idle']['cpu_s']:.3f} CPU s in {res['idle']['seconds']:g} s (target < 0.05)")


if __name__ == "__main__":
    main()
