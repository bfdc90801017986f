"""``mqctl bench produce|consume``: the built-in benchmark (its loops: ``mqctl/benchrun.py``).

Both run against a throwaway store created in a temporary directory (``--dir`` chooses where:
put it on the disk you care about; a tmpfs measures memory, not the disk) and removed
afterwards, so a benchmark never leaves data in a real store.
"""
from __future__ import annotations

import json as jsonlib
import statistics
import sys
from typing import Annotated, Any, Literal, Optional

import typer

from mqctl.options import JsonOpt

bench_app = typer.Typer(help="Built-in benchmarks (on a throwaway store).", no_args_is_help=True)

MIB = 1024 * 1024
SizeOpt = Annotated[int, typer.Option("--size", metavar="BYTES", min=1, help="Body size in bytes.")]
QueuesOpt = Annotated[int, typer.Option("--queues", metavar="N", min=1, max=1024, help="Queues of the topic.")]
DirOpt = Annotated[Optional[str], typer.Option(
    "--dir", metavar="DIR", help="Where to create the throwaway store (default: the temp dir).")]


def register(app: typer.Typer) -> None:
    app.add_typer(bench_app, name="bench")


def _say(msg: str) -> None:
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()


def _emit(json: bool, row: dict[str, Any], text: str) -> None:
    sys.stdout.write((jsonlib.dumps(row, separators=(",", ":")) if json else text) + "\n")
    sys.stdout.flush()


def _members(n: int) -> str:
    return f"{n} member{'s' if n != 1 else ''}"


@bench_app.command("produce", help="""Measure how fast messages are stored.

Stores --count bodies of --size bytes in-process through the producer's fast path (what
`mqctl send` uses for stdin), --batch bodies per write, and reports msgs/s, MiB/s and the
peak memory of the process.

Examples:
  mqctl bench produce
  mqctl bench produce --size 1024 --count 1000000 --flush sync""")
def produce(
    size: SizeOpt = 100,
    count: Annotated[int, typer.Option("--count", "-c", metavar="N", min=1, help="Messages to store.")] = 200_000,
    batch: Annotated[int, typer.Option("--batch", metavar="N", min=1, help="Bodies per store write.")] = 1000,
    flush: Annotated[Literal["async", "sync"], typer.Option(
        "--flush", help="async: page cache; sync: fsync every batch.")] = "async",
    queues: QueuesOpt = 8,
    dir_: DirOpt = None,
    json: JsonOpt = False,
) -> None:
    from mqctl.benchrun import peak_rss_mib, produce_run
    elapsed = produce_run(dir_, size, count, batch, flush == "sync", queues)
    rate, mib = count / elapsed, count * size / MIB / elapsed
    row = {"bench": "produce", "size": size, "count": count, "batch": batch, "flush": flush,
           "seconds": round(elapsed, 3), "msgsPerSec": round(rate), "mibPerSec": round(mib, 1),
           "peakRssMiB": round(peak_rss_mib(), 1)}
    _emit(json, row, f"produce: {count:,} x {size} B, batch {batch}, flush {flush}: {rate:,.0f} msgs/s, "
                     f"{mib:.1f} MiB/s, {elapsed:.2f} s, peak RSS {row['peakRssMiB']} MiB")


CONSUME_HELP = """Measure consumer throughput, or hand-over after a crash.

For each member count in --members (e.g. 1,2) starts that many `mqctl consume` processes of
one group on a --queues topic, waits until they have split the queues, stores --count
messages and reads the members' stdout until every message has arrived: the rate is the
median of --repeat runs, the ratio is against the first member count.

--handover measures instead how long the survivors take to hold every queue after a member
is killed with SIGKILL (with --orderly: every queue lock), median of --runs kills.
--rebalance has members join and leave (SIGTERM) during --count messages: duplicates (must
be 0; exit 1 otherwise), hand-over pauses per queue, and the rate against 3 steady members.

Examples:
  mqctl bench consume --members 1,2,4 --count 500000
  mqctl bench consume --orderly --handover --members 3 --runs 5
  mqctl bench consume --rebalance --json"""


