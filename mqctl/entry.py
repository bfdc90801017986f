"""The ``mqctl`` script: the plainest sends without building the Typer app.

``for f in *.json; do mqctl send t "$(cat "$f")"; done`` starts a process per message, and
importing Typer and building a command is most of such a process's time (issue 14); in
``producer | mqctl send t`` it is half of what a 100 MB pipe of 64 KiB lines costs (issue
26). The exact shapes ``mqctl [--store DIR] send TOPIC BODY`` and ``mqctl [--store DIR] send
TOPIC`` (stdin) — no other flag, TOPIC and BODY not starting with ``-`` — are therefore run
here directly: the same :func:`mqctl.sender.run_send` inside the same
:func:`mqctl.errors.guard`, so their output, errors and exit codes are those of the full
command line. Anything else (help, completion, any other flag or command) goes to
:func:`mqctl.app.main`.
"""
from __future__ import annotations

import gc
import os
import sys

COMPLETE_VAR = "_MQCTL_COMPLETE"   # the shell-completion request (Typer's name for mqctl)


def quick_send(argv: list[str]) -> tuple[str | None, str, str | None] | None:
    """``(store flag, topic, body)`` when ``argv`` is exactly a one-message send (``body``
    None: a send of stdin's lines with no flag), else None."""
    store: str | None = None
    rest = argv
    if rest[:1] == ["--store"] and len(rest) >= 2:
        store, rest = rest[1], rest[2:]
    elif rest[:1] and rest[0].startswith("--store="):
        store, rest = rest[0].split("=", 1)[1], rest[1:]
    if len(rest) not in (2, 3) or rest[0] != "send" or any(w.startswith("-") for w in rest[1:]):
        return None
    if store is not None and (not store or store.startswith("-")):
        return None
    return store, rest[1], rest[2] if len(rest) == 3 else None


# Batch reads and writes use numpy, whose OpenBLAS starts a spinning thread per core when it
# loads: ~0.1 CPU-second per process, for linear algebra mqctl never does. Its thread count is
# set in the C environment only (what OpenBLAS reads), not in os.environ, from which handlers,
# check-back commands and Spark get theirs: those keep the user's.
_BLAS_THREAD_VARS = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")


def main() -> None:
    try:
        run_command(sys.argv[1:])
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
    if sys.stdin is None:
        # Started with standard input closed (``<&-``): read it as empty, and keep descriptor
        # 0 taken, so that no file the command opens can be read as its input by mistake.
        sys.stdin = open(os.open(os.devnull, os.O_RDONLY), encoding="utf-8")
    quick = None if os.environ.get(COMPLETE_VAR) else quick_send(argv)
    if quick is None:
        from mqctl.app import main as full
        full(argv)
        return
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
