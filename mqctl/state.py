"""The store handle of one ``mqctl`` run: what the root options chose, opened on first use.
The only global state; Typer-free, so the quick send of ``mqctl/entry.py`` uses it too."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from store.client.admin import Admin
    from store.log.broker import Store


@dataclass
class State:
    """What the root callback parsed; the only global state is the store handle."""

    store_path: Path
    utc: bool = False
    _store: Store | None = field(default=None, repr=False)

    def store(self, create: bool = False, recover: bool = True) -> "Store":
        """The store, opened on first use; ``recover=False``: as it is on disk, nothing
        repaired at open (``store check`` only reads)."""
        if self._store is None:
            from store.log.broker import Store
            self._store = Store.open(self.store_path, create=create, recover=recover)
        return self._store

    def admin(self) -> "Admin":
        """:class:`store.Admin` over the store, its messages naming the command line's flags."""
        from mqctl.argnames import ARG_FLAGS
        from store.client.admin import Admin
        return Admin.of(self.store, arg_names=ARG_FLAGS)   # opened when first needed

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None


def resolve_store_path(flag: str | None) -> Path:
    """``--store DIR``, else what the library selects for ``path=None``."""
    from store.client.paths import resolve_store_path as library_default
    return library_default(flag)
