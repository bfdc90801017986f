"""The CLI's one error boundary (:func:`guard`): store errors, a closed stdout, interruptions,
I/O errors and anything unexpected become exit codes.

``StoreError`` subclasses carry their contract exit code (``store/errors.py``); this module
prints them as one line ``mqctl: error: …`` on stderr. ``MQCTL_DEBUG=1`` re-raises for the
traceback instead. Typer-free: the quick send of ``mqctl/entry.py`` runs inside it too.
"""
from __future__ import annotations

import os
import signal
import sys

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Any, Callable

EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141
EXIT_TERMINATED = 128 + signal.SIGTERM


class StdoutWriteError(OSError):
    """A write to stdout failed other than by a closed pipe (a full disk, a file size limit,
    EIO): reported as ``cannot write to standard output: …`` (exit 1), not as the store's
    error. Raised from the write's own error (:func:`stdout_write_error`) by every stdout
    writer (``PipeGuard``, the consumer's stdout sink), which alone know where they wrote."""


def stdout_write_error(exc: OSError) -> OSError:
    """``exc``, raised by a write to stdout, as the error to raise in its place: a closed
    pipe, an interrupted or non-blocking write stay what they are."""
    if isinstance(exc, (BrokenPipeError, InterruptedError, BlockingIOError, StdoutWriteError)):
        return exc
    return StdoutWriteError(exc.errno, exc.strerror)


class Terminated(BaseException):
    """SIGTERM, where a command ends as on Ctrl-C (its ``finally`` blocks run: a send makes
    what it stored durable and says how much) but exits 143. A ``BaseException``, as
    ``KeyboardInterrupt``: no ``except Exception`` on the way swallows it."""


def _raise_terminated(signum: int, _frame: object) -> None:
    # once: a second SIGTERM while the first one's clean-up runs is ignored, so that the
    # clean-up is not cut short
    signal.signal(signum, signal.SIG_IGN)
    raise Terminated()


def end_as_interrupt(*signums: int) -> Callable[[], None]:
    """From now on each of ``signums`` (SIGTERM, SIGHUP) raises :class:`Terminated`, as
    Ctrl-C raises ``KeyboardInterrupt`` (main thread only), unless whoever started this
    process made it ignore that signal (``nohup``): a send ends on SIGTERM as on Ctrl-C but
    exits 143; a long-running view ends on either as on Ctrl-C (``top``: its terminal
    restored, exit 0). Returns the function that puts the handlers back."""
    saved = {sig: signal.getsignal(sig) for sig in signums}
    for sig, old in saved.items():
        if old == signal.SIG_DFL:
            signal.signal(sig, _raise_terminated)

    def restore() -> None:
        for sig, old in saved.items():
            if old == signal.SIG_DFL:
                signal.signal(sig, old)
    return restore


