"""Shared option types and the store handle, so every command spells its flags the same way."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from store.log.broker import Store

JsonOpt = Annotated[bool, typer.Option("--json", "-j", "-J", help="One JSON object per line (NDJSON) on stdout.")]
GroupOpt = Annotated[str, typer.Option("--group", "-g", help="Consumer group name.")]
TopicFilterOpt = Annotated[str | None, typer.Option("--topic", "-t", help="Only this topic.")]


@dataclass
class State:
    """What the root callback parsed; the only global state is the store handle."""

    store_path: Path
    _store: Store | None = field(default=None, repr=False)

    def store(self, create: bool = False) -> "Store":
        if self._store is None:
            from store.log.broker import Store
            self._store = Store.open(self.store_path, create=create)
        return self._store

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None


def resolve_store_path(flag: str | None) -> Path:
    """``--store DIR``, else what the library selects for ``path=None``."""
    from store.client.paths import resolve_store_path as library_default
    return library_default(flag)


def state(ctx: typer.Context) -> State:
    obj = ctx.find_root().obj
    assert isinstance(obj, State)
    return obj
