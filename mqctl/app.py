"""The root of the command line: global options, every command group, one error boundary.

Each command group lives in its own module under ``mqctl/commands``; this file is the table
of contents. :func:`main` is the only place that turns exceptions into exit codes.
"""
from __future__ import annotations

import signal
import sys
from typing import Annotated, Optional

import typer

from . import __version__
from .commands import admin, bench, consume, dlq, msg, offsets, send, sparkcmd, storecmd, topic, tx
from .errors import EXIT_BROKEN_PIPE, EXIT_INTERRUPTED, debug, print_error, quiet_broken_pipe
from .options import State, resolve_store_path

EPILOG = (
    "Exit codes: 0 ok, 1 operation or handler failed, 2 usage, 3 not found, 4 conflict, "
    "5 data error, 130 interrupted, 141 stdout closed."
)

app = typer.Typer(
    name="mqctl",
    help="A RocketMQ-style message queue in a directory: no broker, many processes, one store.",
    epilog=EPILOG,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"mqctl {__version__}\n")
        raise typer.Exit(0)


@app.callback()
def root(
    ctx: typer.Context,
    store: Annotated[Optional[str], typer.Option(
        "--store", metavar="DIR",
        help="Store directory (else $MQCTL_STORE, else ~/.mqctl/store).")] = None,
    version: Annotated[bool, typer.Option(
        "--version", "-V", callback=_version, is_eager=True, help="Print the version and exit.")] = False,
) -> None:
    """A RocketMQ-style message queue in a directory: no broker, many processes, one store."""
    ctx.obj = State(resolve_store_path(store))
    ctx.call_on_close(ctx.obj.close)


# -- the table of contents -----------------------------------------------------------------
topic.register(app)
send.register(app)
consume.register(app)
msg.register(app)
storecmd.register(app)
tx.register(app)
offsets.register(app)
admin.register(app)
dlq.register(app)
sparkcmd.register(app)
bench.register(app)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``mqctl`` script: run the app, map every failure to an exit code."""
    from store.errors import StoreError
    from typer import Abort, Exit
    from typer._click.exceptions import ClickException

    # A file-size limit must fail the write (EFBIG), not kill the process.
    if hasattr(signal, "SIGXFSZ"):
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    from .output import BrokenPipe
    command = typer.main.get_command(app)
    sys.stdout = _PipeGuard(sys.stdout)  # type: ignore[assignment]
    code = 0
    try:
        rv = command.main(args=argv, prog_name="mqctl", standalone_mode=False)
        code = rv if isinstance(rv, int) else 0
    except Exit as exc:
        code = exc.exit_code
    except ClickException as exc:
        _show_usage_error(exc)
        code = exc.exit_code
    except StoreError as exc:
        if debug():
            raise
        print_error(str(exc))
        code = exc.exit_code
    except (BrokenPipe, BrokenPipeError):
        quiet_broken_pipe()
        code = EXIT_BROKEN_PIPE
    except (KeyboardInterrupt, Abort):
        print_error("interrupted")
        code = EXIT_INTERRUPTED
    except OSError as exc:
        if debug():
            raise
        from store.fsutil import io_error
        print_error(str(io_error(exc, "complete the operation")))
        code = 1
    except UnicodeEncodeError as exc:
        if debug():
            raise
        code = _show_unencodable(exc, sys.argv[1:] if argv is None else argv)
    except Exception as exc:  # never a traceback for the user; MQCTL_DEBUG=1 shows it
        if debug():
            raise
        print_error(f"internal error: {type(exc).__name__}: {exc} (run with MQCTL_DEBUG=1 for the traceback)")
        code = 1
    try:
        sys.stdout.flush()
    except (BrokenPipe, BrokenPipeError):
        quiet_broken_pipe()
        code = code or EXIT_BROKEN_PIPE
    sys.exit(code)


def _show_unencodable(exc: UnicodeEncodeError, argv: list[str]) -> int:
    """Text that cannot be encoded holds lone surrogates: bytes of an argument that were not
    UTF-8 (Python keeps them as surrogate escapes) or a ``\\ud800`` escape in JSON input.
    Either is bad input, never an internal error: exit 2 when it came from the command line,
    else 5 (data)."""
    bad = str(exc.object[exc.start:exc.end])
    if any(bad in arg for arg in argv):
        try:
            shown = repr(bad.encode("utf-8", "surrogateescape"))  # the bytes as given
        except UnicodeEncodeError:
            shown = ascii(bad)
        print_error(f"an argument is not valid UTF-8 text ({shown}) (see 'mqctl --help')")
        return 2
    print_error(f"input is not valid text: {exc.reason} ({bad!r})")
    return 5


def _show_usage_error(exc: Exception) -> None:
    """Typer's own errors (unknown flag, bad value, missing argument) as the contract's one
    line ``mqctl: error: … (see 'mqctl CMD --help')``; a bare command group still prints
    its help."""
    from typer._click.exceptions import NoArgsIsHelpError
    if isinstance(exc, NoArgsIsHelpError):
        exc.show()
        return
    message = exc.format_message()  # type: ignore[attr-defined]
    ctx = getattr(exc, "ctx", None)
    if ctx is not None:
        message = f"{message} (see '{ctx.command_path} --help')"
    print_error(message)


class _PipeGuard:
    """stdout, with EPIPE turned into :class:`BrokenPipe` (see its docstring) for every
    writer, including ones that print tables or help through ``sys.stdout``."""

    def __init__(self, stream):  # type: ignore[no-untyped-def]
        self._stream = stream
        self.buffer = _PipeGuard(stream.buffer) if hasattr(stream, "buffer") else None

    def write(self, data):  # type: ignore[no-untyped-def]
        try:
            return self._stream.write(data)
        except BrokenPipeError as exc:
            from .output import BrokenPipe
            raise BrokenPipe("stdout was closed by the reader") from exc

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError as exc:
            from .output import BrokenPipe
            raise BrokenPipe("stdout was closed by the reader") from exc

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return getattr(self._stream, name)
