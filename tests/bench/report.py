"""The README's performance tables, rendered from the results of ``bench_all.py``.

Not a test. ``bench_all.py --readme`` writes them into README.md between the two marker
lines below (the prose around them is written by hand and cites no figure of a run), and
``bench_all.py --render bench-results/all-<UTC>.json --readme`` does so again from a saved
run without running anything.
"""
from __future__ import annotations

import math
from typing import Any

BEGIN = "<!-- bench_all.py --readme: generated from here -->"
END = "<!-- bench_all.py --readme: generated up to here -->"

SIZES = [("100", "100 B"), ("1k", "1 KiB"), ("4k", "4 KiB"), ("64k", "64 KiB")]
THROUGHPUT = [   # (ratio key, row, whether the row has the ≥ 2 target)
    ("produce_{}_vs_redis_xadd_p1000", "`cat FILE \\| mqctl send` / pipelined `XADD`", True),
    ("api_produce_{}_vs_redis_xadd_p1000", "`Producer.send_many` / pipelined `XADD`", True),
    ("consume_{}_vs_redis_xreadgroup_xack", "`consume -e > /dev/null` / `XREADGROUP`+`XACK`", True),
    ("api_consume_{}_vs_redis_xreadgroup_xack", "`Consumer.messages()` / `XREADGROUP`+`XACK`", True),
    ("consume_floor_{}_vs_redis_xreadgroup_xack", "the floor, `consume_floor.py` / `XREADGROUP`+`XACK`", False),
    ("consume_c_floor_{}_vs_redis_xreadgroup_xack", "the C floor, `consume_floor.c` / `XREADGROUP`+`XACK`", False),
    ("consume_{}_vs_redis_process", "`consume -e` / Redis's consumer timed as a whole process", False),
]
LATENCY_NAMES = {"C floor (wake_floor.c)": "floor (`wake_floor.c`)",
                 "redis XREADGROUP BLOCK": "Redis `XREADGROUP BLOCK`",
                 "mqctl stdout": "`mqctl consume --json`", "mqctl orderly": "`mqctl consume --orderly --json`",
                 "mqctl exec": "`mqctl consume --exec` (a bash handler)",
                 "mqctl exec-bin": "`mqctl consume --exec` (a compiled handler)"}


def _ratio(ratios: dict[str, Any], key: str) -> dict[str, Any] | None:
    """The ratio named ``key``, with or without its ``(target >= x)`` suffix."""
    for k, v in ratios.items():
        if k == key or k.startswith(key + " (target"):
            return None if math.isnan(v["median"]) else dict(v)
    return None


def _cell(r: dict[str, Any] | None, target: float | None = None) -> str:
    if r is None:
        return "–"
    text = f"{r['median']:.2f} ({r['min']:.2f}–{r['max']:.2f})"
    return f"**{text}**" if target is not None and r["median"] < target else text


def latency(res: dict[str, Any]) -> list[str]:
    ld = res.get("latency_load", {})
    out = [f"Latency, store → the consumer's output, p50 / p99 ms (medians of the rounds; load "
           f"{ld.get('load_start', '?')} → {ld.get('load_end', '?')}; target p99 ≤ 10, `--exec` ≤ 15):", "",
           "| mode | p50 | p99 | p99 / floor's |", "|---|---|---|---|"]
    for name, v in res.get("latency", {}).items():
        label = LATENCY_NAMES.get(name, f"`{name}`")
        if not v.get("received"):
            out.append(f"| {label} | nothing received | | |")
            continue
        x = v.get("p99_x_floor")
        floor_x = f"{x:.2f}" if x is not None and "floor" not in name else ""
        out.append(f"| {label} | {v['p50_ms']:.2f} | {v['p99_ms']:.2f} | {floor_x} |")
    return out


