"""store.History: rates, sparklines, trends and time to drain from made-up snapshots (no clock,
no store), and the snapshot records' JSON."""
from __future__ import annotations

import store
from store import GroupStat, History, Problems, QueueLag, Snapshot, TopicStat


def snap(at_s: float, stored: int, committed: int, dead: int = 0) -> Snapshot:
    """A store with one topic of one queue, ``stored`` messages in it, and group g at ``committed``."""
    topic = TopicStat("orders", 1, False, False, (0,), (stored,), stored * 10)
    lag = QueueLag("orders", 0, stored, committed, stored - committed, None)
    return Snapshot(int(at_s * 1000), (topic,), (GroupStat("g", (lag,), ()),), (),
                    Problems(dead_letters={"g": dead} if dead else {}))


def test_rates_need_two_looks_then_follow_the_counters() -> None:
    h = History(rate_s=5, trend_s=10)
    h.add(snap(0, 100, 0))
    assert h.topic_rate("orders") is None and h.group_rate("g") is None
    assert h.drain("g").state == "unknown"
    h.add(snap(1, 150, 20))
    assert h.topic_rate("orders") == 50.0
    assert h.group_rate("g") == 20.0
    assert h.lag_trend("g") == 30.0          # lag 100 -> 130
    assert h.drain("g").state == "falling behind"


def test_rate_window_and_drain_estimate() -> None:
    h = History(rate_s=2, trend_s=4)
    for t in range(10):                       # 10 in/s, 30 out/s: lag shrinks by 20/s
        h.add(snap(t, 1000 + 10 * t, 30 * t))
    assert h.topic_rate("orders") == 10.0
    assert h.group_rate("g") == 30.0
    assert h.lag_trend("g") == -20.0
    d = h.drain("g")
    lag = 1000 + 90 - 270
    assert d.state == "draining" and d.eta_s == lag / 20
    assert d.text() == "drains in 41s"


def test_flat_lag_is_stalled_or_keeping_pace_and_zero_is_caught_up() -> None:
    h = History()
    h.add(snap(0, 10, 0))
    h.add(snap(1, 10, 0))
    assert h.drain("g").state == "stalled"
    h = History()
    h.add(snap(0, 10, 5))
    h.add(snap(1, 20, 15))
    assert h.drain("g").state == "keeping pace"
    h.add(snap(2, 20, 20))
    assert h.drain("g").state == "caught up"


def test_counters_that_go_back_give_no_negative_rate() -> None:
    h = History()
    h.add(snap(0, 100, 50))
    h.add(snap(1, 0, 0))                      # topic re-created, offsets reset
    assert h.topic_rate("orders") == 0.0 and h.group_rate("g") == 0.0


def test_window_forgets_old_looks_and_series_covers_the_last_minute() -> None:
    h = History(window_s=60)
    for t in range(0, 200):
        h.add(snap(t, t * 3, 0))
    assert len(h) <= 62
    series = h.topic_series("orders", points=20)
    assert len(series) == 20 and all(abs(v - 3.0) < 1e-9 for v in series)
    h = History(window_s=60)
    h.add(snap(0, 0, 0))
    h.add(snap(57, 0, 0))
    h.add(snap(58, 60, 0))                    # a burst in the newest slice only
    assert h.sparkline("orders", points=20) == "▁" * 19 + "█"


def test_sparkline_and_duration_text() -> None:
    assert store.sparkline([0, 0]) == "▁▁"
    assert store.sparkline([0, 1, 2, 4, 8]) == "▁▂▃▅█"
    assert [store.format_duration(s) for s in (5, 75, 700, 7300, 200000)] == ["5s", "1m15s", "11m", "2h01m", "2d7h"]


def test_dead_letters_new_since_the_first_look() -> None:
    h = History()
    h.add(snap(0, 10, 0, dead=3))
    h.add(snap(1, 10, 0, dead=5))
    assert h.dead_letters_new("g") == 2
    obj = h.to_json(snap(1, 10, 0, dead=5))
    assert obj["problems"]["deadLetters"] == {"g": 5}
    assert obj["groups"][0]["deadLettersNew"] == 2 and obj["groups"][0]["lag"] == 10
    assert obj["topics"][0]["inRate"] == 0.0 and obj["topics"][0]["messages"] == 10
