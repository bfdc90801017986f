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
"""
from __future__ import annotations

import sys
from types import ModuleType

DEFERRED = ("inspect", "ipaddress")


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
    if sys.modules.get(name) is stand_in:
        del sys.modules[name]
    real = _real(name)
    # (later `inspect.X` through a module that bound the stand-in ask it again: it answers
    # from the real module's namespace, now one dictionary for both)
    stand_in.__dict__.update(real.__dict__)
    return real


def defer(names: tuple[str, ...] = DEFERRED) -> None:
    """Stand-ins for ``names`` (of :data:`DEFERRED`, if not imported yet) in ``sys.modules``."""
    for name in names:
        if name in DEFERRED and name not in sys.modules:
            stand_in = _StandIn(name)
            stand_in.__spec__ = None   # (read by the import statement: not a name to load for)
            sys.modules[name] = stand_in
