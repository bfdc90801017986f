"""What the parts of :class:`store.Admin` share: the store handle (opened at once, given, or
opened when first needed), how its error messages name arguments, and the group checks.

``Admin`` is one public class made of parts by job (:mod:`store.client.offsets_admin`,
:mod:`store.client.members_admin`, topics in :mod:`store.client.admin`): its methods and
their docstrings are the API (``help(store.Admin)``), and this handle is the only state the
parts share, so each part is a base class of it rather than an object it delegates to (which
would repeat every public signature and docstring).
"""
from __future__ import annotations

from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Callable, TypeVar

from store import names
from store.client.groups import require_group
from store.client.paths import PathLike, resolve_store_path
from store.client.rules import ArgNames
from store.errors import UsageError

if TYPE_CHECKING:
    from store.log.messagestore import Store

_A = TypeVar("_A", bound="AdminBase")


class AdminBase:
    """The store handle of an :class:`store.Admin` (see the module docstring)."""

    def __init__(self, path: PathLike | None = None) -> None:
        from store.errors import StoreNotFoundError
        from store.log.messagestore import Store
        self._path: Path | None = resolve_store_path(path)
        self.arg_names: ArgNames | None = None
        self._owned = True
        self._missing: StoreNotFoundError | None = None
        self._store: Store | None = None
        self._opener: Callable[[], Store] | None = None
        try:
            self._store = Store.open(self._path)
        except StoreNotFoundError as exc:   # only create_topic() may go on: it creates the store
            self._missing = exc

    @classmethod
    def of(cls: type[_A], store: Store | Callable[[], Store], *, arg_names: ArgNames | None = None) -> _A:
        """An Admin over an open :class:`store.log.messagestore.Store` handle, or over a function
        that returns one when it is first needed (so that bad arguments are reported before a
        missing store); the handle is not closed by the Admin. ``arg_names``: how its error
        messages name arguments (``store/client/rules.py``; ``mqctl`` passes its flags)."""
        admin = cls.__new__(cls)
        admin.arg_names = arg_names
        admin._owned = False
        admin._missing = None
        if callable(store):
            admin._path, admin._store, admin._opener = None, None, store
        else:
            admin._path, admin._store, admin._opener = store.root, store, None
        return admin

    @property
    def path(self) -> Path:
        """The store's directory."""
        return self._path if self._path is not None else self.store.root

    @property
    def store(self) -> Store:
        """The open store handle (``StoreNotFoundError`` when there is no store at ``path``)."""
        if self._store is None:
            if self._opener is not None:
                self._store, self._opener = self._opener(), None
                return self._store
            if self._missing is not None:
                # the store may have been made since (an Admin made before the first send)
                from store.errors import StoreNotFoundError
                from store.log.messagestore import Store
                try:
                    self._store = Store.open(self.path)
                except StoreNotFoundError as exc:
                    self._missing = exc
                    raise
                self._missing = None
                return self._store
            raise UsageError("this Admin is closed")
        return self._store

    def _group(self, group: str, topic: str | None) -> Store:
        store = self.store
        require_group(store, group)
        if topic is not None:
            names.validate_any_topic(topic)
            store.topic(topic)
        return store

    def _live_clients(self, group: str) -> set[str]:
        from store.client.members import live_members
        return {m.clientId for m in live_members(self.store.layout, group)}

    def _arg(self, name: str) -> str:
        from store.client.rules import spelling
        return spelling(self.arg_names)[name]

    # -- lifecycle ---------------------------------------------------------------------------
    def close(self) -> None:
        """Release the store handle (unless it came from :meth:`of`)."""
        if self._store is not None and self._owned:
            self._store.close()
        self._store, self._opener, self._missing = None, None, None

    def __del__(self) -> None:
        # An Admin dropped without close() (a one-off ``store.Admin().topics()``, as the API's
        # examples write it) releases its handle: its calls may have written (due delayed
        # messages delivered), leaving the write lock's file open for the collector to warn of.
        try:
            if getattr(self, "_owned", False):
                self.close()
        except Exception:  # noqa: BLE001 - (a finalizer: at exit, modules may be gone)
            pass

    def __enter__(self: _A) -> _A:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
