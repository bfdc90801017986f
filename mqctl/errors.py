"""The CLI's one error boundary: store errors and interruptions become exit codes.

``StoreError`` subclasses carry their contract exit code (``store/errors.py``); this module
prints them as one line ``mqctl: error: …`` on stderr. ``MQCTL_DEBUG=1`` re-raises for the
traceback instead.
"""
from __future__ import annotations

import os
import sys

EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141


def print_error(message: str) -> None:
    line = " ".join(str(message).split("\n"))
    try:
        sys.stderr.write(f"mqctl: error: {line}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


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
