"""Output: exact NDJSON lines, plain and coloured tables, stderr lines, progress, EPIPE."""
from __future__ import annotations

import io
import json
import os
import select
import subprocess
from contextlib import contextmanager
from typing import Callable, Iterator

import pytest

from mqctl.output import (
    BrokenPipe,
    NullProgress,
    Output,
    cell,
    color_allowed,
    header,
    json_line,
    write_records,
)
from tests.procs import finish, python

ROWS = [
    {"topic": "orders", "queueId": 0, "consumerOffset": 5, "lag": None},
    {"topic": "t", "queueId": 12, "consumerOffset": None, "lag": 0, "extra": "x"},
]
COLUMNS = [("topic", "TOPIC"), ("queueId", "QUEUE"), ("consumerOffset", "current offset"),
           ("lag", "LAG")]
PLAIN = ("TOPIC   QUEUE  CURRENT-OFFSET  LAG\n"
         "orders  0      5               -\n"
         "t       12     -               0\n")


@pytest.fixture
def tty_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """An environment in which a terminal is allowed colour and animation."""
    for name in ("NO_COLOR", "CI", "FORCE_COLOR", "TTY_INTERACTIVE", "TTY_COMPATIBLE", "COLUMNS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    return monkeypatch


def text_stream() -> tuple[io.TextIOWrapper, io.BytesIO]:
    raw = io.BytesIO()
    return io.TextIOWrapper(raw, encoding="utf-8"), raw


@contextmanager
def pseudo_terminal() -> Iterator[tuple[io.TextIOWrapper, Callable[[], bytes]]]:
    """A text stream whose isatty() is true, and a function returning what reached it."""
    master, slave = os.openpty()
    stream = os.fdopen(slave, "w", encoding="utf-8")

    def received() -> bytes:
        stream.flush()
        chunks = []
        while select.select([master], [], [], 0.2)[0]:
            try:
                data = os.read(master, 65536)
            except OSError:  # Linux reports EIO once the slave side is closed
                break
            if not data:
                break
            chunks.append(data)
        return b"".join(chunks)

    try:
        yield stream, received
    finally:
        stream.close()
        os.close(master)


# -- JSON lines ----------------------------------------------------------------------------

def test_json_line_is_compact_utf8_and_newline_terminated() -> None:
    obj = {"status": "SEND_OK", "msgId": "7F00", "queueId": 1, "tags": None, "body": "café"}
    assert json_line(obj) == (
        b'{"status":"SEND_OK","msgId":"7F00","queueId":1,"tags":null,"body":"caf\xc3\xa9"}\n')


def test_json_line_with_a_lone_surrogate_is_still_valid_json() -> None:
    line = json_line({"name": "bad\udcff"})
    assert line == b'{"name":"bad\\udcff"}\n'
    assert json.loads(line) == {"name": "bad\udcff"}


def test_emit_json_writes_one_line_and_flushes_it() -> None:
    stream, raw = text_stream()
    out = Output(json=True, stream=stream)
    out.emit_json({"a": 1})
    assert raw.getvalue() == b'{"a":1}\n'  # visible without anyone flushing the wrapper
    out.emit_json({"b": [1, 2]})
    assert raw.getvalue() == b'{"a":1}\n{"b":[1,2]}\n'


def test_json_keeps_order_with_text_written_before_it() -> None:
    stream, raw = text_stream()
    stream.write("first\n")
    Output(stream=stream).emit_json({"then": 2})
    assert raw.getvalue() == b'first\n{"then":2}\n'


# -- tables --------------------------------------------------------------------------------

def test_plain_table_aligns_columns_and_shows_dash_for_unknown() -> None:
    stream, raw = text_stream()
    Output(stream=stream, color=False).table(ROWS, COLUMNS)
    assert raw.getvalue().decode() == PLAIN


def test_a_coloured_table_on_a_narrow_screen_has_the_plain_ones_lines(tty_env: pytest.MonkeyPatch) -> None:
    """A name wider than the screen is neither cut nor folded over lines (it is copied from the
    table): each row is one line, as in the plain table, for the terminal to wrap."""
    import re
    tty_env.setenv("COLUMNS", "40")
    rows = [{"topic": "x" * 127, "queueId": 0, "consumerOffset": 5, "lag": None}, ROWS[1]]
    stream, raw = text_stream()
    Output(stream=stream, color=True).table(rows, COLUMNS)
    stream.flush()
    coloured = re.sub(r"\x1b\[[0-9;]*m", "", raw.getvalue().decode())
    stream, raw = text_stream()
    Output(stream=stream, color=False).table(rows, COLUMNS)
    assert [line.split() for line in coloured.splitlines()] == \
        [line.split() for line in raw.getvalue().decode().splitlines()]
    assert len(coloured.splitlines()) == 3


def test_plain_table_without_headers() -> None:
    stream, raw = text_stream()
    Output(stream=stream, color=False).table(ROWS, COLUMNS, headers=False)
    assert raw.getvalue().decode() == "orders  0   5  -\nt       12  -  0\n"


def test_plain_table_with_no_rows_prints_only_the_header() -> None:
    stream, raw = text_stream()
    Output(stream=stream, color=False).table([], [("topic", "TOPIC"), ("lag", "LAG")])
    assert raw.getvalue() == b"TOPIC  LAG\n"


def test_table_in_json_mode_prints_each_whole_row_as_ndjson() -> None:
    stream, raw = text_stream()
    Output(json=True, stream=stream, color=True).table(ROWS, COLUMNS)
    assert raw.getvalue() == (
        b'{"topic":"orders","queueId":0,"consumerOffset":5,"lag":null}\n'
        b'{"topic":"t","queueId":12,"consumerOffset":null,"lag":0,"extra":"x"}\n')


@pytest.mark.parametrize("value, shown", [
    (None, "-"), (True, "true"), (False, "false"), (0, "0"), ([0, 3], "0,3"), ([], "-"),
    ("a b", "a b"), ([None, 1], "-,1"),
])
def test_cell(value: object, shown: str) -> None:
    assert cell(value) == shown


@pytest.mark.parametrize("name, shown", [
    ("LAG", "LAG"), ("current offset", "CURRENT-OFFSET"), ("log_end_offset", "LOG-END-OFFSET"),
])
def test_header(name: str, shown: str) -> None:
    assert header(name) == shown


# -- colour and terminals --------------------------------------------------------------------

def test_no_colour_when_not_a_terminal(tty_env: pytest.MonkeyPatch) -> None:
    stream, raw = text_stream()
    out = Output(stream=stream)
    assert out.color is False
    out.table(ROWS, COLUMNS)
    assert b"\x1b" not in raw.getvalue()


def test_coloured_table_on_a_terminal(tty_env: pytest.MonkeyPatch) -> None:
    with pseudo_terminal() as (stream, received):
        out = Output(stream=stream)
        assert out.color is True
        out.table([{"topic": "[red]literal[/red]", "lag": None}], [("topic", "TOPIC"),
                                                                   ("lag", "LAG")])
        shown = received()
    assert b"\x1b[" in shown
    assert b"TOPIC" in shown and b"LAG" in shown
    assert b"[red]literal[/red]" in shown  # cell text is never read as rich markup
    assert b"-" in shown


@pytest.mark.parametrize("name, value", [("NO_COLOR", "1"), ("TERM", "dumb")])
def test_no_ansi_on_a_terminal_with_no_color_or_dumb_term(
        tty_env: pytest.MonkeyPatch, name: str, value: str) -> None:
    tty_env.setenv(name, value)
    with pseudo_terminal() as (stream, received):
        out = Output(stream=stream)
        out.table(ROWS, COLUMNS)
        shown = received()
    assert out.color is False
    assert b"\x1b" not in shown
    assert shown.replace(b"\r\n", b"\n") == PLAIN.encode()


def test_empty_no_color_does_not_count(tty_env: pytest.MonkeyPatch) -> None:
    tty_env.setenv("NO_COLOR", "")
    with pseudo_terminal() as (stream, _):
        assert color_allowed(stream) is True


def test_force_color_colours_a_pipe_and_no_color_still_wins(tty_env: pytest.MonkeyPatch) -> None:
    """FORCE_COLOR (non-empty) colours output that is not a terminal (``| less -R``), as
    rich and other tools take it; an empty one does not count; NO_COLOR wins over it."""
    stream, raw = text_stream()
    assert color_allowed(stream) is False
    tty_env.setenv("FORCE_COLOR", "")
    assert color_allowed(stream) is False
    tty_env.setenv("FORCE_COLOR", "1")
    out = Output(stream=stream)
    out.table(ROWS, COLUMNS)
    assert out.color is True and b"\x1b[" in raw.getvalue()
    tty_env.setenv("NO_COLOR", "1")
    assert color_allowed(stream) is False
    tty_env.setenv("NO_COLOR", "")
    tty_env.setenv("TERM", "dumb")
    assert color_allowed(stream) is False


def test_color_flag_overrides_detection(tty_env: pytest.MonkeyPatch) -> None:
    with pseudo_terminal() as (stream, _):
        assert Output(stream=stream, color=False).color is False
    stream, _raw = text_stream()
    assert Output(stream=stream, color=True).color is True


# -- stderr ----------------------------------------------------------------------------------

def test_warn_error_and_info_lines_go_to_stderr() -> None:
    stdout, raw = text_stream()
    err = io.StringIO()
    out = Output(stream=stdout, err=err)
    out.warn("offset past the end")
    out.error("topic not found: T\nsee: mqctl topic list")
    out.info("sent 3 messages")
    assert err.getvalue() == ("mqctl: warning: offset past the end\n"
                              "mqctl: error: topic not found: T see: mqctl topic list\n"
                              "sent 3 messages\n")
    assert raw.getvalue() == b""


def test_quiet_drops_info_but_not_warnings_or_errors() -> None:
    err = io.StringIO()
    out = Output(err=err, quiet=True)
    out.info("sent 3 messages")
    out.warn("w")
    out.error("e")
    assert err.getvalue() == "mqctl: warning: w\nmqctl: error: e\n"


# -- progress --------------------------------------------------------------------------------

def test_progress_is_silent_when_stderr_is_not_a_terminal(tty_env: pytest.MonkeyPatch) -> None:
    err = io.StringIO()
    with Output(err=err).progress(10, "checking") as bar:
        bar.advance()
        bar.advance(5)
    assert isinstance(bar, NullProgress)
    assert err.getvalue() == ""


@pytest.mark.parametrize("name, value", [("CI", "true"), ("TERM", "dumb")])
def test_progress_is_silent_in_ci_or_on_a_dumb_terminal(
        tty_env: pytest.MonkeyPatch, name: str, value: str) -> None:
    tty_env.setenv(name, value)
    with pseudo_terminal() as (err, received):
        with Output(err=err).progress(3, "checking") as bar:
            bar.advance(3)
        assert isinstance(bar, NullProgress)
        assert received() == b""


def test_progress_is_silent_when_quiet(tty_env: pytest.MonkeyPatch) -> None:
    with pseudo_terminal() as (err, received):
        with Output(err=err, quiet=True).progress(3, "checking") as bar:
            bar.advance(3)
        assert received() == b""


def test_progress_bar_on_a_terminal(tty_env: pytest.MonkeyPatch) -> None:
    with pseudo_terminal() as (err, received):
        with Output(err=err).progress(3, "checking segments") as bar:
            assert not isinstance(bar, NullProgress)
            bar.advance(2)
            bar.advance()
        shown = received()
    assert b"checking segments" in shown
    assert b"3/3" in shown


# -- closed stdout -----------------------------------------------------------------------------

def test_write_records_writes_everything_and_flushes() -> None:
    r, w = os.pipe()
    with os.fdopen(r, "rb") as reader, os.fdopen(w, "wb") as writer:
        write_records([b"one\n", b"two\n"], writer)
        assert os.read(reader.fileno(), 100) == b"one\ntwo\n"  # flushed: readable now


def test_write_records_to_a_closed_pipe_raises_broken_pipe() -> None:
    r, w = os.pipe()
    os.close(r)
    with os.fdopen(w, "wb", buffering=0) as writer:
        with pytest.raises(BrokenPipe) as info:
            write_records([b"lost\n"], writer)
    assert info.value.exit_code == 141
    assert info.value.exit_code == 141


def test_emit_json_to_a_closed_pipe_raises_broken_pipe() -> None:
    r, w = os.pipe()
    os.close(r)
    stream = io.TextIOWrapper(os.fdopen(w, "wb", buffering=0), encoding="utf-8")
    with pytest.raises(BrokenPipe):
        Output(stream=stream).emit_json({"a": 1})


def test_reader_closing_stdout_ends_the_writer_with_141_and_no_noise() -> None:
    # `mqctl consume … | head -1`: the writer learns of the closed pipe as BrokenPipe and ends
    # the way mqctl.app does (quiet stdout, exit 141), with nothing on stderr.
    proc = python("""
        import sys
        from mqctl.errors import quiet_broken_pipe
        from mqctl.output import BrokenPipe, write_records
        n = 0
        try:
            while True:
                write_records([b"record %d\\n" % n])
                n += 1
        except BrokenPipe as exc:
            quiet_broken_pipe()
            sys.exit(exc.exit_code)
    """, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    first = proc.stdout.readline()
    proc.stdout.close()
    _, err = proc.communicate(timeout=60)
    assert first == "record 0\n"
    assert err == ""
    assert proc.returncode == 141


# -- start-up cost -----------------------------------------------------------------------------

def test_importing_the_support_modules_does_not_import_rich() -> None:
    code = ("import sys, mqctl.output, mqctl.template, store.timeparse; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('rich', 'typer')))")
    (out,) = finish(python(code, stdout=subprocess.PIPE), timeout=60)
    assert out.strip() == "[]"