def throughput(res: dict[str, Any]) -> list[str]:
    ratios = res["ratios"]
    counts = res.get("counts", {})
    loads = "; ".join(res.get("machine", {}).get("loadavg_per_rep", []))
    sized = zip((100, 1024, 4096, 65536), SIZES)   # (counts are keyed by the size in bytes)
    n = ", ".join(f"{int(counts[str(b)]):,} × {lbl}" for b, (_tag, lbl) in sized if str(b) in counts)
    out = [f"Throughput, mqctl / Redis Streams (medians of the repetitions' ratios, min–max; N: {n};"
           f" load per repetition: {loads or '?'}; target ≥ 2, below it in bold):", "",
           "| mqctl / Redis | " + " | ".join(lbl for _t, lbl in SIZES) + " |",
           "|---|" + "---|" * len(SIZES)]
    # at 64 KiB the consumer is judged on the bigger run when it ran (see pipe_rows)
    judged_big = {"consume_": _ratio(ratios, "consume_64k_big_vs_redis_xreadgroup_xack") is not None,
                  "api_consume_": _ratio(ratios, "api_consume_64k_big_vs_redis_xreadgroup_xack") is not None}
    for key, label, targeted in THROUGHPUT:
        big = any(on and key.startswith(prefix) for prefix, on in judged_big.items())
        cells = [_cell(_ratio(ratios, key.format(tag)), 2.0 if targeted and not (big and tag == "64k") else None)
                 for tag, _l in SIZES]
        if any(c != "–" for c in cells):
            out.append(f"| {label} | " + " | ".join(cells) + " |")
    durable = [("sync_b100_100_vs_redis_always_p100", "`mqctl send --flush sync --batch-size 100`"
                " / Redis `appendfsync always`, pipelines of 100, 100 B", 1.5),
               ("api_sync_many100_100_vs_redis_always_p100", "`Producer(flush=\"sync\").send_many` of 100"
                " / the same, 100 B", 1.5),
               ("api_sync_many100_100_vs_redis_always_p100_rounds", "the same, interleaved in rounds of"
                f"{_round_size(res, 'round_batches', 100)} (the median of the rounds' ratios)", 1.5),
               ("api_sync_single_100_vs_sqlite_wal_full", "single `Producer(flush=\"sync\").send`"
                " / SQLite WAL `synchronous=FULL` inserts, 100 B", 1.0),
               ("api_sync_single_100_vs_sqlite_wal_full_rounds", "the same, interleaved in rounds of"
                f"{_round_size(res, 'round_size', 1)} (the median of the rounds' ratios)", 1.0),
               ("api_sync_single_100_vs_sqlite_wal_appending_rounds", "the same, the rounds in which"
                " SQLite's WAL grew (its commits appended, as mqctl's always do)", None),
               ("api_sync_single_100_vs_sqlite_wal_overwriting_rounds", "the same, the rounds in which"
                " SQLite wrote its WAL again from the start (overwrites: no new size to write)", None),
               *pipe_rows(res)]
    out += ["", "| durable sends and the 64 KiB runs | ratio | target |", "|---|---|---|"]
    for key, label, target in durable:
        r = _ratio(ratios, key)
        if r is not None:
            out.append(f"| {label} | {_cell(r, target)} | {'–' if target is None else f'≥ {target:g}'} |")
    out += round_rates(res)
    return out


ROUND_SIDES = [("api_sync_single_100", "single `send`"), ("sqlite_wal_full_single_100", "SQLite commits"),
               ("fsync_floor_append_254", "their floor (`fsync_floor.c`, 254-byte appends)"),
               ("api_sync_many100_100", "`send_many` of 100"),
               ("redis_always_p100_100", "Redis pipelines of 100 (its client's CPU)"),
               ("fsync_floor_append_25400", "their floor (25,400-byte appends)"),
               ("fsync_floor_overwrite_254", "254-byte overwrites of a synced file"),
               ("fsync_floor_overwrite_25400", "25,400-byte overwrites")]


def round_rates(res: dict[str, Any]) -> list[str]:
    """Each side's rate in the interleaved rounds (msgs/s, the median of its rounds, min–max)
    and the CPU a message took: the figures behind the rounds' ratios."""
    sides = res.get("rounds", {}).get("sides", {})
    cells = []
    for key, label in ROUND_SIDES:
        v = sides.get(key)
        if v:
            m, c = v["msgs_per_s"], v["cpu_us_per_msg"]
            cells.append(f"{label} {m['median']:,.0f} ({m['min']:,.0f}–{m['max']:,.0f}) msgs/s"
                         + (f", {c['median']:.0f} CPU µs a message" if c else ""))
    if not cells:
        return []
    return ["", "In those rounds (the median of the rounds, min–max): " + "; ".join(cells) + "."]


def _round_size(res: dict[str, Any], key: str, per_unit: int) -> str:
    """`` N sends`` for the rounds of ``bench_produce.py`` (``--round-size``, or
    ``--round-batches`` of 100), as the run recorded it."""
    n = res.get("rounds", {}).get(key)
    return f" {n * per_unit:,} sends" if n else ""


