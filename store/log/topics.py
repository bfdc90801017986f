"""Topic configuration: ``config/topics.json``.

Standard JSON in the shape of the broker's ``TopicConfigManager`` file::

    {"topicConfigTable": {"<topic>": {"topicName": "<topic>", "readQueueNums": 8,
                                      "writeQueueNums": 8, "perm": 6, "order": false,
                                      "createdAt": <ms>, "createdOffset": <commit-log end>}},
     "dataVersion": {"counter": <n>, "timestamp": <ms>}}

``createdOffset`` is the commit-log end when the topic was created: recovery never re-indexes
a record older than its topic, so a deleted and re-created topic does not resurrect old
messages. Changes are made under the store's write lock and written atomically (``.bak`` kept).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from store.fsutil import atomic_write_json, read_json_with_bak


@dataclass(frozen=True)
class TopicConfig:
    name: str
    queues: int
    order: bool = False
    created_at: int = 0
    created_offset: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"topicName": self.name, "readQueueNums": self.queues, "writeQueueNums": self.queues,
                "perm": 6, "order": self.order, "createdAt": self.created_at,
                "createdOffset": self.created_offset}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> "TopicConfig":
        return cls(name=str(obj["topicName"]), queues=int(obj["writeQueueNums"]),
                   order=bool(obj.get("order", False)), created_at=int(obj.get("createdAt", 0)),
                   created_offset=int(obj.get("createdOffset", 0)))


def _validate(obj: Any) -> None:
    if not isinstance(obj, dict) or not isinstance(obj.get("topicConfigTable"), dict):
        raise ValueError("no topicConfigTable object")
    for v in obj["topicConfigTable"].values():
        TopicConfig.from_json(v)


class TopicTable:
    """A cached view of topics.json, reloaded when the file changes."""

    def __init__(self, path: Path, warn: Callable[[str], None] | None = None) -> None:
        self.path = path
        self.warn = warn
        self._stamp: tuple[int, int, int] | None = None
        self._topics: dict[str, TopicConfig] = {}
        self._version = 0

    def _file_stamp(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def load(self) -> dict[str, TopicConfig]:
        stamp = self._file_stamp()
        if stamp is not None and stamp == self._stamp:
            return self._topics
        obj = read_json_with_bak(self.path, default={"topicConfigTable": {}}, validate=_validate,
                                 warn=self.warn)
        self._topics = {k: TopicConfig.from_json(v) for k, v in obj["topicConfigTable"].items()}
        self._version = int(obj.get("dataVersion", {}).get("counter", 0))
        self._stamp = stamp
        return self._topics

    def save(self, topics: dict[str, TopicConfig]) -> None:
        """Write the table (caller holds the store write lock)."""
        self._version += 1
        atomic_write_json(self.path, {
            "topicConfigTable": {k: v.to_json() for k, v in sorted(topics.items())},
            "dataVersion": {"counter": self._version, "timestamp": int(time.time() * 1000)},
        })
        self._topics = dict(topics)
        self._stamp = self._file_stamp()
