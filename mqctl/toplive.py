"""The full-screen ``mqctl top``: rich's Live on the alternate screen, keys read raw from stdin.

The terminal is put in cbreak mode (keys arrive one by one, unechoed; Ctrl-C still sends
SIGINT) and restored in a ``finally``, so ``q``, Ctrl-C, SIGTERM, SIGHUP and an error all
leave it as it was.
The loop waits on stdin with ``select`` in short steps: a key, a resize (the terminal's size
is compared at each step) or the next refresh redraws at once.
"""
from __future__ import annotations

import os
import select
import sys
import time
from dataclasses import dataclass
from typing import Any

from mqctl.topview import VIEWS, Section, sections, summary

KEYS = {"1": "topics", "2": "groups", "3": "locks", "4": "problems",
        "t": "topics", "g": "groups", "l": "locks", "p": "problems"}
HELP = "q quit  1-4 or t/g/l/p views  tab next  / filter  esc clear"


@dataclass
class Screen:
    """What the person chose: the view, the filter (and whether it is being typed)."""

    view: str = "topics"
    filter: str = ""
    typing: bool = False

    def key(self, ch: str) -> bool:
        """Apply one key; False when it asks to quit."""
        if self.typing:
            if ch in ("\r", "\n"):
                self.typing = False
            elif ch == "\x1b":
                self.typing, self.filter = False, ""
            elif ch in ("\x7f", "\b"):
                self.filter = self.filter[:-1]
            elif ch.isprintable():
                self.filter += ch
            return True
        if ch in ("q", "Q"):
            return False
        if ch in KEYS:
            self.view = KEYS[ch]
        elif ch == "\t":
            self.view = VIEWS[(VIEWS.index(self.view) + 1) % len(VIEWS)]
        elif ch == "/":
            self.typing, self.filter = True, ""
        elif ch == "\x1b":
            self.filter = ""
        return True


def render(snap: Any, hist: Any, screen: Screen, store: str, focus: str | None, height: int,
           width: int = 200) -> Any:
    from rich.console import Group
    from rich.text import Text
    # The title, tabs and footer are cut at the screen's edge, not wrapped: a wrapped line
    # would push the tables' last rows off a screen that is measured to fit them.
    tabs = Text(no_wrap=True, overflow="ellipsis")
    for i, v in enumerate(VIEWS, 1):
        tabs.append(f" {i} {v} ", style="reverse bold" if v == screen.view else "")
    counts, now = summary(snap), time.strftime('%H:%M:%S')
    room = width - len(f"mqctl top    {now}  {counts}")
    if len(store) > room:   # the path's head goes first: its tail names the store, the counts stay
        store = "…" + store[len(store) - max(room, 8) + 1:]
    head = Text(f"mqctl top  {store}  {now}  ", style="bold", no_wrap=True, overflow="ellipsis")
    head.append(counts)
    parts: list[Any] = [head, tabs]
    room = max(3, height - 5)
    for sec in sections(snap, hist, screen.view, screen.filter, focus):
        if not sec.rows and sec.title in ("members", "queues"):
            continue
        parts.append(_table(sec, room, width))
        room -= len(sec.rows) + 2
        if room <= 2:
            break
    flt = f"filter: /{screen.filter}{'_' if screen.typing else ''}" if screen.typing or screen.filter else ""
    parts.append(Text(f"{HELP}   {flt}   look {snap.cost_ms:.1f} ms CPU", style="dim", no_wrap=True,
                      overflow="ellipsis"))
    return Group(*parts)


def _table(sec: Section, room: int, width: int) -> Any:
    """The section as aligned text lines, cut at the screen's width: rich's Table costs ten
    times as much per refresh, and the columns here need no wrapping."""
    from rich.text import Text
    shown = sec.rows[: max(1, room - 1)]
    cells = [[name for _key, name in sec.columns]]
    cells += [["-" if row.get(k) is None else str(row.get(k)) for k, _ in sec.columns] for row in shown]
    widths = _fit([max(len(line[i]) for line in cells) for i in range(len(sec.columns))],
                  [len(name) for name in cells[0]], width)
    text = Text(no_wrap=True, overflow="ellipsis")
    for i, line in enumerate(cells):
        body = "  ".join(_cut(v, w).ljust(w) for v, w in zip(line, widths)).rstrip()[:width]
        style = "bold" if i == 0 else ("bold red" if i - 1 in sec.alert else "")
        text.append(body + "\n", style=style)
    if not sec.rows:
        text.append(f"no {sec.title}\n", style="dim")
    elif len(sec.rows) > len(shown):
        text.append(f"… {len(sec.rows) - len(shown)} more (/ to filter)\n", style="dim")
    text.rstrip()
    return text


NAME_MIN = 12   # a name column cut to fit the screen keeps at least this much (or its header)


