"""``config/topics.json``: RocketMQ's view of the topics, derived from ``config/topics/``.

People and scripts who know RocketMQ look for the broker's topic table there, so the store
keeps one, in ``TopicConfigManager``'s serialisation::

    {
      "derivedFrom": "config/topics",
      "dataVersion": {"timestamp": <ms>, "counter": <N>, "epoch": "<config/topics.epoch token>"},
      "topicConfigTable": {
        "<topic>": {"topicName": "<topic>", "readQueueNums": 8, "writeQueueNums": 8, "perm": 6, ...
        ...
      }
    }

one topic a line (``topicName``, ``readQueueNums``, ``writeQueueNums``, ``perm`` 6,
``topicFilterType`` ``"SINGLE_TAG"``, ``topicSysFlag`` 0, ``order``), sorted by name.

It is a view, never read as truth: the topics are the files of ``config/topics/``
(``topics.py``, which alone calls this module, under the store's write lock, after every
create, update and delete; deleting topics are left out). ``derivedFrom`` (written first)
tells it from the legacy ``topics.json`` of stores made before per-topic files, which the
first writer migrates. ``dataVersion.epoch`` is the topics' epoch token when the view was
written: a view whose token is not the current one missed a change (a writer killed between
its topic file and the view) and the next writer rewrites it from every topic's file; one
whose token is current is only updated with the change (a topic created on send does not
read every other topic's file). ``store recover`` (which runs after every restart too)
rewrites a view that differs from the topics in any way, and ``store check`` warns of one
(not damage). The file is replaced atomically (temp file, fsync, rename, directory fsync).
"""
from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

from store.fsutil import atomic_write_bytes

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Any

MARKER = "derivedFrom"
SOURCE = "config/topics"
# The first lines of a view as :func:`render` writes them: "{", the marker, the dataVersion.
_MARKER_LINE = f'  "{MARKER}": "{SOURCE}",'.encode()
_VERSION_START = b'  "dataVersion": '
_HEAD_BYTES = 256


class ViewHead:
    """What a view's first lines say (``is_view`` False: a legacy table, or, ``parsed`` False
    too, not JSON). (A plain class: a dataclass costs its creation at import, on every
    writer's start.)"""

    __slots__ = ("is_view", "counter", "epoch", "parsed")

    def __init__(self, is_view: bool, counter: int = 0, epoch: str = "", parsed: bool = True) -> None:
        self.is_view = is_view
        self.counter = counter
        self.epoch = epoch
        self.parsed = parsed


def _version(obj: object) -> ViewHead:
    """A view's head from its parsed ``dataVersion`` (tolerant: the view is not truth)."""
    version = obj if isinstance(obj, dict) else {}
    counter = version.get("counter")
    return ViewHead(True, counter if isinstance(counter, int) else 0, str(version.get("epoch", "")))


def entry(name: str, queues: int, order: bool) -> dict[str, Any]:
    """One topic as RocketMQ's ``TopicConfig`` serialises it (read and write queues alike,
    read-write permission, no tag filter type but the default, no system flag)."""
    return {"topicName": name, "readQueueNums": queues, "writeQueueNums": queues, "perm": 6,
            "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": order}


def render(table: dict[str, dict[str, Any]], epoch: str, counter: int) -> bytes:
    """The view's bytes: the marker and dataVersion first (so :func:`read_head` needs only
    the first bytes), then the table, one topic a line, sorted (compact JSON per line: the C
    encoder, where an indented dump of a table of many topics took twice as long)."""
    version = json.dumps({"timestamp": int(time.time() * 1000), "counter": counter, "epoch": epoch})
    rows = ",\n".join(f"    {json.dumps(name)}: {json.dumps(table[name])}" for name in sorted(table))
    body = f"{{\n{rows}\n  }}" if rows else "{}"
    return (f'{{\n  "{MARKER}": "{SOURCE}",\n  "dataVersion": {version},\n'
            f'  "topicConfigTable": {body}\n}}\n').encode()


