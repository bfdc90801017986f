"""What the store's calls return: :class:`PutResult` and :class:`BatchResult` (writes),
:class:`PullResult` and :class:`BodiesResult` (reads)."""
from __future__ import annotations

from dataclasses import dataclass, field

from store.log.record import KEYS_PER_MS, Message, counter_hex, offset_msg_id

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from collections.abc import Callable

_unique_keys: Callable[[str, int, int], list[str]] | None = None
try:
    from store.log import nativecheck
    _unique_keys = getattr(nativecheck, "unique_keys", None)   # (a build of an older source lacks it)
except ImportError:
    pass


@dataclass(frozen=True, slots=True)
class PutResult:
    """Where one message was stored: its queue and offsets, unique key and store time."""

    topic: str
    queue_id: int
    queue_offset: int
    commitlog_offset: int
    uniq_key: str
    store_timestamp: int

    @property
    def msg_id(self) -> str:
        return offset_msg_id(self.commitlog_offset)


@dataclass(slots=True)
class BatchResult:
    """Results of :meth:`Store.put_bodies`, one list entry per body, in input order."""

    topic: str
    queue_ids: list[int]
    queue_offsets: list[int]
    commitlog_offsets: list[int]
    store_timestamp: int
    uk_head: str = ""      # the batch's unique keys share this head ...
    uk_first: int = 0      # ... and end in 4 hex digits of a counter starting here
    # A batch of more than KEYS_PER_MS bodies: the head and first counter of each further run
    # of KEYS_PER_MS keys (each run carries its own millisecond).
    uk_more: tuple[tuple[str, int], ...] = ()

    def __len__(self) -> int:
        return len(self.queue_offsets)

    @property
    def uniq_keys(self) -> list[str]:
        """The messages' unique keys (built on demand: most callers never ask)."""
        n = len(self.queue_offsets)
        if not self.uk_more:
            return _keys(self.uk_head, self.uk_first, n)
        out: list[str] = []
        for head, first in ((self.uk_head, self.uk_first), *self.uk_more):
            out += _keys(head, first, min(KEYS_PER_MS, n - len(out)))
        return out


def _keys(head: str, first: int, n: int) -> list[str]:
    """The unique keys ``head`` + 4 hex digits of ``first``, ``first + 1``, ... (mod 2^16):
    the definition of ``nativecheck.unique_keys``, which makes them where built (100 keys:
    ~60 us here, ~3 us there, measured)."""
    if _unique_keys is not None:
        return _unique_keys(head, first, n)
    if n < 512:
        return [f"{head}{(first + i) & 0xFFFF:04X}" for i in range(n)]
    # big batches: the counters' digits as the write made them, decoded at once
    return [head + h for h in b" ".join(counter_hex(first, n)).decode("ascii").split(" ")]


@dataclass
class PullResult:
    """What a pull found. ``next_offset`` is where the next pull should start."""

    messages: list[Message]
    next_offset: int
    max_offset: int
    damaged: list[tuple[int, str]] = field(default_factory=list)


@dataclass
class BodiesResult:
    """What :meth:`Store.pull_bodies` found: ``bodies[i]`` is the message at queue offset
    ``offsets[i]`` (``bytes``, or a ``memoryview`` if asked for ``views``). ``next_offset``,
    ``max_offset`` and ``damaged`` as in :class:`PullResult`."""

    bodies: list[bytes | memoryview]
    offsets: list[int]
    next_offset: int
    max_offset: int
    damaged: list[tuple[int, str]] = field(default_factory=list)


