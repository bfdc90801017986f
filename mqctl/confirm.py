"""The question a destructive command asks before it acts, unless given ``--yes``.

Asked only where someone can answer: stdin and stderr both a terminal; elsewhere (a script,
a pipe, CI) the command needs ``--yes`` and says so (exit 2) rather than reading an answer
from data meant for something else. A "no", an empty answer or the end of input (Ctrl-D)
declines: one line says nothing was done, exit 1 — Ctrl-D is an answer, not an interrupt;
Ctrl-C stays one (130, as everywhere).
"""
from __future__ import annotations

import sys

EXIT_DECLINED = 1


def confirm(question: str, action: str, kept: str) -> None:
    """Ask ``question`` (a yes/no question) before ``action`` (a phrase such as "deleting topic
    'T'"); return when the answer is yes, else say ``kept`` (what stays as it was) and exit 1."""
    from store.errors import UsageError
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        raise UsageError(f"{action} needs --yes when not run from a terminal")
    while True:
        sys.stderr.write(f"{question} [y/N]: ")
        sys.stderr.flush()
        try:
            line = sys.stdin.readline()
        except KeyboardInterrupt:
            sys.stderr.write("\n")   # (the error line goes under the question, not after it)
            raise
        if not line:   # end of input: Ctrl-D
            sys.stderr.write("\n")
            answer = "n"
        else:
            answer = line.strip().lower()
        if answer in ("y", "yes"):
            return
        if answer in ("", "n", "no"):
            sys.stderr.write(f"mqctl: not confirmed: {kept}\n")
            sys.stderr.flush()
            raise SystemExit(EXIT_DECLINED)
        sys.stderr.write("please answer y or n\n")
