"""The store handle of one ``mqctl`` run: what the root options chose, opened on first use.
The only global state; Typer-free, so the quick send of ``mqctl/entry.py`` uses it too."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Any

    from store import Admin, Store


@dataclass(eq=False, repr=False)   # (neither is used: start-up, store/__init__.py)
class State:
    """What the root callback parsed; the only global state is the store handle."""

    store_path: Path
    utc: bool = False
    _store: Store | None = field(default=None, repr=False)

    def store(self, create: bool = False, recover: bool = True, rebuild_settings: bool = False) -> Store:
        """The store, opened on first use. ``create`` (a command that writes): a missing store
        is created, and topics on first send, unless the store was made with ``init
        --no-auto-create`` or ``MQCTL_AUTO_CREATE=0``; either creation is said on stderr, so a
        typo in a store path or topic name does not pass unnoticed. ``recover=False``: as it is
        on disk, nothing repaired at open (``store check`` only reads). ``rebuild_settings``
        (``store recover``): a store.json lost with its .bak is rebuilt from the store's files."""
        if self._store is None:
            from mqctl.errors import warn
            from store import Store
            from store.errors import StoreNotFoundError
            try:
                self._store = Store.open(self.store_path, recover=recover, rebuild_settings=rebuild_settings,
                                         warn=warn)
            except StoreNotFoundError:
                if not create:
                    raise
                if not auto_create_allowed():
                    raise StoreNotFoundError(f"no store at {self.store_path} and MQCTL_AUTO_CREATE=0 "
                                             f"(create one with: mqctl init)") from None
                self._store = Store.open(self.store_path, create=True, warn=warn)
                from mqctl.output import say
                say(f"mqctl: created store at {self.store_path}")
            if create:
                self._watch_topic_creation(self._store)
        return self._store

    @staticmethod
    def _watch_topic_creation(store: Store) -> None:
        import dataclasses
        if not auto_create_allowed() and store.settings.auto_create_topics:
            store.settings = dataclasses.replace(store.settings, auto_create_topics=False)

        def created(cfg: Any) -> None:
            from mqctl.output import say
            say(f"mqctl: created topic {cfg.name} ({cfg.queues} queue{'' if cfg.queues == 1 else 's'})")
        store.on_topic_created = created

    def admin(self, recover: bool = True, rebuild_settings: bool = False) -> Admin:
        """:class:`store.Admin` over the store, its messages naming the command line's flags;
        ``recover=False``: over the store as it is on disk (see :meth:`store`)."""
        from mqctl.argnames import ARG_FLAGS
        from store import Admin
        # (opened when first needed)
        return Admin.of(lambda: self.store(recover=recover, rebuild_settings=rebuild_settings), arg_names=ARG_FLAGS)

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None


def auto_create_allowed() -> bool:
    """False when ``MQCTL_AUTO_CREATE`` says no (0, false, no, off): sends then neither create
    a store nor a topic, whatever the store's own setting."""
    import os
    return os.environ.get("MQCTL_AUTO_CREATE", "").strip().lower() not in ("0", "false", "no", "off")


def resolve_store_path(flag: str | None) -> Path:
    """``--store DIR``, else what the library selects for ``path=None``. An empty ``--store``
    is refused (a variable that was meant to name the store and is empty, say), not taken as
    the default store: that is what leaving the flag out means."""
    from store import resolve_store_path as library_default
    if flag is not None and not flag.strip():
        from store.errors import UsageError
        raise UsageError("--store needs a directory (leave it out for $MQCTL_STORE or ~/.mqctl/store)")
    return library_default(flag)
