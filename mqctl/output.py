"""Where records, tables and messages are printed: data on stdout, everything else on stderr.

* Data goes to stdout as bytes, one record per line, flushed as it is produced:
  :func:`write_records` for raw records, :meth:`Output.emit_json` for NDJSON.
* Everything else — errors, warnings, human summaries, progress — goes to stderr.
* Human tables are plain space-aligned text unless stdout is a terminal that allows colour;
  only then is ``rich`` imported (lazily: importing it costs start-up time on every call,
  including ``--help`` and tab completion). Records never go through rich, which would wrap
  them at the terminal width and read ``[...]`` as markup.

Closed stdout (``mqctl consume … | head``): every stdout write here raises :class:`BrokenPipe`.
The caller must commit offsets only for records whose write *returned*; ``mqctl.app`` then
quiets stdout (``mqctl.errors.quiet_broken_pipe``) and exits 141, so that nothing the reader
never got is counted as consumed.
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import sys

from mqctl.errors import EXIT_BROKEN_PIPE

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import IO, Any, BinaryIO, Callable, Iterator, Mapping, Sequence, TextIO


def reader_gone(fd: int) -> bool:
    """Whether ``fd`` is a pipe whose reader has closed it (``| head`` took its lines): the
    kernel reports POLLERR for its write end, asked without writing."""
    import select
    import stat
    try:
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return False
        poll = select.poll()
        poll.register(fd, 0)   # (POLLERR / POLLHUP are always reported)
        return bool(poll.poll(0))
    except (OSError, AttributeError, ValueError):
        return False


class BrokenPipe(Exception):
    """The reader closed stdout. Exit 141 (128 + SIGPIPE, what a C tool would get) and
    commit nothing that was being written when this was raised.

    Deliberately not an ``OSError``: Typer turns any EPIPE ``OSError`` escaping a command into
    exit 1, which would hide the closed pipe from the caller's script."""

    exit_code = EXIT_BROKEN_PIPE


def json_line(obj: Any) -> bytes:
    """One compact NDJSON line, UTF-8, newline-terminated."""
    text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
    # A lone surrogate (from a surrogate-escaped argument or file name) cannot be encoded as
    # UTF-8; backslashreplace turns it into the JSON escape "\udcxx", so the line stays valid.
    return text.encode("utf-8", "backslashreplace") + b"\n"


def write_records(chunks: Sequence[bytes], stream: BinaryIO | None = None) -> None:
    """Write ``chunks`` to ``stream`` (default ``sys.stdout.buffer``) and flush.

    When this returns, the reader has been handed every chunk, and the caller may commit
    them. When it raises :class:`BrokenPipe`, some chunks may not have been written: the
    caller commits none of them.
    """
    out = sys.stdout.buffer if stream is None else stream
    try:
        if len(chunks) <= 4:
            # A few chunks (raw bodies the caller joined already, and their newline): written
            # as they are, not copied together once more (a big write bypasses the buffer).
            for chunk in chunks:
                write_all(out, chunk)
            if chunks and not _TUNED and len(chunks[0]) >= 1 << 20:
                keep_big_buffers()   # batches this big will follow: reuse their memory
        else:
            write_all(out, b"".join(chunks))
        out.flush()
    except BrokenPipeError as exc:
        raise BrokenPipe("stdout was closed by the reader") from exc


def write_all(out: BinaryIO, data: bytes | bytearray | memoryview) -> int:
    """``out.write(data)``, all of it or an error. A buffered writer whose write to the pipe
    is cut short (the reader left after taking part of it: the kernel takes what fits, and
    raises SIGPIPE, ignored) returns the short count and drops the rest without an error;
    the next write gets the EPIPE (BrokenPipeError), as a C tool's would."""
    n = out.write(data)
    if n is not None and n < len(data):
        rest = memoryview(data).cast("B")[n:]
        while rest:
            k = out.write(rest)
            if not k:
                raise OSError(errno.EAGAIN, "stdout took none of a write")
            rest = rest[k:]
    return len(data)


_TUNED: list[bool] = []


def say(line: str, stream: TextIO | None = None) -> None:
    """``line`` as one line on stderr (or ``stream``), flushed, whatever it holds: scripts
    read stderr line-wise."""
    err = sys.stderr if stream is None else stream
    err.write(" ".join(line.split("\n")) + "\n")
    err.flush()


def keep_big_buffers() -> None:
    """Tune the allocator for big batch buffers, once (``store.keep_big_buffers`` says why)."""
    if _TUNED:
        return
    _TUNED.append(True)
    from store import keep_big_buffers as keep
    keep()