def _fit(widths: list[int], headers: list[int], width: int) -> list[int]:
    """Column widths that fit ``width``: the widest columns (long topic, group or client
    names) are narrowed, down to :data:`NAME_MIN`, so the columns after them (LAG, DRAIN...)
    stay on the screen and in line, rather than being pushed off its edge."""
    widths = list(widths)
    while sum(widths) + 2 * (len(widths) - 1) > width:
        narrowable = [j for j in range(len(widths)) if widths[j] > max(NAME_MIN, headers[j])]
        if not narrowable:
            break   # (too many columns for the screen: the line is cut at its edge)
        # one character off the widest at a time: two long names share the room
        widths[max(narrowable, key=lambda j: widths[j])] -= 1
    return widths


def _cut(value: str, w: int) -> str:
    """``value`` in a column ``w`` wide: cut with an ellipsis, as kcat and rpk do."""
    return value if len(value) <= w else value[: w - 1] + "…"


def screen_size() -> os.terminal_size:
    """The window's size; where the terminal has none (0 x 0: a pty nobody sized, as under
    ``script`` or a CI runner), COLUMNS and LINES, else 80 x 24, as ``stty`` users expect."""
    size = os.get_terminal_size(sys.stdout.fileno())
    if size.columns > 0 and size.lines > 0:
        return size
    return os.terminal_size((size.columns or _env_size("COLUMNS", 80), size.lines or _env_size("LINES", 24)))


def _env_size(name: str, default: int) -> int:
    text = os.environ.get(name, "")
    return int(text) if text.isdigit() and int(text) > 0 else default


def run_live(monitor: Any, history: Any, interval: float, store: str, focus: str | None) -> None:
    """Refresh until ``q``, Ctrl-C, SIGTERM or SIGHUP; the terminal is restored either way
    (cooked mode, the main screen, the cursor shown), and the view ends with exit 0, as a
    long-running ``consume`` does on SIGINT/SIGTERM."""
    import signal
    import termios
    import tty

    from rich.console import Console
    from rich.live import Live

    from mqctl.errors import Terminated, end_as_interrupt, hung_up
    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    console = Console(highlight=False)
    screen = Screen(view="groups" if focus else "topics")
    restore_signals = end_as_interrupt(signal.SIGTERM, signal.SIGHUP)
    resumed = [False]

    def suspend(_signum: int, _frame: object) -> None:
        # Ctrl-Z, as less and htop take it: the shell gets its screen and line mode back while
        # this is stopped, and after fg this takes its own again (bash's fg gives a job back
        # the terminal as the shell has it: cooked, so keys would wait for Enter). Raw writes:
        # the handler may run in the middle of one of rich's.
        out = sys.stdout.fileno()
        try:
            termios.tcsetattr(fd, termios.TCSADRAIN, saved)
            os.write(out, b"\x1b[?1049l\x1b[?25h")   # the main screen, the cursor shown
        except (OSError, termios.error):
            pass
        signal.signal(signal.SIGTSTP, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTSTP)          # stopped here until continued
        signal.signal(signal.SIGTSTP, suspend)
        try:
            tty.setcbreak(fd)
            os.write(out, b"\x1b[?1049h\x1b[?25l")   # the alternate screen again, to be redrawn
        except (OSError, termios.error):
            pass
        resumed[0] = True

    stop_default = signal.getsignal(signal.SIGTSTP) == signal.SIG_DFL   # (not when ignored)
    if stop_default:
        signal.signal(signal.SIGTSTP, suspend)
    try:
        tty.setcbreak(fd)
        with Live(console=console, screen=True, auto_refresh=False, redirect_stdout=False,
                  redirect_stderr=False) as live:
            snap = monitor.snapshot()
            history.add(snap)
            due = time.monotonic() + interval
            size = screen_size()
            console.size = (size.columns, size.lines)
            live.update(render(snap, history, screen, store, focus, size.lines, size.columns), refresh=True)
            while True:
                ready, _, _ = select.select([fd], [], [], min(0.1, max(0.0, due - time.monotonic())))
                redraw = False
                if ready:
                    try:
                        data = os.read(fd, 64).decode("utf-8", "replace")
                    except OSError:   # the terminal went away (EIO after a hang-up)
                        return
                    if not data:
                        return   # stdin closed
                    for ch in data:
                        if not screen.key(ch):
                            return
                    redraw = True
                now_size = screen_size()
                if now_size != size or resumed[0]:
                    size, redraw, resumed[0] = now_size, True, False
                if time.monotonic() >= due:
                    snap = monitor.snapshot()
                    history.add(snap)
                    due = time.monotonic() + interval
                    redraw = True
                if redraw:
                    # rich is told the size measured here, so that a frame is never drawn
                    # for the size before a resize (it would scroll the screen away)
                    console.size = (size.columns, size.lines)
                    live.update(render(snap, history, screen, store, focus, size.lines, size.columns), refresh=True)
    except (KeyboardInterrupt, Terminated):
        return
    except OSError as exc:
        # the terminal hung up (SIGHUP's cause): leaving the alternate screen could not be written
        if not hung_up(sys.stdout.fileno(), exc):
            raise
    finally:
        restore_signals()
        if stop_default:
            signal.signal(signal.SIGTSTP, signal.SIG_DFL)
        try:
            termios.tcsetattr(fd, termios.TCSADRAIN, saved)
        except termios.error:   # (a terminal that hung up takes no settings back)
            pass
