"""The sliding-window rate limiter, on a clock the tests move by hand."""

from __future__ import annotations

import pytest

from bot.rate_limits import RateLimiter


class Clock:
    """Monotonic seconds that only move when a test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_allows_the_limit_then_says_how_long_to_wait() -> None:
    clock = Clock()
    limiter = RateLimiter(3, 60.0, clock)
    assert [limiter.try_acquire("ann") for _ in range(3)] == [0.0, 0.0, 0.0]
    clock.now += 15
    assert limiter.try_acquire("ann") == pytest.approx(45.0)  # the first event leaves the window at +60


def test_the_window_slides_one_event_at_a_time() -> None:
    clock = Clock()
    limiter = RateLimiter(2, 10.0, clock)
    assert limiter.try_acquire("k") == 0.0  # t=0
    clock.now += 4
    assert limiter.try_acquire("k") == 0.0  # t=4
    clock.now += 6
    assert limiter.try_acquire("k") == 0.0  # t=10: the event of t=0 is out, the one of t=4 in
    assert limiter.try_acquire("k") == pytest.approx(4.0)  # until t=14, when t=4 leaves


def test_a_refused_event_is_not_counted() -> None:
    clock = Clock()
    limiter = RateLimiter(1, 10.0, clock)
    assert limiter.try_acquire("k") == 0.0
    for _ in range(5):
        clock.now += 1
        assert limiter.try_acquire("k") > 0
    clock.now = 1010.0
    assert limiter.try_acquire("k") == 0.0  # refusals did not push the window further


def test_keys_are_independent() -> None:
    limiter = RateLimiter(1, 60.0, Clock())
    assert limiter.try_acquire(("slack", "T1", "ann")) == 0.0
    assert limiter.try_acquire(("slack", "T1", "bob")) == 0.0
    assert limiter.try_acquire(("slack", "T1", "ann")) > 0


def test_limit_zero_is_unlimited_and_remembers_nothing() -> None:
    limiter = RateLimiter(0, 60.0, Clock())
    assert all(limiter.try_acquire("k") == 0.0 for _ in range(1000))
    assert len(limiter) == 0


def test_keys_without_events_in_the_window_are_dropped() -> None:
    clock = Clock()
    limiter = RateLimiter(5, 60.0, clock)
    for user in range(10_000):
        limiter.try_acquire(user)
    assert len(limiter) == 10_000
    clock.now += 61
    limiter.try_acquire("late")
    assert len(limiter) == 1  # only the key that just had an event


def test_invalid_settings_are_refused() -> None:
    with pytest.raises(ValueError):
        RateLimiter(-1, 60.0)
    with pytest.raises(ValueError):
        RateLimiter(1, 0.0)
