"""The ``mqctl`` script: the plainest sends without building the Typer app.

``for f in *.json; do mqctl send t "$(cat "$f")"; done`` starts a process per message, and
importing Typer and building a command is most of such a process's time; in
``producer | mqctl send t`` it is half of what a 100 MB pipe of 64 KiB lines costs. The
exact shapes ``mqctl [--store DIR] send TOPIC BODY`` and ``mqctl [--store DIR] send TOPIC``
(stdin) — no other flag, TOPIC and BODY not starting with ``-`` — are therefore run here
directly: the same :func:`mqctl.sender.run_send` inside the same
:func:`mqctl.errors.guard`, so their output, errors and exit codes are those of the full
command line. The common consumer, ``mqctl [--store DIR] consume TOPIC`` with only the flags of
:data:`CONSUME_FLAGS` (``-g``, ``-o``, ``-e``, ``-j``, ``-c``, ``--idle-timeout``,
``--no-group``), is run here too (:func:`quick_consume`): in ``mqctl consume t -g g -e >
out`` of 100 MB, Typer was a fifth of the run. Its request goes through the same
:func:`mqctl.consumerun.run_consume`, so the checks, messages and exit codes are the
command line's. Anything else (help, completion, any other flag, form or command, a flag
given twice, a value Typer would refuse) goes to :func:`mqctl.app.main`. ``mqctl [--store
DIR] --version`` (or ``-V``) is answered here too, as the root's eager option answers it.
"""
from __future__ import annotations

import gc
import os
import sys

from mqctl.lazymods import defer
from mqctl.startgc import hold

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import NoReturn

COMPLETE_VAR = "_MQCTL_COMPLETE"   # the shell-completion request (Typer's name for mqctl)


def store_prefix(argv: list[str]) -> tuple[str | None, list[str]]:
    """A leading ``--store DIR`` or ``--store=DIR`` (None when there is none), and the rest."""
    if argv[:1] == ["--store"] and len(argv) >= 2:
        return argv[1], argv[2:]
    if argv[:1] and argv[0].startswith("--store="):
        return argv[0].split("=", 1)[1], argv[1:]
    return None, argv


def command_word(argv: list[str]) -> str | None:
    """The command a command line names, past the root's options (``--store DIR``, ``--utc``)."""
    i = 0
    while i < len(argv):
        if argv[i] == "--store":
            i += 2
        elif argv[i].startswith("--store=") or argv[i] == "--utc":
            i += 1
        else:
            return argv[i]
    return None


def _stopped_before_joining(_signum: int, _frame: object) -> None:
    # A consume stops on SIGINT/SIGTERM with exit 0 (cli.md); its own handlers are installed
    # before it joins its group, and until then it has taken nothing and has nothing to persist.
    raise SystemExit(0)


def quick_send(argv: list[str]) -> tuple[str | None, str, str | None] | None:
    """``(store flag, topic, body)`` when ``argv`` is exactly a one-message send (``body``
    None: a send of stdin's lines with no flag), else None."""
    store, rest = store_prefix(argv)
    if len(rest) not in (2, 3) or rest[0] != "send" or any(w.startswith("-") for w in rest[1:]):
        return None
    if store is not None and (not store or store.startswith("-")):
        return None
    return store, rest[1], rest[2] if len(rest) == 3 else None


# ``consume``'s flags taken by the quick path: the request field each sets, and whether it
# takes a value (the defaults are the command's, mqctl/commands/consume.py)
CONSUME_FLAGS: dict[str, tuple[str, bool]] = {
    "-g": ("group", True), "--group": ("group", True), "--no-group": ("no_group", False),
    "-o": ("from_", True), "--from": ("from_", True), "-e": ("exit_at_end", False),
    "--exit-at-end": ("exit_at_end", False), "-j": ("json", False), "--json": ("json", False),
    "-c": ("count", True), "--count": ("count", True), "--idle-timeout": ("idle_timeout", True),
}


