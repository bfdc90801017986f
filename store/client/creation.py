"""Creating a store, or finding one already there (``mqctl init``): a new store is made with
the settings asked for, checked strictly; an existing one keeps the settings it was created
with, and the caller learns which of the asked ones were therefore ignored."""
from __future__ import annotations

from dataclasses import dataclass, field

from store.client.paths import PathLike
from store.client.rules import ArgNames, spelling
from store.log.settings import StoreSettings

# The settings a caller chooses at creation, in the order they are reported.
CHOSEN = ("max_message_size", "commitlog_segment_size", "auto_create_topics")


@dataclass(frozen=True)
class StoreCreation:
    """``created``: the store did not exist; ``settings``: the store's own; ``ignored``: the
    fields of :data:`CHOSEN` whose asked value differs from an existing store's."""

    created: bool
    settings: StoreSettings
    ignored: list[str] = field(default_factory=list)


def create_store(path: PathLike, settings: StoreSettings, *, arg_names: ArgNames | None = None) -> StoreCreation:
    """Create the store at ``path`` with ``settings`` (``UsageError`` for settings it could not
    work with, naming them as ``arg_names`` spells them), or open the one there (idempotent)."""
    from store.client.paths import resolve_store_path
    from store.layout import Layout
    from store.log.messagestore import Store
    path = resolve_store_path(path)   # (a str, as every other entry point takes it)
    created = not Layout(path).store_json.exists()
    if created:
        settings.validate(named=spelling(arg_names)["segment_size"])
    store = Store.open(path, create=True, settings=settings)
    kept = store.settings
    store.close()
    ignored = [] if created else [f for f in CHOSEN if getattr(settings, f) != getattr(kept, f)]
    return StoreCreation(created, kept, ignored)
