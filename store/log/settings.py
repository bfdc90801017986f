"""``store.json``: the settings fixed when a store is created, and their JSON form."""
from __future__ import annotations

from dataclasses import dataclass

from store.log import format as F

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Any

DEFAULT_QUEUES = 8
# The readers' sanity bound on a record's size is built from the format's 4 MiB, so a store
# may lower its message limit but not raise it past that.
LARGEST_MESSAGE_SIZE = F.MAX_MESSAGE_SIZE
# A segment must hold the largest record: its body plus at most 64 KiB of header, topic and
# properties.
SEGMENT_SPARE = 64 * 1024
# The end-of-segment trailer keeps the bytes left in an int32.
MAX_SEGMENT_SIZE = 2**31 - 1
MIN_SEGMENT_SIZE = 4096


@dataclass(frozen=True)
class StoreSettings:
    """``store.json``: fixed when the store is created."""

    max_message_size: int = F.MAX_MESSAGE_SIZE
    auto_create_topics: bool = True
    default_queues: int = DEFAULT_QUEUES
    commitlog_segment_size: int = F.COMMITLOG_SEGMENT_SIZE
    cq_segment_entries: int = F.CQ_SEGMENT_ENTRIES

    def validate(self, strict: bool = True, named: str = "commitlog_segment_size") -> None:
        """Refuse settings a store cannot work with (UsageError naming the limit; the segment
        size as the caller spells it, ``named``: ``--segment-size`` for ``mqctl init``).

        ``strict`` (what ``mqctl init`` asks) also requires room in a segment for the largest
        record a maximum-size body can make (:data:`SEGMENT_SPARE` more). Without it (what
        the engine requires of every new store, small test stores included) a segment need
        only hold :data:`MIN_SEGMENT_SIZE`; a record that then does not fit is refused when
        it is put."""
        from store.errors import UsageError
        if not 1 <= self.max_message_size <= LARGEST_MESSAGE_SIZE:
            raise UsageError(f"the maximum message size must be 1..{LARGEST_MESSAGE_SIZE} bytes (4 MiB), "
                             f"got {self.max_message_size}")
        if strict:
            least, rule = self.max_message_size + SEGMENT_SPARE, "the maximum message size + 64 KiB = "
        else:
            least, rule = MIN_SEGMENT_SIZE, ""
        if not least <= self.commitlog_segment_size <= MAX_SEGMENT_SIZE:
            raise UsageError(f"the segment size ({named}) must be at least {rule}{least} bytes, "
                             f"and at most {MAX_SEGMENT_SIZE}; got {self.commitlog_segment_size}")
        if not 1 <= self.default_queues <= 1024:
            raise UsageError(f"the default queue count must be 1..1024, got {self.default_queues}")

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
                   auto_create_topics=bool(obj.get("autoCreateTopics", True)),
                   default_queues=int(obj.get("defaultQueues", DEFAULT_QUEUES)),
                   commitlog_segment_size=int(obj["commitlogSegmentSize"]),
                   cq_segment_entries=int(obj["cqSegmentEntries"]))