def read_head(path: Path) -> ViewHead | None:
    """The view's marker, counter and epoch token (None: no file). Reads the first bytes when
    the file starts as :func:`render` writes it; else parses it all."""
    try:
        fd = os.open(path, os.O_RDONLY)   # (asked at every writer's open: no buffered file)
    except FileNotFoundError:
        return None
    except OSError:
        return ViewHead(False, parsed=False)
    try:
        head = os.read(fd, _HEAD_BYTES)
        lines = head.split(b"\n", 3)
        if len(lines) == 4 and lines[1] == _MARKER_LINE and lines[2].startswith(_VERSION_START):
            try:
                return _version(json.loads(lines[2][len(_VERSION_START):].rstrip(b",")))
            except ValueError:
                pass   # (read whole below)
        chunks = [head]
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        raw = b"".join(chunks)
    except OSError:
        return ViewHead(False, parsed=False)
    finally:
        os.close(fd)
    try:
        obj = json.loads(raw)
    except ValueError:
        return ViewHead(False, parsed=False)
    if not isinstance(obj, dict) or MARKER not in obj:
        return ViewHead(False)
    return _version(obj.get("dataVersion"))


def read_table(path: Path) -> dict[str, Any] | None:
    """The view's ``topicConfigTable`` as written (None: missing, or not a view)."""
    try:
        obj = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(obj, dict) or MARKER not in obj or not isinstance(obj.get("topicConfigTable"), dict):
        return None
    table: dict[str, Any] = obj["topicConfigTable"]
    return table


def write(path: Path, table: dict[str, dict[str, Any]], epoch: str, *, sync: bool = True) -> None:
    """Replace the view (its counter one past the current one's)."""
    head = read_head(path)
    counter = head.counter + 1 if head is not None and head.is_view else 1
    atomic_write_bytes(path, render(table, epoch, counter), keep_bak=False, sync=sync)


class TopicsView:
    """The view of one store's topics (``path``): ``live`` lists them (name -> (queues, order))
    from their files in ``per_topic``, ``epoch`` reads the current epoch token. Writes happen
    under the write lock."""

    def __init__(self, path: Path, per_topic: Path, live: Callable[[], dict[str, tuple[int, bool]]],
                 epoch: Callable[[], str]) -> None:
        self.path = path
        self.per_topic = per_topic
        self._live = live
        self._epoch = epoch
        # what the file's head said, by its (inode, mtime, size): is_legacy() is asked often
        self._head: tuple[tuple[int, int, int] | None, ViewHead | None] = (None, None)

    def head(self) -> ViewHead | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        if self._head[0] != stamp:
            self._head = (stamp, read_head(self.path))
        return self._head[1]

    def is_legacy(self) -> bool:
        """The file is there and is not a view: a legacy topic table. One that is not JSON
        is a damaged view where the per-topic directory exists (a legacy store has none but
        in the middle of its migration), else a damaged legacy table (migrated from its .bak)."""
        head = self.head()
        if head is None or head.is_view:
            return False
        return head.parsed or not self.per_topic.is_dir()

    def stale(self) -> bool:
        """The view is missing, damaged, or was written before the last topic change (its
        epoch token is not the current one). A few small reads; false for a legacy table."""
        head = self.head()
        if head is None:
            return True
        return head.epoch != self._epoch() if head.is_view else not self.is_legacy()

    def table(self) -> dict[str, dict[str, Any]]:
        """The view of the topics as their files have them."""
        return {n: entry(n, q, o) for n, (q, o) in self._live().items()}

    def current(self) -> dict[str, Any] | None:
        """The view's table when its token is the current one (no change since it was written),
        for a change to update rather than read every topic's file. (After a power cut the
        token, not synced, may be current and the view not: the recovery that follows every
        restart compares the view whole first.)"""
        if self.is_legacy() or self.stale():
            return None
        return read_table(self.path)

    def write(self, token: str | None = None, *, sync: bool = True, base: dict[str, Any] | None = None,
              name: str = "", shape: tuple[int, bool] | None = None) -> None:
        """Rewrite the view (never over a legacy table): from the topic files, or from ``base``
        (:meth:`current`) with topic ``name`` now of ``shape`` (queues, order; None: gone)."""
        if base is None:
            table = self.table()
        else:
            table = base
            table.pop(name, None)
            if shape is not None:
                table[name] = entry(name, *shape)
        write(self.path, table, self._epoch() if token is None else token, sync=sync)

    def problem(self) -> str | None:
        """Why the view does not show the topics as they are, as the end of a sentence about it
        ("is missing"; None: it does, or the file is a legacy table). Reads every topic's file."""
        if self.is_legacy():
            return None
        table = read_table(self.path)
        if table is None:
            return "is missing" if self.head() is None else "is not valid JSON"
        if table != self.table():
            return "does not list the topics as config/topics/ has them"
        return None

    def refresh(self) -> str | None:
        """Rewrite the view if it is out of date in any way; returns why it was (None: only
        its token was, or nothing)."""
        why = self.problem()
        if why is not None or self.stale():
            self.write()
        return why
