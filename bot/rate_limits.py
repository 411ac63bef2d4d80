"""Sliding-window rate limits: questions and uploads per person, rebuilds and upload bytes per channel.

A person's limits hold across the channels of a workspace: they are counted under
:func:`person_in_workspace` (platform, workspace, person), so asking or uploading in
another channel of the same workspace does not start a fresh allowance.

A limiter counts amounts within the last window, per key: one per event for
questions, rebuilds and uploads, the size for a byte budget. It remembers the
times and amounts it allowed within the window and nothing older: keys whose
entries have all aged out are dropped, so memory follows the recent traffic,
not every key ever seen.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Callable, Hashable

from raptor_engine import ChannelKey

log = logging.getLogger(__name__)


def person_in_workspace(channel: ChannelKey, person_id: str) -> tuple[str, str, str]:
    """The key a person's limits are counted under: their platform, workspace and id, the
    same whichever channel of that workspace they write in. Pure."""
    return (channel.platform, channel.workspace, person_id)


class _Window:
    """The amounts one key was allowed within the window, oldest first, and their sum."""

    __slots__ = ("entries", "total")

    def __init__(self) -> None:
        self.entries: deque[tuple[float, int]] = deque()
        self.total = 0

    def expire(self, horizon: float) -> None:
        """Removes the entries at or before ``horizon`` (they are in time order)."""
        while self.entries and self.entries[0][0] <= horizon:
            self.total -= self.entries.popleft()[1]


class RateLimiter:
    """At most ``limit`` units per ``window_s`` seconds per key (sliding window); limit 0 = unlimited.

    A unit is one event unless the caller says otherwise: ``try_acquire(key)``
    counts one (questions, rebuilds), ``try_acquire(key, amount=size)`` counts
    an amount (bytes of a daily budget). Not thread-safe: it is meant to be
    used from one event loop (no awaits inside, so coroutines of that loop
    cannot interleave within a call). ``clock`` gives monotonic seconds; tests
    pass their own.
    """

    def __init__(self, limit: int, window_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        """Raises ``ValueError`` for a negative ``limit`` or a ``window_s`` that is not positive."""
        _check_limit(limit)
        if window_s <= 0:
            raise ValueError(f"window_s must be positive, not {window_s}")
        self.limit = limit
        self.window_s = window_s
        self._clock = clock
        self._windows: dict[Hashable, _Window] = {}
        self._last_sweep = clock()

    def try_acquire(self, key: Hashable, amount: int = 1, limit: int | None = None) -> float:
        """Counts ``amount`` for ``key`` if it fits under the limit within the window, and returns 0.0.

        Otherwise nothing is counted and the result is the seconds until it would
        fit (> 0), or ``math.inf`` when ``amount`` alone is more than the limit.
        ``limit`` replaces :attr:`limit` for this call (a channel's own setting;
        0 = unlimited). Raises ``ValueError`` for a negative ``amount`` or ``limit``.
        """
        limit = self.limit if limit is None else limit
        _check_limit(limit)
        if amount < 0:
            raise ValueError(f"amount must be 0 or more, not {amount}")
        if limit == 0:
            return 0.0
        if amount > limit:
            return math.inf
        now = self._clock()
        self._sweep(now)
        window = self._windows.get(key)
        if window is None:
            window = self._windows[key] = _Window()
        window.expire(now - self.window_s)
        if window.total + amount <= limit:
            window.entries.append((now, amount))
            window.total += amount
            return 0.0
        # Entries leave the window oldest first: wait for the first one after which enough is freed.
        excess = window.total + amount - limit
        for moment, counted in window.entries:
            excess -= counted
            if excess <= 0:
                return moment + self.window_s - now
        return math.inf  # unreachable: amount <= limit, so emptying the window always makes room

    def refund(self, key: Hashable, amount: int = 1) -> None:
        """Takes back ``amount`` counted for ``key`` by :meth:`try_acquire` (say, an upload that
        stored nothing new), from its most recent entries; what is no longer in the window is
        not refunded. Nothing happens for a key with nothing counted."""
        window = self._windows.get(key)
        while window is not None and amount > 0 and window.entries:
            moment, counted = window.entries.pop()
            taken = min(counted, amount)
            amount -= taken
            window.total -= taken
            if counted > taken:
                window.entries.append((moment, counted - taken))

    def __len__(self) -> int:
        """How many keys are remembered (for tests and monitoring)."""
        return len(self._windows)

    def _sweep(self, now: float) -> None:
        """Drops every key with nothing left in the window, at most once per window:
        each sweep costs one pass over the keys, paid for by a window's worth of calls."""
        if now - self._last_sweep < self.window_s:
            return
        self._last_sweep = now
        horizon = now - self.window_s
        for key in list(self._windows):
            window = self._windows[key]
            window.expire(horizon)
            if not window.entries:
                del self._windows[key]


def _check_limit(limit: int) -> None:
    if limit < 0:
        raise ValueError(f"limit must be 0 (unlimited) or more, not {limit}")
