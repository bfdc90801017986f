"""Arrow columns of the Spark source, built from a bulk read (:mod:`store.log.columns`).

Python data sources get no column pruning: every read produces all ten columns, so a
``count()`` pays for the properties of every message. Building them per row in Python
(a dict per message, then lists) cost more than reading the records; here the raw property
bytes of a whole batch go to Arrow at once and are taken apart with Arrow's compute kernels:
split on ``0x02`` into ``name 0x01 value`` pairs, match names against the reserved ones, and
scatter ``TAGS``, ``KEYS`` and ``UNIQ_KEY`` back to their rows. Only the fixed-width fields
and the bodies cross from Python lists.

The semantics are those of :class:`store.log.record.Message`: empty names or values are dropped,
``keys`` splits ``KEYS`` on spaces without empty keys, ``msgId`` is the unique key or, for a
record without one, the offset id; ``properties`` holds the non-reserved properties.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from store.log import format as F
from store.log.arraycolumns import slices
from store.log.columns import Columns

if TYPE_CHECKING:
    from store.log.arraycolumns import VecColumns
from store.log.record import PROP_KEYS, PROP_TAGS, PROP_UNIQ_KEY, RESERVED_PROPERTIES, offset_msg_id

_RESERVED_NAMES = sorted(RESERVED_PROPERTIES)
_RESERVED = pa.array(_RESERVED_NAMES, pa.string())
_RESERVED_INDEX = {name: i for i, name in enumerate(_RESERVED_NAMES)}
_TS = pa.timestamp("us", tz="UTC")


class _Props:
    """The properties of a batch, split once into aligned arrays: ``names`` (null where a
    piece is not a property), ``values`` and ``parents`` (the row of each piece)."""

    def __init__(self, raw: pa.BinaryArray) -> None:
        self.n = len(raw)
        self._reserved_codes: np.ndarray | None = None
        if not self._split_fast(raw):
            self._split_general(raw)

    def _split_fast(self, raw: pa.BinaryArray) -> bool:
        """The common shape, found with numpy: every row is ``name 0x01 value 0x02`` pairs with
        exactly one 0x01 per pair. False (nothing set) for anything else, or for bytes that
        are not UTF-8."""
        if raw.offset or raw.null_count or not self.n:
            return False
        offs = np.frombuffer(raw.buffers()[1], np.int32, count=self.n + 1)
        if offs[-1] == offs[0]:
            return False
        data = np.frombuffer(raw.buffers()[2], np.uint8, count=int(offs[-1]) - int(offs[0]), offset=int(offs[0]))
        seps = np.flatnonzero(data == 1)
        ends = np.flatnonzero(data == 2)
        if len(seps) != len(ends) or not len(ends):
            return False
        starts = np.empty(len(ends), np.int64)
        starts[:1] = 0
        starts[1:] = ends[:-1] + 1
        row_ends = offs[1:] - offs[0]
        # each separator inside its own pair, and every non-empty row ending with 0x02
        if not (seps >= starts).all() or not (seps < ends).all() or \
                not (data[row_ends[row_ends > np.concatenate(([0], row_ends[:-1]))] - 1] == 2).all():
            return False
        buf = pa.py_buffer(data)
        try:
            names = slices(buf, starts, seps).cast(pa.string())
            values = slices(buf, seps + 1, ends).cast(pa.string())
        except pa.ArrowInvalid:
            return False
        valid = (seps > starts) & (ends > seps + 1)
        self.names = pc.if_else(pa.array(valid), names, None) if not valid.all() else names
        self.values = values
        self.parents = np.searchsorted(row_ends, starts, side="right")
        self.row_offsets = np.searchsorted(starts, np.concatenate(([0], row_ends)), side="left")
        return True

    def _split_general(self, raw: pa.BinaryArray) -> None:
        """Any bytes, with Arrow's kernels (RocketMQ's string2messageProperties: the name is
        what comes before the first 0x01)."""
        try:
            text = raw.cast(pa.string())
        except pa.ArrowInvalid:   # not UTF-8: decode as Message does, with replacement
            text = pa.array([r.decode("utf-8", "replace") for r in raw.to_pylist()], pa.string())
        pairs = pc.split_pattern(text, F.PROPERTY_SEP)
        kv = pc.split_pattern(pairs.flatten(), F.NAME_VALUE_SEP, max_splits=1)
        parts = kv.flatten()
        first = kv.offsets.slice(0, len(kv))
        # name 0x01 value, both non-empty; anything else (the empty piece after the last
        # 0x02, a part without 0x01) is not a property
        pair = pc.equal(pc.list_value_length(kv), 2)
        names = pc.take(parts, first)
        values = pc.take(parts, pc.if_else(pair, pc.add(first, 1), None))
        valid = pc.and_(pair, pc.and_(pc.greater(pc.binary_length(names), 0),
                                      pc.greater(pc.binary_length(values), 0)))
        self.names = pc.if_else(valid, names, None)
        self.values = values
        self.parents = np.asarray(pc.list_parent_indices(pairs))
        self.row_offsets = np.asarray(pairs.offsets)

    def _codes(self) -> np.ndarray:
        """Per piece, the position of its name in :data:`_RESERVED_NAMES`, -1 for any other
        name or none: one hash lookup per piece serves every reserved-name column and ``user``."""
        if self._reserved_codes is None:
            codes = pc.fill_null(pc.index_in(self.names, value_set=_RESERVED), -1)
            self._reserved_codes = np.asarray(codes, np.int32)
        return self._reserved_codes

    def get(self, name: str) -> pa.Array:
        """The value of property ``name`` per row, null where the row has none (the last one
        where a row has it twice, as a dict would)."""
        if name in _RESERVED_INDEX:
            hit = self._codes() == _RESERVED_INDEX[name]
        else:
            hit = np.asarray(pc.fill_null(pc.equal(self.names, name), False), bool)
        rows = self.parents[hit]
        where = np.full(self.n, -1, np.int64)
        where[rows] = np.arange(len(rows))
        return pc.take(self.values.filter(pa.array(hit)), pa.array(where, mask=where < 0))

    def user(self) -> pa.MapArray:
        """The non-reserved properties, as a map per row."""
        keep = np.asarray(pc.is_valid(self.names), bool) & (self._codes() < 0)
        kept = np.concatenate(([0], np.cumsum(keep, dtype=np.int64)))
        offsets = pa.array(kept[self.row_offsets].astype(np.int32))
        mask = pa.array(keep)
        return pa.MapArray.from_arrays(offsets, self.names.filter(mask), self.values.filter(mask))


def _kept_offsets(offsets: pa.Array, keep: pa.Array) -> pa.Array:
    """List offsets after dropping the flattened values where ``keep`` is false."""
    kept = pc.cumulative_sum(pc.cast(keep, pa.int32()))
    kept = pa.concat_arrays([pa.array([0], pa.int32()), kept])
    return pc.take(kept, offsets)


def _keys(raw: pa.Array) -> pa.ListArray:
    """``KEYS`` values (null: none) as lists of keys, empty keys dropped."""
    if raw.null_count == len(raw):   # no message has keys (common): skip the split
        return pa.ListArray.from_arrays(pa.array(np.zeros(len(raw) + 1, np.int32)), pa.array([], pa.string()))
    split = pc.split_pattern(pc.fill_null(raw, ""), " ")
    flat = split.flatten()
    keep = pc.not_equal(pc.utf8_length(flat), 0)
    return pa.ListArray.from_arrays(_kept_offsets(split.offsets, keep), pc.filter(flat, keep))


def _constant(text: str, n: int) -> pa.StringArray:
    """``text`` n times, laid out directly (a list of n Python strings cost more than
    reading the records)."""
    raw = text.encode()
    offsets = np.arange(n + 1, dtype=np.int32) * np.int32(len(raw))
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(raw * n)])


def _timestamps(ms: Any) -> pa.Array:
    return pc.multiply(pa.array(ms, pa.int64()), 1000).cast(_TS)


def build_columns(cols: Columns | VecColumns, topic: str, queue_id: int,
                  names: list[str]) -> dict[str, pa.Array]:
    """The columns ``names`` (of the source's schema, native Arrow types) of one bulk read,
    from either path. ``cols`` must carry commit-log offsets when ``msgId`` is wanted."""
    n = len(cols)
    vec = not isinstance(cols, Columns)   # VecColumns: arrays already
    wanted = set(names)
    # every column that reads properties is built only when they are wanted (props is set)
    props: _Props = None  # type: ignore[assignment]
    if {"msgId", "keys", "tags", "properties"} & wanted:
        props = _Props(cols.props if vec else pa.array(cols.props, pa.binary()))

    def msg_id() -> pa.Array:
        uniq = props.get(PROP_UNIQ_KEY)
        if uniq.null_count:   # a record written without a unique key: its offset id
            uniq = pa.array([u if u is not None else offset_msg_id(int(p))
                             for u, p in zip(uniq.to_pylist(), cols.phys)], pa.string())
        return uniq

    make: dict[str, Callable[[], pa.Array]] = {
        "topic": lambda: _constant(topic, n),
        "queueId": lambda: pa.array(np.full(n, queue_id, np.int32)),
        "queueOffset": lambda: pa.array(cols.offsets, pa.int64()),
        "msgId": msg_id,
        "keys": lambda: _keys(props.get(PROP_KEYS)),
        "tags": lambda: props.get(PROP_TAGS),
        "properties": lambda: props.user(),
        "body": lambda: cols.bodies if vec else pa.array(cols.bodies, pa.binary()),
        "bornTimestamp": lambda: _timestamps(cols.born),
        "storeTimestamp": lambda: _timestamps(cols.stored),
    }
    return {name: make[name]() for name in names}
