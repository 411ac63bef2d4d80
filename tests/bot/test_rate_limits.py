"""The sliding-window rate limiter, on a clock the tests move by hand."""

from __future__ import annotations

import math

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


def test_amounts_count_against_a_budget_and_the_wait_frees_enough() -> None:
    clock = Clock()
    budget = RateLimiter(100, 60.0, clock)  # say, bytes per minute
    assert budget.try_acquire("c", 40) == 0.0  # t=0
    clock.now += 10
    assert budget.try_acquire("c", 50) == 0.0  # t=10: 90 counted
    assert budget.try_acquire("c", 10) == 0.0  # 100: exactly the budget
    assert budget.try_acquire("c", 1) == pytest.approx(50.0)  # the 40 of t=0 leaves at t=60
    assert budget.try_acquire("c", 45) == pytest.approx(60.0)  # 40 is not enough: wait for the 50 of t=10 too
    clock.now += 50
    assert budget.try_acquire("c", 40) == 0.0  # t=60: 60 counted, refusals were not


def test_an_amount_larger_than_the_limit_never_fits() -> None:
    budget = RateLimiter(100, 60.0, Clock())
    assert budget.try_acquire("c", 101) == math.inf
    assert len(budget) == 0  # and nothing was counted


def test_refund_takes_back_the_latest_amounts() -> None:
    clock = Clock()
    budget = RateLimiter(100, 60.0, clock)
    assert budget.try_acquire("c", 70) == 0.0
    assert budget.try_acquire("c", 30) == 0.0
    budget.refund("c", 30)  # e.g. a duplicate upload: it stored nothing
    assert budget.try_acquire("c", 30) == 0.0
    budget.refund("c", 50)  # more than the last entry: the earlier one gives the rest
    assert budget.try_acquire("c", 50) == 0.0
    assert budget.try_acquire("c", 1) > 0
    budget.refund("unknown", 10)  # nothing counted there: nothing happens
    events = RateLimiter(1, 60.0, clock)
    assert events.try_acquire("ann") == 0.0
    events.refund("ann")
    assert events.try_acquire("ann") == 0.0


def test_a_limit_per_call_replaces_the_default() -> None:
    clock = Clock()
    limiter = RateLimiter(0, 60.0, clock)  # unlimited unless a call says otherwise
    assert all(limiter.try_acquire("open") == 0.0 for _ in range(50))
    assert [limiter.try_acquire("strict", limit=2) for _ in range(2)] == [0.0, 0.0]
    assert limiter.try_acquire("strict", limit=2) == pytest.approx(60.0)
    assert limiter.try_acquire("strict", limit=3) == 0.0
    with pytest.raises(ValueError):
        limiter.try_acquire("strict", amount=-1, limit=3)
    with pytest.raises(ValueError):
        limiter.try_acquire("strict", limit=-1)