def print_error(message: str) -> None:
    # one line: a continuation line's indent goes (Click's "Choose from:\n\tbash,\n\tzsh")
    first, *rest = str(message).split("\n")
    line = " ".join([first, *(part.lstrip() for part in rest)])
    try:
        sys.stderr.write(f"mqctl: error: {line}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def warn(msg: str) -> None:
    """``mqctl: warning: MSG`` on stderr (a consumer's warnings: nothing stops), and the
    warnings of the store handles ``mqctl`` opens (``State.store``): the store's own warning
    line (:func:`store.errors.say`, one definition for both), never a logging record, whatever a
    library loaded in the process did to logging."""
    from store.errors import say
    say("warning", msg)


def error_line(exc: BaseException) -> str:
    """A store error as the CLI says it: the store states the fact, the CLI adds the remedy
    that is a command of its own (a topic a send may not create: how to create it, and
    which setting refused)."""
    from store.errors import TopicNotFoundError
    topic = exc.topic if isinstance(exc, TopicNotFoundError) else None
    if topic is not None:
        return (f"topic {topic!r} does not exist, and topics are not created on send here "
                f"(mqctl init --no-auto-create or MQCTL_AUTO_CREATE=0); create it with: mqctl topic create {topic}")
    return str(exc)


def debug() -> bool:
    return os.environ.get("MQCTL_DEBUG", "") not in ("", "0")


def quiet_broken_pipe() -> None:
    """After EPIPE on stdout: point stdout at /dev/null so the interpreter's final flush
    does not print a second error."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except OSError:
        pass


def guard(run: Callable[[], int], argv: list[str]) -> int:
    """Run one command (``run`` returns its exit code) inside the CLI's one error boundary:
    store errors, a closed stdout, Ctrl-C, I/O errors, unencodable text and anything
    unexpected each become the contract's exit code and one line on stderr. Typer-free, so
    the quick path of ``mqctl.entry`` shares it."""
    from store.errors import StoreError
    # A file-size limit must fail the write (EFBIG), not kill the process.
    if hasattr(signal, "SIGXFSZ"):
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    from mqctl.output import BrokenPipe
    sys.stdout = PipeGuard(sys.stdout)   # (a duck-typed proxy of the real stream)
    if not isinstance(sys.stderr, StderrGuard):
        sys.stderr = StderrGuard(sys.stderr)
    try:
        code = run()
    except StoreError as exc:
        if debug():
            raise
        print_error(error_line(exc))
        code = exc.exit_code
    except (BrokenPipe, BrokenPipeError):
        quiet_broken_pipe()
        code = EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        print_error("interrupted")
        code = EXIT_INTERRUPTED
    except Terminated:
        print_error("terminated")
        code = EXIT_TERMINATED
    except OSError as exc:
        if debug():
            raise
        if isinstance(exc, StdoutWriteError) or _stdout_closed(exc) or hung_up(1, exc):
            lost = stdout_failure(exc)
            quiet_broken_pipe()
            print_error(lost)
        else:
            from store.errors import io_error
            # (an error that names its file says which: a store without access, a lost file)
            what = f"access {exc.filename}" if exc.filename else "complete the operation"
            print_error(str(io_error(exc, what)))
        code = 1
    except UnicodeEncodeError as exc:
        if debug():
            raise
        code = _show_unencodable(exc, argv)
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
    except OSError as exc:
        # (data printed last, and held in the buffer until now, could not be written either)
        lost = stdout_failure(exc)
        quiet_broken_pipe()
        if not code:
            print_error(lost)
            code = 1
    return code


def stdout_failure(exc: OSError) -> str:
    """The error line's text for data that could not be written to stdout; a hang-up of its
    terminal is acted on (:func:`hung_up`), as SIGHUP would be."""
    if _stdout_closed(exc):
        return "cannot write to standard output: it is closed"
    if hung_up(1, exc):
        hang_up()
        return "cannot write to standard output: its terminal hung up"
    return f"cannot write to standard output: {exc.strerror or exc}"


def hung_up(fd: int, exc: OSError) -> bool:
    """Whether ``exc``, from a write to ``fd``, is its terminal hanging up (the window closed,
    ssh cut, the pty's master side closed): every write then fails with EIO, and so does every
    terminal request (where a descriptor that is no terminal fails them with ENOTTY)."""
    import errno
    import termios
    if exc.errno != errno.EIO:
        return False
    try:
        termios.tcgetattr(fd)
    except termios.error as err:
        return bool(err.args[0] == errno.EIO)
    except (OSError, ValueError):
        pass
    return False


def hang_up() -> None:
    """Act on a hang-up of mqctl's terminal as on the SIGHUP that the terminal's controlling
    process and foreground group get, and mqctl does not when it is neither (started in a
    session of its own, as supervisors and test harnesses do): a SIGHUP ignored (``nohup``)
    changes nothing, the output is lost; one handled runs its handler (``tx check --loop``
    ends its loop, exit 0); by default mqctl ends as SIGHUP ends it."""
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:
        signal.raise_signal(signal.SIGHUP)


class StderrGuard:
    """stderr, whose failures cost only the diagnostics, never the command's work or exit code
    (as a closed stderr, ``2>&-``, does): a write or flush that fails (the reader of a pipe
    left, its terminal hung up, a full disk) is dropped, and so is every later one: stderr is
    pointed at /dev/null, which commands started from now on inherit too. A hang-up of its
    terminal is acted on as SIGHUP would be (:func:`hang_up`)."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, data: str) -> int:
        try:
            return int(self._stream.write(data))
        except (OSError, ValueError) as exc:
            self._lost(exc)
            return len(data)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except (OSError, ValueError) as exc:
            self._lost(exc)

    def _lost(self, exc: Exception) -> None:
        import io
        try:
            fd = self._stream.fileno()
        except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
            fd = -1
        hung = isinstance(exc, OSError) and fd >= 0 and hung_up(fd, exc)
        if fd >= 0:
            try:
                null = os.open(os.devnull, os.O_WRONLY)
                os.dup2(null, fd)
                os.close(null)
            except OSError:
                pass
        try:   # what the stream still holds would fail again: write it to /dev/null now
            self._stream.flush()
        except (OSError, ValueError):
            pass
        if hung:
            hang_up()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _stdout_closed(exc: OSError) -> bool:
    """Whether ``exc`` is a write to a standard output that was closed when mqctl started
    (``>&-``: ``mqctl.entry`` holds its descriptor with a read-only /dev/null)."""
    import errno
    import fcntl
    if exc.errno != errno.EBADF:
        return False
    try:
        return fcntl.fcntl(1, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDONLY
    except OSError:
        return True


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


_TEXT_DIRECT = 8192   # (a text this long would go past the text layer's buffer anyway)


class PipeGuard:
    """stdout, with EPIPE turned into :class:`mqctl.output.BrokenPipe` for every writer,
    including ones that print tables or help through ``sys.stdout``."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self.buffer = PipeGuard(stream.buffer) if hasattr(stream, "buffer") else None

    def write(self, data: Any) -> Any:
        try:
            if isinstance(data, str) and len(data) > _TEXT_DIRECT and self.buffer is not None:
                # The text layer ignores its buffer's short count (see write_all): a big
                # text goes to the buffer here, where a short write is finished or fails.
                self._stream.flush()
                self.buffer.write(data.encode(self._stream.encoding, self._stream.errors))
                return len(data)
            if self.buffer is None and isinstance(data, (bytes, bytearray, memoryview)):
                from mqctl.output import write_all
                return write_all(self._stream, data)
            return self._stream.write(data)
        except BrokenPipeError as exc:
            from mqctl.output import BrokenPipe
            raise BrokenPipe("stdout was closed by the reader") from exc
        except OSError as exc:
            raise stdout_write_error(exc) from exc

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError as exc:
            from mqctl.output import BrokenPipe
            raise BrokenPipe("stdout was closed by the reader") from exc
        except OSError as exc:
            raise stdout_write_error(exc) from exc

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)
