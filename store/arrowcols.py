"""Arrow columns of the Spark source, built from a bulk read (:mod:`store.bulk`).

Python data sources get no column pruning: every read produces all ten columns, so a
``count()`` pays for the properties of every message. Building them per row in Python
(a dict per message, then lists) cost more than reading the records; here the raw property
bytes of a whole batch go to Arrow at once and are taken apart with Arrow's compute kernels:
split on ``0x02`` into ``name 0x01 value`` pairs, match names against the reserved ones, and
scatter ``TAGS``, ``KEYS`` and ``UNIQ_KEY`` back to their rows. Only the fixed-width fields
and the bodies cross from Python lists.

The semantics are those of :class:`store.record.Message`: empty names or values are dropped,
``keys`` splits ``KEYS`` on spaces without empty keys, ``msgId`` is the unique key or, for a
record without one, the offset id; ``properties`` holds the non-reserved properties.
"""
from __future__ import annotations

from typing import Callable

import pyarrow as pa
import pyarrow.compute as pc

from .bulk import Columns
from .record import PROP_KEYS, PROP_TAGS, PROP_UNIQ_KEY, RESERVED_PROPERTIES, offset_msg_id

_PAIR = r"(?s)(?P<k>[^\x01]+)\x01(?P<v>.+)"
_RESERVED = pa.array(sorted(RESERVED_PROPERTIES), pa.string())
_TS = pa.timestamp("us", tz="UTC")


class _Props:
    """The properties of a batch, split once, with per-name lookups."""

    def __init__(self, raw: list[bytes]) -> None:
        self.n = len(raw)
        arr = pa.array(raw, pa.binary())
        try:
            text = arr.cast(pa.string())
        except pa.ArrowInvalid:   # not UTF-8: decode as Message does, with replacement
            text = pa.array([r.decode("utf-8", "replace") for r in raw], pa.string())
        self.pairs = pc.split_pattern(text, "\x02")
        kv = pc.extract_regex(self.pairs.flatten(), _PAIR)
        self.names = pc.struct_field(kv, "k")      # null where a part is not a pair
        self.values = pc.struct_field(kv, "v")
        self.parents = pc.list_parent_indices(self.pairs)
        self._rows: pa.Array | None = None

    def get(self, name: str) -> pa.Array:
        """The value of property ``name`` per row, null where the row has none."""
        hit = pc.fill_null(pc.equal(self.names, name), False)
        if self._rows is None:
            self._rows = pa.array(range(self.n), self.parents.type)
        where = pc.index_in(self._rows, value_set=pc.filter(self.parents, hit))
        return pc.take(pc.filter(self.values, hit), where)

    def user(self) -> pa.MapArray:
        """The non-reserved properties, as a map per row."""
        keep = pc.and_(pc.is_valid(self.names),
                       pc.invert(pc.fill_null(pc.is_in(self.names, value_set=_RESERVED), False)))
        offsets = _kept_offsets(self.pairs.offsets, keep)
        return pa.MapArray.from_arrays(offsets, pc.filter(self.names, keep), pc.filter(self.values, keep))


def _kept_offsets(offsets: pa.Array, keep: pa.Array) -> pa.Array:
    """List offsets after dropping the flattened values where ``keep`` is false."""
    kept = pc.cumulative_sum(pc.cast(keep, pa.int32()))
    kept = pa.concat_arrays([pa.array([0], pa.int32()), kept])
    return pc.take(kept, offsets)


def _keys(raw: pa.Array) -> pa.ListArray:
    """``KEYS`` values (null: none) as lists of keys, empty keys dropped."""
    split = pc.split_pattern(pc.fill_null(raw, ""), " ")
    flat = split.flatten()
    keep = pc.not_equal(pc.utf8_length(flat), 0)
    return pa.ListArray.from_arrays(_kept_offsets(split.offsets, keep), pc.filter(flat, keep))


def _timestamps(ms: list[int]) -> pa.Array:
    return pc.multiply(pa.array(ms, pa.int64()), 1000).cast(_TS)


def build_columns(cols: Columns, topic: str, queue_id: int,
                  names: list[str]) -> dict[str, pa.Array]:
    """The columns ``names`` (of the source's schema, native Arrow types) of one bulk read.
    ``cols`` must carry commit-log offsets (``with_phys``) when ``msgId`` is wanted."""
    n = len(cols)
    props = _Props(cols.props) if {"msgId", "keys", "tags", "properties"} & set(names) else None

    def msg_id() -> pa.Array:
        uniq = props.get(PROP_UNIQ_KEY)
        if uniq.null_count:   # a record written without a unique key: its offset id
            uniq = pa.array([u if u is not None else offset_msg_id(p)
                             for u, p in zip(uniq.to_pylist(), cols.phys)], pa.string())
        return uniq

    make: dict[str, Callable[[], pa.Array]] = {
        "topic": lambda: pa.array([topic] * n, pa.string()),
        "queueId": lambda: pa.array([queue_id] * n, pa.int32()),
        "queueOffset": lambda: pa.array(cols.offsets, pa.int64()),
        "msgId": msg_id,
        "keys": lambda: _keys(props.get(PROP_KEYS)),
        "tags": lambda: props.get(PROP_TAGS),
        "properties": lambda: props.user(),
        "body": lambda: pa.array(cols.bodies, pa.binary()),
        "bornTimestamp": lambda: _timestamps(cols.born),
        "storeTimestamp": lambda: _timestamps(cols.stored),
    }
    return {name: make[name]() for name in names}
