"""The cyclic garbage collector while a quick command starts.

Starting, ``mqctl consume`` imports ~180 modules and builds their classes and functions:
objects that live as long as the process, which the collector's young generations walk again
and again (~35 collections before the first message, 3-5 ms of a 55 ms process, measured).
The script's quick paths (:mod:`mqctl.entry`) turn it off as they start (:func:`hold`) and
back on once the command's machinery is loaded (:func:`release`), what was allocated until
then frozen (never walked again). A long-running consumer or sender collects as before from
there on; a command run any other way is not touched (:func:`release` does nothing).
"""
from __future__ import annotations

import gc

_held: list[bool] = []


def hold() -> None:
    """No collection until :func:`release` (the collector was on: it is turned back on)."""
    if gc.isenabled():
        gc.disable()
        _held.append(True)


def release() -> None:
    """The start-up is over: freeze what it allocated and collect again (after :func:`hold`)."""
    if _held:
        _held.clear()
        gc.freeze()
        gc.enable()