@bench_app.command("consume", help=CONSUME_HELP)
def consume(
    orderly: Annotated[bool, typer.Option("--orderly", help="Orderly members (queue locks).")] = False,
    members: Annotated[str, typer.Option("--members", metavar="N1,N2", help="Member counts to compare.")] = "1",
    count: Annotated[int, typer.Option("--count", "-c", metavar="N", min=1, help="Messages per run.")] = 200_000,
    size: SizeOpt = 100,
    queues: QueuesOpt = 8,
    repeat: Annotated[int, typer.Option("--repeat", "-r", metavar="N", min=1, help="Runs per member count (median).")] = 3,
    handover: Annotated[bool, typer.Option("--handover", help="Measure hand-over after kill -9 instead of throughput.")] = False,
    rebalance: Annotated[bool, typer.Option("--rebalance", help="Members join and leave during the run.")] = False,
    runs: Annotated[int, typer.Option("--runs", metavar="N", min=1, help="Kills for --handover (median).")] = 10,
    dir_: DirOpt = None,
    json: JsonOpt = False,
) -> None:
    from mqctl.benchrun import Scratch, handover_runs, one_rate_run, rebalance_run
    from store.errors import UsageError
    try:
        counts = [int(x) for x in members.split(",") if x.strip()]
    except ValueError as exc:
        raise UsageError(f"--members {members!r}: expected counts like 1,2") from exc
    if not counts or min(counts) < 1:
        raise UsageError("--members needs counts of at least 1")
    if handover and rebalance:
        raise UsageError("give --handover or --rebalance, not both")
    mode = "orderly" if orderly else "concurrent"
    with Scratch(dir_) as scratch:
        if rebalance:
            _say(f"rebalance: {count:,} x {size} B, {queues} queues, {mode}: 3 steady members first")
            steady, _rss = one_rate_run(scratch, 0, 3, count, size, queues, orderly)
            _say(f"  steady, 3 members: {steady:,.0f} msgs/s; now with members joining and leaving")
            r = rebalance_run(scratch, count, size, queues, orderly)
            row = {"bench": "consume-rebalance", "mode": mode, "queues": queues, "size": size,
                   "count": count, "duplicates": r["duplicates"], "handovers": r["handovers"],
                   "pauseMedianMs": r["pauseMedianMs"], "pauseMaxMs": r["pauseMaxMs"],
                   "msgsPerSec": round(r["msgsPerSec"]), "steadyMsgsPerSec": round(steady),
                   "ratio": round(r["msgsPerSec"] / steady, 2), "events": r["events"]}
            _emit(json, row, f"rebalance ({mode}, {queues} queues, {count:,} x {size} B; "
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
            times = handover_runs(scratch, n, queues, orderly, runs, _say)
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
                rate, peak = one_rate_run(scratch, run, n, count, size, queues, orderly)
                rates.append(rate)
                rss = max(rss, peak)
                _say(f"  {mode}, {_members(n)}, run {k + 1}/{repeat}: {rate:,.0f} msgs/s")
            med = statistics.median(rates)
            base = med if base is None else base
            row = {"bench": "consume", "mode": mode, "members": n, "queues": queues, "size": size,
                   "count": count, "runs": repeat, "msgsPerSec": round(med),
                   "mibPerSec": round(med * size / MIB, 1), "ratio": round(med / base, 2),
                   "memberPeakRssMiB": round(rss, 1)}
            _emit(json, row, f"consume ({mode}, {_members(n)}, {queues} queues, {size} B): median "
                             f"{med:,.0f} msgs/s, {med * size / MIB:.1f} MiB/s, x{med / base:.2f} vs "
                             f"{_members(counts[0])}; member peak RSS {rss:.0f} MiB")