def pipe_rows(res: dict[str, Any]) -> list[tuple[str, str, float | None]]:
    """The pipe against its C floor at 64 KiB: the size's run (100 MB in ``bench_all.py``,
    where the process's start is a large part of the time) and, when it ran, the bigger one
    (``--pipe-mb``, 1 GB: the steady state's throughput, which the target is judged on); and
    the consumer of that bigger store against Redis's of as big a stream, judged the same way."""
    n = res.get("counts", {}).get("65536")
    big = res.get("pipe_big_count") or 0
    mb = f"{n * 65536 / 1e6:,.0f} MB, " if n else ""
    rows: list[tuple[str, str, float | None]] = [
        ("produce_64k_vs_c_floor", f"`cat FILE \\| mqctl send`, 64 KiB lines ({mb}the process's start included)"
         " / `pipe_floor.c`", None if big else 0.8)]
    if big:
        mb_big = round(big * 65536 / 1e6)
        amount = f"{mb_big / 1000:g} GB" if mb_big >= 1000 else f"{mb_big} MB"
        rows.append(("produce_64k_big_vs_c_floor", f"the same, {amount}: the pipe's throughput / `pipe_floor.c`", 0.8))
        rows.append(("consume_64k_big_vs_redis_xreadgroup_xack", f"`consume -e > /dev/null` / `XREADGROUP`+`XACK`,"
                     f" 64 KiB, {amount}: the consumer's throughput", 2.0))
        rows.append(("api_consume_64k_big_vs_redis_xreadgroup_xack", f"`Consumer.messages()` / the same, {amount}",
                     2.0))
    return rows


def members(res: dict[str, Any]) -> list[str]:
    rate = res.get("rate", {}).get("this")
    out: list[str] = []
    if rate:
        one = rate[str(min(int(k) for k in rate))]["rate"]["median"]
        out += [f"One group's members on a topic of {res.get('queues', '?')} queues, {res.get('count', 0):,} × 100 B"
                f" stored after the group settled (load {res.get('load_start', '?')} → {res.get('load_end', '?')};"
                f" target: never below one member):", "",
                "| members | msgs/s (min–max) | × one member | CPU µs a message, all members |", "|---|---|---|---|"]
        for n, v in sorted(rate.items(), key=lambda kv: int(kv[0])):
            r, cpu = v["rate"], v["cpu_us_per_msg"]
            x = r["median"] / one
            xs = f"**{x:.2f}**" if x < 1.0 else f"{x:.2f}"
            out.append(f"| {n} | {r['median']:,.0f} ({r['min']:,.0f}–{r['max']:,.0f}) | {xs} | {cpu['median']:.2f} |")
    fl = res.get("floor")
    if fl and len(fl) > 1:
        lo, hi = sorted(fl, key=int)[0], sorted(fl, key=int)[-1]
        out += ["", f"The floor of that shape (`bench_members.py`'s `floor`: processes that read their queues'"
                f" records from the store's files and write a line each, with no offsets, group or checks):"
                f" {hi} processes {fl[hi]['rate']['median'] / fl[lo]['rate']['median']:.2f}× one process"
                f" ({fl[hi]['rate']['median']:,.0f} against {fl[lo]['rate']['median']:,.0f} msgs/s;"
                f" {fl[lo]['cpu_us_per_msg']['median']:.2f} → {fl[hi]['cpu_us_per_msg']['median']:.2f} CPU µs"
                f" a message)."]
    settle = res.get("settle", {}).get("this")
    if settle:
        out += ["", f"16 members started together: all joined {settle['join_all']['median']:.2f} s after the"
                f" launch, every queue held {settle['settle']['median']:.2f} s after the last join (≤ 2 s);"
                f" a member joining a settled group had its queue {settle['joiner']['median']:.2f} s after"
                f" joining (≤ 0.5 s)."]
    return out


def render(run: dict[str, Any]) -> str:
    """The generated block (markers included) for one ``bench_all.py`` run."""
    lines = [BEGIN, "", f"Run {run['started']} at commit `{run['commit']}`, {run['cores']} cores;"
             f" load at the start {run['load_start']}, at the end {run.get('load_end', '?')}."]
    for part in run["parts"]:
        hogs = part["hogs"]
        lines += ["", f"#### {'Quiet (no CPU hog of ours)' if hogs == 0 else f'Beside {hogs} CPU hogs'}"]
        for name, fn in (("latency", latency), ("produce", throughput), ("members", members)):
            if part.get(name):
                lines += [""] + fn(part[name])
    return "\n".join(lines + ["", END])


def replace_block(readme: str, block: str) -> str:
    """``readme`` with the text between the markers (both included) replaced by ``block``."""
    start, end = readme.find(BEGIN), readme.find(END)
    if start < 0 or end < start:
        raise SystemExit(f"README.md has no block between {BEGIN!r} and {END!r}")
    return readme[:start] + block + readme[end + len(END):]
