"""Rates, trends and time to drain from successive :class:`~store.client.snapshot.Snapshot`\\ s.

:class:`History` is pure: it keeps a minute of counters taken from the snapshots it is given
and does arithmetic on them, so it is tested with made-up snapshots and no clock. A rate is
the growth of a counter over the last ``rate_s`` seconds (messages stored in a topic: the
sum of its max offsets; messages consumed by a group: the sum of its committed offsets), so a
message stored shows in the rate at the next look. A group's trend is the slope of its lag
over ``trend_s`` seconds; with it, a lagging group is ``draining`` (and when it will be
empty), ``falling behind``, ``keeping pace`` or ``stalled``.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from store.client.snapshot import Snapshot

SPARK_LEVELS = "▁▂▃▄▅▆▇█"


@dataclass(frozen=True)
class _Sample:
    at_ms: int
    stored: dict[str, int]      # topic -> messages ever stored
    consumed: dict[str, int]    # group -> sum of committed offsets
    lag: dict[str, int]         # group -> lag
    dead: dict[str, int]        # group -> dead letters


@dataclass(frozen=True)
class Drain:
    """Where a group's lag is going: ``state`` is ``caught up`` (no lag), ``draining``
    (``eta_s``: seconds until empty at the present pace), ``falling behind`` (lag grows),
    ``keeping pace`` (lag flat, messages consumed) or ``stalled`` (lag, nothing consumed);
    ``unknown`` before two looks."""

    state: str
    eta_s: float | None = None

    def text(self) -> str:
        if self.state == "draining" and self.eta_s is not None:
            return f"drains in {format_duration(self.eta_s)}"
        return self.state


class History:
    """The last ``window_s`` seconds of snapshots' counters (see the module docstring)."""

    def __init__(self, window_s: float = 60.0, rate_s: float = 5.0, trend_s: float = 15.0) -> None:
        self.window_ms = int(window_s * 1000)
        self.rate_ms = int(rate_s * 1000)
        self.trend_ms = int(trend_s * 1000)
        self._samples: deque[_Sample] = deque()
        self._dead_at_start: dict[str, int] | None = None

    def add(self, snap: Snapshot) -> None:
        """Take ``snap``'s counters; forget what is older than the window."""
        dead = dict(snap.problems.dead_letters)
        sample = _Sample(snap.taken_at, {t.topic: t.stored_total for t in snap.topics},
                         {g.group: g.consumed_total for g in snap.groups}, {g.group: g.lag for g in snap.groups}, dead)
        if self._samples and sample.at_ms <= self._samples[-1].at_ms:
            self._samples.pop()   # the clock stepped back or two looks in one ms: keep the newer
        self._samples.append(sample)
        if self._dead_at_start is None:
            self._dead_at_start = dead
        # keep one sample at or before the window's start, so the window's rates cover it
        while len(self._samples) > 2 and self._samples[1].at_ms <= sample.at_ms - self.window_ms:
            self._samples.popleft()

    def __len__(self) -> int:
        return len(self._samples)

    # -- rates -----------------------------------------------------------------------------
    def _slope(self, value: Callable[[_Sample], int | None], span_ms: int, clamp: bool) -> float | None:
        """Change per second of ``value`` between the newest sample and the oldest within
        ``span_ms`` of it (None before two samples or when the value is unknown)."""
        if len(self._samples) < 2:
            return None
        last = self._samples[-1]
        first = next((s for s in self._samples if s.at_ms >= last.at_ms - span_ms and s is not last),
                     self._samples[-2])
        a, b = value(first), value(last)
        if a is None or b is None:
            return None if b is None else 0.0
        delta = b - a
        if clamp and delta < 0:   # a topic re-created, offsets reset: no negative rates
            delta = 0
        return delta * 1000 / (last.at_ms - first.at_ms)

    def topic_rate(self, topic: str) -> float | None:
        """Messages stored in ``topic`` per second, over the last ``rate_s`` seconds."""
        return self._slope(lambda s: s.stored.get(topic), self.rate_ms, True)

    def group_rate(self, group: str) -> float | None:
        """Messages consumed (committed) by ``group`` per second, over ``rate_s`` seconds."""
        return self._slope(lambda s: s.consumed.get(group), self.rate_ms, True)

    def lag_trend(self, group: str) -> float | None:
        """How fast ``group``'s lag changes, per second over ``trend_s`` (negative: shrinking)."""
        return self._slope(lambda s: s.lag.get(group), self.trend_ms, False)

    def drain(self, group: str) -> Drain:
        """Where ``group``'s lag is going (see :class:`Drain`)."""
        if not self._samples or group not in self._samples[-1].lag:
            return Drain("unknown")
        lag = self._samples[-1].lag[group]
        if lag == 0:
            return Drain("caught up")
        trend, rate = self.lag_trend(group), self.group_rate(group)
        if trend is None:
            return Drain("unknown")
        if trend < -1e-9:
            return Drain("draining", lag / -trend)
        if trend > 1e-9:
            return Drain("falling behind")
        return Drain("keeping pace" if rate else "stalled")

    def dead_letters_new(self, group: str) -> int:
        """Dead letters of ``group`` added since the first snapshot."""
        if not self._samples or self._dead_at_start is None:
            return 0
        return max(0, self._samples[-1].dead.get(group, 0) - self._dead_at_start.get(group, 0))

    def topic_series(self, topic: str, points: int = 20) -> list[float]:
        """Messages stored per second in each of ``points`` equal slices of the window, the
        oldest first (slices before the first look are 0)."""
        width = self.window_ms / points
        out = [0.0] * points
        if len(self._samples) < 2:
            return out
        end = self._samples[-1].at_ms
        prev = None
        for s in self._samples:
            if prev is not None:
                a, b = prev.stored.get(topic), s.stored.get(topic)
                if a is not None and b is not None and b > a:
                    i = points - 1 - int((end - s.at_ms) // width)
                    if 0 <= i < points:
                        out[i] += (b - a) * 1000 / width
            prev = s
        return out

    def sparkline(self, topic: str, points: int = 20) -> str:
        """The topic's :meth:`topic_series` as block characters."""
        return sparkline(self.topic_series(topic, points))

    def to_json(self, snap: Snapshot) -> dict[str, Any]:
        """``snap.to_json()`` with the rates: ``inRate`` and ``series`` per topic, ``rate``,
        ``lagTrend``, ``drain``, ``drainSeconds`` and ``deadLettersNew`` per group."""
        obj = snap.to_json()
        for t in obj["topics"]:
            t["inRate"] = _round(self.topic_rate(t["topic"]))
            t["series"] = [round(v, 3) for v in self.topic_series(t["topic"])]
        for g in obj["groups"]:
            d = self.drain(g["group"])
            g.update(rate=_round(self.group_rate(g["group"])), lagTrend=_round(self.lag_trend(g["group"])),
                     drain=d.state, drainSeconds=_round(d.eta_s), deadLettersNew=self.dead_letters_new(g["group"]))
        return obj


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 3)


def sparkline(values: list[float]) -> str:
    """Block characters scaled to the largest value (all ``▁`` when nothing moved)."""
    top = max(values, default=0.0)
    if top <= 0:
        return SPARK_LEVELS[0] * len(values)
    last = len(SPARK_LEVELS) - 1
    return "".join(SPARK_LEVELS[0] if v <= 0 else SPARK_LEVELS[max(1, min(last, round(v / top * last)))]
                   for v in values)


def format_duration(seconds: float) -> str:
    """``45s``, ``12m``, ``3h20m``, ``2d4h``: an estimate, to the unit that matters."""
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s" if s < 600 else f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600}h"
