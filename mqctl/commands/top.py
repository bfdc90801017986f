"""``mqctl top``: a live view of the store (``store.Monitor`` looks, ``store.History`` turns the
looks into rates; the views in ``mqctl/topview.py``, the full screen in ``mqctl/toplive.py``)."""
from __future__ import annotations

from typing import Annotated

import typer

import store
from mqctl.options import JsonOpt, OptionalGroupOpt, TopicFilterOpt, state


def register(app: typer.Typer) -> None:
    app.command("top", help=TOP_HELP)(top)


TOP_HELP = """Live view of topics, groups, queue locks and problems.

On a terminal: a full screen refreshed every --interval seconds. Keys: 1-4 or t/g/l/p switch
between topics, groups, locks and problems (tab: the next one), / filters by name (enter
keeps it, esc clears it), q quits. IN/S and OUT/S are messages stored and consumed per second
over the last 5 s, LAST-60S a sparkline of messages in, TREND the lag's change per second,
DRAIN the time to drain at that pace (or falling behind). Read-only: writes nothing, takes no
lock, works on a store you may only read.

Piped, --once or on a terminal that cannot draw a screen (TERM=dumb or unset): one
plain snapshot of every view, then exit (rates need two looks: -).
--json: one NDJSON object per refresh (with --once: one).

Examples:
  mqctl top
  mqctl top -g billing
  mqctl top --once
  mqctl top --json --interval 5 | jq -c '.groups[] | {group, lag, rate}'"""

IntervalOpt = Annotated[float, typer.Option("--interval", metavar="SECONDS", min=0.1,
                                            help="Seconds between refreshes.")]
OnceOpt = Annotated[bool, typer.Option("--once", help="One snapshot, then exit.")]


def top(ctx: typer.Context, group: OptionalGroupOpt = None, topic: TopicFilterOpt = None,
        interval: IntervalOpt = 1.0, once: OnceOpt = False, json: JsonOpt = False) -> None:
    import sys

    from mqctl.output import can_draw_screen
    st = state(ctx)
    with store.Monitor(st.store_path, group=group, topic=topic) as monitor:
        history = store.History()
        if json:
            _json_stream(monitor, history, interval, once)
        elif once or not (sys.stdin.isatty() and sys.stdout.isatty() and can_draw_screen()):
            _plain(monitor, history, group)
        else:
            from mqctl.toplive import run_live
            run_live(monitor, history, interval, str(st.store_path), group)


def _json_stream(monitor: store.Monitor, history: store.History, interval: float, once: bool) -> None:
    import signal
    import time

    from mqctl.errors import Terminated, end_as_interrupt
    from mqctl.output import Output
    out = Output(json=True)
    restore_signals = end_as_interrupt(signal.SIGTERM)
    # SIGINT ends it also when mqctl started with it ignored (``&`` in a script), as it ends
    # ``consume`` (mqctl/entry.py has put a handler in place until now)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        while True:
            snap = monitor.snapshot()
            history.add(snap)
            out.emit_json(history.to_json(snap))
            if once:
                return
            time.sleep(interval)
    except (KeyboardInterrupt, Terminated):   # a long-running view: Ctrl-C or SIGTERM is how it ends
        return
    finally:
        restore_signals()
        signal.signal(signal.SIGINT, previous)


def _plain(monitor: store.Monitor, history: store.History, group: str | None) -> None:
    from mqctl.output import Output
    from mqctl.topview import VIEWS, sections, summary
    snap = monitor.snapshot()
    history.add(snap)
    out = Output()
    out.info(summary(snap))
    first = True
    for view in VIEWS:
        for sec in sections(snap, history, view, "", group):
            if not sec.rows and sec.title in ("members", "queues"):
                continue
            out.stream.write(("" if first else "\n") + sec.title.upper() + "\n")
            first = False
            if sec.rows:
                out.table(sec.rows, sec.columns)
            else:
                out.stream.write(f"no {sec.title}\n")
            out.stream.flush()
