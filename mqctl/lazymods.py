"""Standard modules that the quick paths load only because another module imports them.

``dataclasses`` imports ``inspect`` (and with it ``ast``, ``dis``, ``tokenize``, ``token``,
``linecache``: ~4 ms of a ~50 ms ``mqctl consume``, measured) for one use, a docstring for a
dataclass that has none (every class the quick paths build has one: tests/cli/test_startup.py
checks). ``pathlib`` imports ``urllib.parse``, which imports ``ipaddress`` (~1 ms) for a URL's
bracketed host. :func:`defer` puts a stand-in for such a module in ``sys.modules`` before they
are imported: ``import inspect`` then binds the stand-in, and the first use of any of its
names imports the real module, which takes the stand-in's place in ``sys.modules``, and
answers from then on. So nothing that uses them changes; a command that never does (the quick
consume and send) never loads them. Only the script's quick paths (:mod:`mqctl.entry`) call
it: they own their process. Python programs and the Typer path are not touched.

From Python 3.12 ``dataclasses`` asks ``inspect.get_annotations`` of every class it builds,
so ``inspect`` is deferred only before 3.12 (a stand-in would be loaded by the first
dataclass anyway). The first use may come from two threads at once: one loads the real
module, under a lock, and the other waits for it (never a second copy of the module).
"""
from __future__ import annotations

import sys
from _thread import RLock
from types import ModuleType

DEFERRED = ("inspect", "ipaddress") if sys.version_info < (3, 12) else ("ipaddress",)
_LOADING = RLock()   # (reentrant: a module the real one imports may use a stand-in too)


class _StandIn(ModuleType):
    """A module not imported yet: the real one is imported on the first name asked of it."""

    def __getattr__(self, name: str) -> object:
        real = _load(self.__name__, self)
        return getattr(real, name)


def _real(name: str) -> ModuleType:
    """The real module (each of :data:`DEFERRED` imported by its own statement)."""
    if name == "inspect":
        import inspect
        return inspect
    import ipaddress
    return ipaddress


def _load(name: str, stand_in: ModuleType) -> ModuleType:
    with _LOADING:   # (another thread's check and removal of the stand-in must not interleave)
        if sys.modules.get(name) is stand_in:
            del sys.modules[name]
        real = _real(name)
        # (later `inspect.X` through a module that bound the stand-in ask it again: it answers
        # from a copy of the real module's namespace)
        stand_in.__dict__.update(real.__dict__)
    return real


def defer(names: tuple[str, ...] = DEFERRED) -> None:
    """Stand-ins for ``names`` (of :data:`DEFERRED`, if not imported yet) in ``sys.modules``."""
    for name in names:
        if name in DEFERRED and name not in sys.modules:
            stand_in = _StandIn(name)
            stand_in.__spec__ = None   # (read by the import statement: not a name to load for)
            sys.modules[name] = stand_in
