"""Global options anywhere on the line: ``mqctl send t x --store S`` is ``mqctl --store S send
t x`` (``--utc`` likewise), and ``mqctl --json topic list`` is ``mqctl topic list --json``.

Click binds an option to the command it follows. Users of kcat, rpk and kubectl put
``--store`` and ``--json`` wherever they like, so argv is rearranged once, before parsing,
with the command tree in hand: ``--store DIR`` (or ``--store=DIR``) and ``--utc`` found after
a command name move to the front, and ``--json``/``-j`` found before the command that has it moves to
just after that command's name. Option values are skipped by their option's own arity (a
``--tag --store`` keeps ``--store`` as the tag), and nothing after ``--`` is touched.
"""
from __future__ import annotations

from typing import Any

STORE = "--store"
UTC = "--utc"
JSON = ("--json", "-j")


def normalize(argv: list[str], root: Any) -> list[str]:
    front: list[str] = []
    out: list[str] = []
    pending_json: list[str] = []
    node = root
    leaf = False
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            out.extend(argv[i:])
            break
        if arg == STORE:
            if i + 1 == len(argv):   # no value: the root alone says so
                return [STORE]
            front.extend(argv[i:i + 2])
            i += 2
            continue
        if arg.startswith(STORE + "=") or arg.startswith(UTC + "="):
            front.append(arg)
            i += 1
            continue
        if arg == UTC:
            front.append(arg)
            i += 1
            continue
        if not leaf and arg in JSON:
            pending_json.append(arg)
            i += 1
            continue
        if arg.startswith("-"):
            out.append(arg)
            takes = _takes_value(node, arg)
            if takes and i + 1 < len(argv):
                out.append(argv[i + 1])
                i += 1
            i += 1
            continue
        out.append(arg)
        i += 1
        if leaf:
            continue
        # get_command, not .commands: the root loads a command's module when asked for it
        sub = node.get_command(None, arg) if hasattr(node, "get_command") and hasattr(node, "commands") else None
        if sub is None:          # unknown command, or an argument of a group: leave the rest
            leaf = True
            out.extend(pending_json)
            pending_json = []
            continue
        node = sub
        if not hasattr(sub, "commands"):
            leaf = True
            out.extend(pending_json)
            pending_json = []
    out.extend(pending_json)     # no command had it: Click reports the flag where it was
    return front + out


def _takes_value(command: Any, arg: str) -> bool:
    """Whether ``arg`` (an option of ``command``) consumes the next word."""
    if "=" in arg:
        return False
    for param in getattr(command, "params", ()):
        if arg in getattr(param, "opts", ()) or arg in getattr(param, "secondary_opts", ()):
            return not getattr(param, "is_flag", False) and not getattr(param, "count", False)
    return False
