"""Which store a ``path`` of ``None`` selects: ``$MQCTL_STORE``, else ``~/.mqctl/store``.

The command line's ``--store DIR`` goes through the same function, so a program and a shell
script with the same environment open the same store.
"""
from __future__ import annotations

import os
from pathlib import Path

DEFAULT_STORE = "~/.mqctl/store"
ENV_VAR = "MQCTL_STORE"

PathLike = str | os.PathLike[str]


def resolve_store_path(path: PathLike | None = None) -> Path:
    """``path`` with ``~`` expanded; for ``None`` (or ``""``) ``$MQCTL_STORE``, else
    ``~/.mqctl/store``."""
    try:
        raw = os.fspath(path) if path is not None else ""
    except TypeError:
        from store.errors import UsageError
        raise UsageError(f"path must be a store directory (a str or os.PathLike), not {type(path).__name__}") from None
    raw = raw or os.environ.get(ENV_VAR) or DEFAULT_STORE
    return Path(raw).expanduser()