def quick_consume(argv: list[str]) -> tuple[str | None, dict[str, object]] | None:
    """``(store flag, the request's fields)`` when ``argv`` is a ``consume`` of only
    :data:`CONSUME_FLAGS`, each once, else None. A value is the next word, as Click takes it
    (``-o -10`` is kcat's ten before the end), or after ``=`` for a long flag; ``--count``
    only as Typer takes it (a whole number of at least 1: anything else is Typer's error)."""
    store, rest = store_prefix(argv)
    if len(rest) < 2 or rest[0] != "consume" or rest[1].startswith("-"):
        return None
    if store is not None and (not store or store.startswith("-")):
        return None
    fields: dict[str, object] = {"topic": rest[1]}
    i = 2
    while i < len(rest):
        flag, eq, value = rest[i].partition("=")
        spec = CONSUME_FLAGS.get(flag)
        if spec is None or spec[0] in fields or (eq and (not spec[1] or not flag.startswith("--"))):
            return None
        name, takes = spec
        if not takes:
            fields[name] = True
            i += 1
            continue
        if not eq:
            if i + 1 == len(rest):
                return None
            value = rest[i + 1]
            i += 1
        i += 1
        if name == "count":
            if not (value.isascii() and value.isdigit()) or int(value) < 1:
                return None
            fields[name] = int(value)
        else:
            fields[name] = value
    return store, fields


# Batch reads and writes use numpy, whose OpenBLAS starts a spinning thread per core when it
# loads: ~0.1 CPU-second per process, for linear algebra mqctl never does. Its thread count is
# set in the C environment only (what OpenBLAS reads), not in os.environ, from which handlers,
# check-back commands and Spark get theirs: those keep the user's.
_BLAS_THREAD_VARS = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")


def main() -> None:
    try:
        run_command(sys.argv[1:])
    except KeyboardInterrupt:
        # Ctrl-C before the command's error guard (mqctl.errors.guard) is in place: while
        # Typer or the store is being imported, in the first tenth of a second or so. The
        # guard's answer all the same: one line, exit 130, no traceback.
        from mqctl.errors import EXIT_INTERRUPTED, print_error
        print_error("interrupted")
        raise SystemExit(EXIT_INTERRUPTED) from None
    finally:
        # Exiting, the interpreter runs the cyclic garbage collector over every object it
        # still holds, more than once (~10 ms with Typer loaded, ~40 ms after a consume of
        # 100,000 messages, measured). Frozen, they are only freed: nothing is left to collect
        # but cycles, which the process's end reclaims.
        gc.freeze()


def run_command(argv: list[str]) -> None:
    """Run the command line ``argv`` (exits through SystemExit with the command's code)."""
    if not any(v in os.environ for v in _BLAS_THREAD_VARS):
        os.putenv("OPENBLAS_NUM_THREADS", "1")
    if sys.stdin is None or sys.stdout is None or sys.stderr is None:
        _hold_closed_standard_streams()
    completing = bool(os.environ.get(COMPLETE_VAR))
    word = None if completing else command_word(argv)
    if word == "consume":
        import signal
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, _stopped_before_joining)
    elif (word == "top" and "--json" in argv) or (word == "tx" and "check" in argv and "--loop" in argv):
        # long-running too, and stopped by SIGINT as consume is, also when started with it
        # ignored (``&`` in a script) and signalled before their own handler is in place
        import signal
        signal.signal(signal.SIGINT, _stopped_before_joining)
    if store_prefix(argv)[1] in (["--version"], ["-V"]) and not completing:
        sys.exit(_version(argv))   # (scripts ask it to see that mqctl is there: no Typer app for it)
    quick = None if completing else quick_send(argv)
    if quick is None:
        consume = None if completing else quick_consume(argv)
        if consume is None:
            from mqctl.app import main as full
            full(argv)
            return
        hold()   # (no collection while the quick path loads its modules: mqctl/startgc.py)
        defer()  # (nor inspect, which only dataclasses imports: mqctl/lazymods.py)
        _end_consume(_consume(argv, *consume))
    hold()
    defer()
    from mqctl.errors import guard
    from mqctl.sender import SendRequest, run_send
    from mqctl.state import State, resolve_store_path

    def run() -> int:
        store, topic, body = quick
        st = State(resolve_store_path(store))
        try:
            run_send(st, SendRequest(topic=topic, body=body))
        finally:
            st.close()
        return 0

    sys.exit(guard(run, argv))


