"""Sliding-window rate limits: questions per person, rebuilds per channel.

A limiter remembers the times of the events it allowed within the last
window, per key, and nothing older: keys whose events have all aged out are
dropped, so memory follows the recent traffic, not every key ever seen.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Hashable

log = logging.getLogger(__name__)


class RateLimiter:
    """At most ``limit`` events per ``window_s`` seconds per key (sliding window); limit 0 = unlimited.

    Not thread-safe: it is meant to be used from one event loop (no awaits
    inside, so coroutines of that loop cannot interleave within a call).
    ``clock`` gives monotonic seconds; tests pass their own.
    """

    def __init__(self, limit: int, window_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        """Raises ``ValueError`` for a negative ``limit`` or a ``window_s`` that is not positive."""
        if limit < 0:
            raise ValueError(f"limit must be 0 (unlimited) or more, not {limit}")
        if window_s <= 0:
            raise ValueError(f"window_s must be positive, not {window_s}")
        self.limit = limit
        self.window_s = window_s
        self._clock = clock
        self._events: dict[Hashable, deque[float]] = {}
        self._last_sweep = clock()

    def try_acquire(self, key: Hashable) -> float:
        """0.0 if allowed (and the event is counted), else the seconds until the next event is allowed (nothing counted)."""
        if self.limit == 0:
            return 0.0
        now = self._clock()
        self._sweep(now)
        events = self._events.get(key)
        if events is None:
            events = self._events[key] = deque()
        _expire(events, now - self.window_s)
        if len(events) < self.limit:
            events.append(now)
            return 0.0
        # The oldest event in the window leaves it first; it is > now - window, so this is > 0.
        return events[0] + self.window_s - now

    def __len__(self) -> int:
        """How many keys are remembered (for tests and monitoring)."""
        return len(self._events)

    def _sweep(self, now: float) -> None:
        """Drops every key with no event left in the window, at most once per window:
        each sweep costs one pass over the keys, paid for by a window's worth of calls."""
        if now - self._last_sweep < self.window_s:
            return
        self._last_sweep = now
        horizon = now - self.window_s
        for key in list(self._events):
            events = self._events[key]
            _expire(events, horizon)
            if not events:
                del self._events[key]


def _expire(events: deque[float], horizon: float) -> None:
    """Removes the events at or before ``horizon`` (they are in time order)."""
    while events and events[0] <= horizon:
        events.popleft()
