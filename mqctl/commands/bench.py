"""``mqctl bench produce|consume``: the built-in benchmark (its loops: ``mqctl/benchrun.py``;
its results: ``mqctl/benchreport.py``).

Both run against a throwaway store created in a temporary directory (``--dir`` chooses where:
put it on the disk you care about; a tmpfs measures memory, not the disk) and removed
afterwards, so a benchmark never leaves data in a real store.
"""
from __future__ import annotations

import statistics
from typing import Annotated, Literal, Optional

import typer

import store
from mqctl.options import SIZE_HELP, JsonOpt, size_parser

bench_app = typer.Typer(help="Built-in benchmarks (on a throwaway store).", no_args_is_help=True)

SizeOpt = Annotated[int, typer.Option("--size", metavar="SIZE", parser=size_parser(1),
                                      help=f"Body size ({SIZE_HELP}).")]
QueuesOpt = Annotated[int, typer.Option("--queues", metavar="N", min=1, max=store.MAX_QUEUES, help="Queues of the topic.")]
DirOpt = Annotated[Optional[str], typer.Option(
    "--dir", metavar="DIR", help="Where to create the throwaway store (default: the temp dir).")]


def register(app: typer.Typer) -> None:
    app.add_typer(bench_app, name="bench")


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
    from mqctl.benchreport import report_produce
    from mqctl.benchrun import peak_rss_mib, produce_run
    _end_on_sigterm()
    elapsed = produce_run(dir_, size, count, batch, flush == "sync", queues)
    report_produce(json, size, count, batch, flush, elapsed, peak_rss_mib())


def _end_on_sigterm() -> None:
    """SIGTERM (``timeout``, a service manager) ends a run as Ctrl-C does: its throwaway store
    removed and its member processes stopped (the ``finally`` blocks run), one line
    ``mqctl: error: terminated``, exit 143. It used to kill the process where it stood."""
    import signal

    from mqctl.errors import end_as_interrupt
    end_as_interrupt(signal.SIGTERM)


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
    from mqctl.benchreport import members as members_text
    from mqctl.benchreport import report_handover, report_rate, report_rebalance
    from mqctl.benchrun import Scratch, handover_runs, one_rate_run, rebalance_run
    from mqctl.output import say
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
    _end_on_sigterm()
    with Scratch(dir_) as scratch:
        if rebalance:
            say(f"rebalance: {count:,} x {size} B, {queues} queues, {mode}: 3 steady members first")
            steady, _rss = one_rate_run(scratch, 0, 3, count, size, queues, orderly)
            say(f"  steady, 3 members: {steady:,.0f} msgs/s; now with members joining and leaving")
            r = rebalance_run(scratch, count, size, queues, orderly)
            report_rebalance(json, mode, queues, size, count, r, steady)
            if r["duplicates"]:
                raise typer.Exit(1)
            return
        if handover:
            n = max(max(counts), 2)
            say(f"hand-over: {n} {mode} members, {queues} queues, {runs} kills")
            report_handover(json, mode, n, queues, runs, handover_runs(scratch, n, queues, orderly, runs, say))
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
                say(f"  {mode}, {members_text(n)}, run {k + 1}/{repeat}: {rate:,.0f} msgs/s")
            med = statistics.median(rates)
            base = med if base is None else base
            report_rate(json, mode, n, counts[0], queues, size, count, repeat, med, base, rss)
