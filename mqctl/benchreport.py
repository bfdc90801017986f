"""What ``mqctl bench`` reports: one result per measurement as a JSON object or a human line on
stdout, progress lines on stderr. The measuring loops are ``mqctl/benchrun.py``."""
from __future__ import annotations

import json as jsonlib
import statistics
import sys
from typing import Any

MIB = 1024 * 1024


def emit(json: bool, row: dict[str, Any], text: str) -> None:
    sys.stdout.write((jsonlib.dumps(row, separators=(",", ":")) if json else text) + "\n")
    sys.stdout.flush()


def members(n: int) -> str:
    return f"{n} member{'s' if n != 1 else ''}"


def report_produce(json: bool, size: int, count: int, batch: int, flush: str, elapsed: float,
                   peak_rss_mib: float) -> None:
    rate, mib = count / elapsed, count * size / MIB / elapsed
    row = {"bench": "produce", "size": size, "count": count, "batch": batch, "flush": flush,
           "seconds": round(elapsed, 3), "msgsPerSec": round(rate), "mibPerSec": round(mib, 1),
           "peakRssMiB": round(peak_rss_mib, 1)}
    emit(json, row, f"produce: {count:,} x {size} B, batch {batch}, flush {flush}: {rate:,.0f} msgs/s, "
                    f"{mib:.1f} MiB/s, {elapsed:.2f} s, peak RSS {row['peakRssMiB']} MiB")


def report_rebalance(json: bool, mode: str, queues: int, size: int, count: int, r: dict[str, Any],
                     steady: float) -> None:
    """Members joining and leaving (``r``: ``benchrun.rebalance_run``'s result) against 3
    steady members' rate."""
    row = {"bench": "consume-rebalance", "mode": mode, "queues": queues, "size": size,
           "count": count, "duplicates": r["duplicates"], "handovers": r["handovers"],
           "pauseMedianMs": r["pauseMedianMs"], "pauseMaxMs": r["pauseMaxMs"],
           "msgsPerSec": round(r["msgsPerSec"]), "steadyMsgsPerSec": round(steady),
           "ratio": round(r["msgsPerSec"] / steady, 2), "events": r["events"]}
    emit(json, row, f"rebalance ({mode}, {queues} queues, {count:,} x {size} B; "
                    f"{', '.join(r['events'])}): {r['duplicates']} duplicates, "
                    f"{r['handovers']} queue hand-overs, pause median {r['pauseMedianMs']} ms, "
                    f"max {r['pauseMaxMs']} ms; {r['msgsPerSec']:,.0f} msgs/s = "
                    f"x{r['msgsPerSec'] / steady:.2f} of steady state ({steady:,.0f} msgs/s)")


def report_handover(json: bool, mode: str, n: int, queues: int, runs: int, times: list[float]) -> None:
    med = statistics.median(times)
    row = {"bench": "consume-handover", "mode": mode, "members": n, "queues": queues,
           "runs": runs, "medianMs": round(med * 1000, 1), "minMs": round(min(times) * 1000, 1),
           "maxMs": round(max(times) * 1000, 1)}
    emit(json, row, f"hand-over after kill -9 ({mode}, {n} members, {queues} queues): median "
                    f"{med * 1000:.0f} ms (min {min(times) * 1000:.0f}, max {max(times) * 1000:.0f}, "
                    f"{runs} runs)")


def report_rate(json: bool, mode: str, n: int, first: int, queues: int, size: int, count: int, repeat: int,
                med: float, base: float, rss: float) -> None:
    """One member count's median rate, and its ratio to the first count's (``first``, ``base``)."""
    row = {"bench": "consume", "mode": mode, "members": n, "queues": queues, "size": size,
           "count": count, "runs": repeat, "msgsPerSec": round(med),
           "mibPerSec": round(med * size / MIB, 1), "ratio": round(med / base, 2),
           "memberPeakRssMiB": round(rss, 1)}
    emit(json, row, f"consume ({mode}, {members(n)}, {queues} queues, {size} B): median "
                    f"{med:,.0f} msgs/s, {med * size / MIB:.1f} MiB/s, x{med / base:.2f} vs "
                    f"{members(first)}; member peak RSS {rss:.0f} MiB")
