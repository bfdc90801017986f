"""What every client object of the Python API shares: one store handle, closed once, and the
``with`` block around it."""
from __future__ import annotations

from types import TracebackType

from store.errors import UsageError

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import TypeVar

    from store.log.messagestore import Store

    _H = TypeVar("_H", bound="StoreClient")


class StoreClient:
    """A client holding an open :class:`~store.log.messagestore.Store` until :meth:`close`."""

    _store: Store | None
    _what = "this client"   # how errors name it ("this producer is closed")

    def _open_store(self) -> Store:
        if self._store is None:
            raise UsageError(f"{self._what} is closed")
        return self._store

    def close(self) -> None:
        """Release the store handle (idempotent). Every result returned before stays valid."""
        if self._store is not None:
            self._store.close()
            self._store = None

    def __enter__(self: _H) -> _H:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
