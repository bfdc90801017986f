"""The clustering groups a store shows by their directories (``consumers/GROUP``,
``locks/GROUP/TOPIC/``): those whose offsets a table that cannot be read at all had, named
rather than forgotten in silence (``offsettable.py`` owns the table; this reads no offset
file, only their times)."""
from __future__ import annotations

from pathlib import Path

from store.layout import Layout, backup_of


def pairs_on_disk(layout: Layout) -> set[tuple[str, str]]:
    """(topic, group) of every queue-lock directory a clustering group left
    (``locks/GROUP/TOPIC/``) before the table was damaged (:func:`damaged_at`): the offsets
    a table that cannot be read had, at least."""
    import os

    from store.names import ANY_TOPIC_RE
    out: set[tuple[str, str]] = set()
    before = damaged_at(layout)
    for group in groups_on_disk(layout, before):
        try:
            topics = os.listdir(layout.queue_locks_dir(group))
        except OSError:
            continue
        out.update((t, group) for t in topics
                   if ANY_TOPIC_RE.fullmatch(t) and _made_by(layout.topic_locks_dir(group, t), before, True))
    return out


def unpinned_groups(layout: Layout, named: set[str]) -> list[str]:
    """Groups the store showed before the table was damaged (:func:`groups_on_disk`) other
    than those ``named``."""
    return sorted(set(groups_on_disk(layout, damaged_at(layout))) - named)


def damaged_at(layout: Layout) -> int:
    """When the offset files were last written (ns; their damage is no later): a group's
    directory made after it is a group new since, which had no offsets to lose. (Its consumer
    makes its queue locks before it reads its offsets: it must not take itself for lost.)"""
    import os
    path = layout.consumer_offset_json
    times = []
    for p in (path, backup_of(path), layout.consumer_offset_log):
        try:
            times.append(os.stat(p).st_mtime_ns)
        except OSError:
            continue
    return max(times, default=0)


def _made_by(path: Path, before: int | None, is_dir: bool = False) -> bool:
    """``path`` exists (a directory, if ``is_dir``), last changed at ``before`` or earlier
    (None: whenever)."""
    import os
    import stat
    try:
        st = os.stat(path)
    except OSError:
        return False
    return (not is_dir or stat.S_ISDIR(st.st_mode)) and (before is None or st.st_mtime_ns <= before)


def groups_on_disk(layout: Layout, before: int | None = None) -> list[str]:
    """Clustering groups the store knows from their directories (``consumers/``, ``locks/``;
    broadcast groups keep their offsets elsewhere), one of them last changed at ``before``
    or earlier (ns; None: whenever): those whose offsets a table that cannot be read at all
    loses, to be named rather than forgotten in silence."""
    import os

    from store.names import NAME_RE

    def names_in(d: Path) -> list[str]:
        try:
            return os.listdir(d)
        except OSError:
            return []
    found = {n for d in (layout.members_root, layout.queue_locks_root) for n in names_in(d)
             if NAME_RE.fullmatch(n) and _made_by(d / n, before)}
    root = layout.broadcast_offsets_root
    return sorted(found - {g for cid in names_in(root) for g in names_in(layout.broadcast_client_dir(cid))})


def name_groups(groups: list[str]) -> str:
    return ("group " if len(groups) == 1 else "groups ") + ", ".join(groups)