def _hold_closed_standard_streams() -> None:
    """Started with a standard stream closed (``<&-``, ``>&-``, ``2>&-``; Python then sets it
    to None): put /dev/null on its descriptor, so that no file the command opens takes
    descriptor 0, 1 or 2 and is read as its input, or written with its output, by mistake.

    Standard input reads as empty. Standard output is opened read-only: writing data fails
    (EBADF) as it would on the closed descriptor, so nothing is counted as written (a consumer
    commits nothing) and the command says so with exit 1. Diagnostics on a closed standard
    error are dropped; the exit code stays the command's."""
    for fd, mode in ((0, os.O_RDONLY), (1, os.O_RDONLY), (2, os.O_WRONLY)):
        try:
            os.fstat(fd)
            continue
        except OSError:
            pass
        null = os.open(os.devnull, mode)
        if null != fd:
            os.dup2(null, fd)
            os.close(null)
    if sys.stdin is None:
        sys.stdin = open(0, encoding="utf-8", closefd=False)
    if sys.stdout is None:
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)
    if sys.stderr is None:
        sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False)


def _version(argv: list[str]) -> int:
    """``mqctl [--store DIR] --version`` (or ``-V``): the root's answer, in the same guard."""
    from mqctl import __version__
    from mqctl.errors import guard

    def run() -> int:
        sys.stdout.write(f"mqctl {__version__}\n")
        return 0
    return guard(run, argv)


def _consume(argv: list[str], store: str | None, fields: dict[str, object]) -> int:
    """The quick consume: the request the command line would make, inside the same guard."""
    from mqctl.consumerun import ConsumeRequest, run_consume
    from mqctl.errors import guard
    from mqctl.state import State, resolve_store_path

    def run() -> int:
        st = State(resolve_store_path(store))
        try:
            run_consume(st, ConsumeRequest(**{**CONSUME_DEFAULTS, **fields}))  # type: ignore[arg-type]
        finally:
            st.close()
        return 0
    return guard(run, argv)


def _end_consume(code: int) -> NoReturn:
    """The quick consume's end. guard flushed its output; run_consume returned after the
    member's shutdown (offsets committed and settled, locks released, the group left). When no
    other thread runs (the offsets' writer thread ended: no commit can be out) and nothing
    imported ``atexit`` (whose handlers, a coverage tool's say, must run), what the
    interpreter's finalization still does (every module torn down, every object freed: ~3 ms
    of CPU after 100 MB of messages) changes nothing a user can see: the process ends at once.
    Else (a thread still running, an atexit handler perhaps, stderr's flush failing) it ends
    as any other command."""
    import threading
    if threading.active_count() == 1 and "atexit" not in sys.modules:
        try:
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        else:
            os._exit(code)
    sys.exit(code)


# every field of ConsumeRequest with the command's default (mqctl/commands/consume.py)
CONSUME_DEFAULTS: dict[str, object] = {
    "group": None, "no_group": False, "orderly": False, "broadcast": False, "from_": "last", "tag": None,
    "exec_": None, "batch": 1, "threads": 4, "count": None, "exit_at_end": False, "idle_timeout": None,
    "client_id": None, "strategy": None, "queues": None, "max_reconsume": None, "suspend_ms": None,
    "consume_timeout": "15m", "retry_delay": None, "dedup": False, "json": False, "format_": None,
    "rebalance_interval": "5s", "to": None, "output": None, "flush": None,
}
