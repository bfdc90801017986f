"""``store.json``: the settings fixed when a store is created, and their JSON form."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from store.log import format as F

DEFAULT_QUEUES = 8


@dataclass(frozen=True)
class StoreSettings:
    """``store.json``: fixed when the store is created."""

    max_message_size: int = F.MAX_MESSAGE_SIZE
    auto_create_topics: bool = True
    default_queues: int = DEFAULT_QUEUES
    commitlog_segment_size: int = F.COMMITLOG_SEGMENT_SIZE
    cq_segment_entries: int = F.CQ_SEGMENT_ENTRIES

    def to_json(self) -> dict[str, Any]:
        return {"formatVersion": F.STORE_FORMAT_VERSION, "maxMessageSize": self.max_message_size,
                "autoCreateTopics": self.auto_create_topics, "defaultQueues": self.default_queues,
                "commitlogSegmentSize": self.commitlog_segment_size,
                "cqSegmentEntries": self.cq_segment_entries}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> "StoreSettings":
        if int(obj.get("formatVersion", 0)) != F.STORE_FORMAT_VERSION:
            raise ValueError(f"unsupported store format version {obj.get('formatVersion')!r}")
        return cls(max_message_size=int(obj["maxMessageSize"]),
                   auto_create_topics=bool(obj["autoCreateTopics"]),
                   default_queues=int(obj.get("defaultQueues", DEFAULT_QUEUES)),
                   commitlog_segment_size=int(obj["commitlogSegmentSize"]),
                   cq_segment_entries=int(obj["cqSegmentEntries"]))
