"""Named crash points, for tests that kill a process at an exact step and check what survives.

Code marks a step with ``failpoint("tx-commit-after-real")``. Nothing happens unless the
environment variable ``MQCTL_FAILPOINTS`` names that point when this module is first imported;
then the process kills itself with SIGKILL at that step (exit status 137 in a shell, -9 from
``subprocess``): no ``finally`` blocks, no atexit handlers, no buffered output flushed —
what a ``kill -9`` or a power cut at that moment leaves behind (the page cache aside).

Grammar: a comma- or space-separated list of ``NAME`` (crash the first time NAME is reached)
or ``NAME:N`` (crash the N-th time, N >= 1)::

    MQCTL_FAILPOINTS=tx-commit-after-real mqctl tx commit 0A1B...
    MQCTL_FAILPOINTS="tx-check-after-op:2" mqctl tx check --check-cmd ./answer.sh

The environment is read once, at import. When no point is armed the cost of a call is one
lookup in an empty dict. Names are kebab-case, prefixed by the component (``tx-…``), and
listed in the docstring of the module that places them.
"""
from __future__ import annotations

import os
import re
import signal

ENV_VAR = "MQCTL_FAILPOINTS"


def _parse(spec: str) -> dict[str, int]:
    """``"a,b:3"`` -> ``{"a": 1, "b": 3}``; malformed counts are read as 1."""
    armed: dict[str, int] = {}
    for item in re.split(r"[,\s]+", spec.strip()):
        if not item:
            continue
        name, _, count = item.partition(":")
        armed[name] = int(count) if count.isdigit() and int(count) > 0 else 1
    return armed


_ARMED: dict[str, int] = _parse(os.environ.get(ENV_VAR, ""))


def failpoint(name: str) -> None:
    """Kill this process here if ``name`` is armed and this is the armed hit; else return."""
    if name not in _ARMED:
        return
    _ARMED[name] -= 1
    if _ARMED[name] > 0:
        return
    os.write(2, f"mqctl: failpoint {name}: killing the process\n".encode())
    os.kill(os.getpid(), signal.SIGKILL)
    os._exit(137)  # not reached: SIGKILL to oneself is delivered before kill() returns