def color_allowed(stream: IO[Any]) -> bool:
    """Colour only on a terminal, and never with NO_COLOR set non-empty or TERM=dumb
    (no-color.org: an empty NO_COLOR does not count). FORCE_COLOR set non-empty gives colour
    off a terminal too (``mqctl … | less -R``), as rich, pytest and npm tools take it; NO_COLOR
    still wins over it, as rich lets it."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    return bool(os.environ.get("FORCE_COLOR")) or _isatty(stream)


def animation_allowed(stream: IO[Any]) -> bool:
    """Progress bars only on a terminal, never in CI logs (CI set non-empty) or on a dumb
    terminal. NO_COLOR leaves the bar but takes its colour away (rich obeys it itself)."""
    if os.environ.get("CI") or os.environ.get("TERM") == "dumb":
        return False
    return _isatty(stream)


def can_draw_screen() -> bool:
    """Whether the terminal can take a full screen (cursor moves, the alternate screen): not a
    dumb one (TERM=dumb, as an editor's shell buffer sets) nor one that names no TERM at all,
    where the screen's escapes would draw nothing (``mqctl top`` shows its plain snapshot)."""
    return os.environ.get("TERM", "") not in ("", "dumb")


def _isatty(stream: IO[Any]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or already closed
        return False


def header(name: str) -> str:
    """Kafka/rpk column header style: ``current offset`` -> ``CURRENT-OFFSET``."""
    return printable(name.strip().upper().replace("_", "-").replace(" ", "-"))


def cell(value: Any) -> str:
    """How one value reads in a human table; ``-`` stands for unknown (None or empty list)."""
    if value is None:
        return "-"
    if isinstance(value, bool):  # before int: bool is an int subclass
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(cell(v) for v in value) or "-"
    return printable(str(value))


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_CONTROL_NAMES = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def printable(text: str) -> str:
    """``text`` for a human table: every control character escaped (``\\n``, ``\\t``,
    ``\\r``, else ``\\xNN``), so that a message body or a name keeps its row one line and
    its column aligned, and sends the terminal no escape sequence. Every table cell and
    header goes through it (:func:`cell`); ``--json`` output is the values as they are."""
    if not _CONTROL.search(text):
        return text
    return _CONTROL.sub(lambda m: _CONTROL_NAMES.get(m.group(), f"\\x{ord(m.group()):02x}"), text)


_TRAILING_PAD = re.compile(r" +((?:\x1b\[[0-9;]*m)*)$", re.MULTILINE)


def human_size(n: int) -> str:
    """Bytes for people, in binary units: ``512 B``, ``4.0 KiB``, ``1.2 GiB``."""
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        value /= 1024
        if value < 1024 or unit == "PiB":
            break
    return f"{value:.1f} {unit}"


def plural(n: int, noun: str, plural_form: str | None = None) -> str:
    """``1 queue``, ``8 queues``: counts in messages read like a person wrote them."""
    return f"{n} {noun if n == 1 else (plural_form or noun + 's')}"


class NullProgress:
    """What :meth:`Output.progress` yields when no bar is shown: same methods, no output."""

    def advance(self, n: int = 1) -> None:
        pass


class _RichProgress:
    def __init__(self, progress: Any, task: Any) -> None:
        self._progress = progress
        self._task = task

    def advance(self, n: int = 1) -> None:
        self._progress.advance(self._task, n)


class Output:
    """Where one command's output goes, decided once from its flags and the terminal.

    ``json``: tables become NDJSON rows. ``color``: None decides from ``stream`` and the
    environment (:func:`color_allowed`); True/False force it (a ``--color`` flag).
    ``quiet``: no info lines and no progress; warnings and errors still show.
    """

    def __init__(
        self,
        json: bool = False,
        stream: TextIO | None = None,
        err: TextIO | None = None,
        color: bool | None = None,
        quiet: bool = False,
    ) -> None:
        self.json = json
        self.stream = sys.stdout if stream is None else stream
        self.err = sys.stderr if err is None else err
        self.color = color_allowed(self.stream) if color is None else color
        self.quiet = quiet

    # -- stdout: data ----------------------------------------------------------------------

    def emit_json(self, obj: Any) -> None:
        """Write ``obj`` as one NDJSON line on stdout, flushed. Raises BrokenPipe."""
        self._write_bytes([json_line(obj)])

    def table(
        self,
        rows: Sequence[Mapping[str, Any]],
        columns: Sequence[tuple[str, str]],
        headers: bool = True,
    ) -> None:
        """Print ``rows`` under ``columns`` (``(key, HEADER)`` pairs).

        With ``json``, each whole row is one NDJSON line (every key, not only the shown
        columns: JSON only ever gains fields). Otherwise a table for humans, which may change
        between releases. ``headers=False`` drops the header line (for awk).
        """
        if self.json:
            self._write_bytes([json_line(dict(row)) for row in rows])
        elif self.color:
            self._rich_table(rows, columns, headers)
        else:
            self._plain_table(rows, columns, headers)

    def _write_bytes(self, chunks: Sequence[bytes]) -> None:
        try:
            self.stream.flush()  # keep order with anything already written as text
        except BrokenPipeError as exc:
            raise BrokenPipe("stdout was closed by the reader") from exc
        write_records(chunks, self.stream.buffer)

    def _plain_table(
        self, rows: Sequence[Mapping[str, Any]], columns: Sequence[tuple[str, str]], headers: bool
    ) -> None:
        lines = [[cell(row.get(key)) for key, _ in columns] for row in rows]
        if headers:
            lines.insert(0, [header(name) for _, name in columns])
        if not lines:
            return
        widths = [max(len(line[i]) for line in lines) for i in range(len(columns))]
        text = "".join(
            "  ".join(value.ljust(width) for value, width in zip(line, widths)).rstrip() + "\n"
            for line in lines
        )
        self._write_bytes([text.encode("utf-8", "backslashreplace")])

    def _rich_table(
        self, rows: Sequence[Mapping[str, Any]], columns: Sequence[tuple[str, str]], headers: bool
    ) -> None:
        from rich.cells import cell_len
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text

        # No box drawing (C1.10): the coloured table has the plain one's shape, and its width:
        # a cell is never cut ("…") nor folded over lines, since names and ids are copied from
        # these tables; a row wider than the screen is the terminal's to wrap, as ps -ww's and
        # kubectl's are (a copy of a wrapped line is one line).
        table = Table(box=None, show_header=headers, header_style="bold", pad_edge=False)
        cells = [[cell(row.get(key)) for key, _ in columns] for row in rows]
        for i, (_, name) in enumerate(columns):
            table.add_column(Text(header(name)), no_wrap=True,
                             min_width=max([cell_len(header(name)), *(cell_len(line[i]) for line in cells)]))
        for line in cells:
            # Text(), not str: rich would read "[...]" in a topic or client id as markup.
            table.add_row(*(Text(value) for value in line))
        width = sum(c.min_width or 0 for c in table.columns) + 2 * len(columns)
        console = Console(file=self.stream, force_terminal=True, highlight=False, width=width)
        with console.capture() as captured:
            console.print(table)
        # rich pads every cell to its column's width; the last column's padding is noise
        # (and shows up as trailing spaces when the screen is copied).
        text = _TRAILING_PAD.sub(r"\1", captured.get())
        try:
            self.stream.write(text)
            self.stream.flush()
        except BrokenPipeError as exc:
            raise BrokenPipe("stdout was closed by the reader") from exc

    # -- stderr: everything else -----------------------------------------------------------

    def info(self, msg: str) -> None:
        """A human summary line on stderr (``sent 3 messages``); silent with ``quiet``."""
        if not self.quiet:
            self._say(msg)

    def warn(self, msg: str) -> None:
        self._say(f"mqctl: warning: {msg}")

    def error(self, msg: str) -> None:
        self._say(f"mqctl: error: {msg}")

    def _say(self, line: str) -> None:
        say(line, self.err)

    @contextlib.contextmanager
    def progress(self, total: int | None, label: str, bytes_: bool = False) -> Iterator[NullProgress | _RichProgress]:
        """A progress bar on stderr for long work; a :class:`NullProgress` when stderr is not
        a terminal, in CI, on a dumb terminal or with ``quiet``. ``total=None``: unknown.
        ``bytes_``: ``total`` and the advances are bytes, shown in binary units."""
        if self.quiet or not animation_allowed(self.err):
            yield NullProgress()
            return
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
        )

        # transient: the bar disappears when done; the command's own summary line stays.
        with Progress(
            TextColumn("{task.description}"), BarColumn(),
            DownloadColumn(binary_units=True) if bytes_ else MofNCompleteColumn(),
            TimeRemainingColumn(), console=Console(file=self.err), transient=True,
            redirect_stdout=False, redirect_stderr=False,
        ) as bar:
            yield _RichProgress(bar, bar.add_task(label, total=total))

    @contextlib.contextmanager
    def progress_callback(self, label: str) -> Iterator[Callable[[int, int], None]]:
        """A ``progress(done, total)`` callback for a library call that learns its total as it
        starts (``Admin.resend_dead_letters``): the bar of :meth:`progress` opens at the first
        call and follows ``done``."""
        with contextlib.ExitStack() as stack:
            shown: list[Any] = []   # [the bar, done so far]

            def progress(done: int, total: int) -> None:
                if not shown:
                    shown.extend([stack.enter_context(self.progress(total, label)), 0])
                shown[0].advance(done - shown[1])
                shown[1] = done
            yield progress
