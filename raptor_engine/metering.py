"""What language-model work costs, counted per build, and a ceiling checked before spending.

A :class:`Meter` counts requests, tokens and time. One meter belongs to each
:class:`~raptor_engine.llm.LLMClient` (everything it ever did); another is
opened around a piece of work with :func:`metering` and sees only the requests
made inside it, wherever they run: the meter travels in a context variable,
which asyncio tasks and ``asyncio.to_thread`` inherit, so two channels
rebuilding at once on one client are counted apart.

:class:`SpendingLimits` bound a metered piece of work. They are checked by
:meth:`Meter.reserve` *before* a batch of requests is made, with the batch's
estimated cost, so a runaway build stops before it spends past its ceiling
rather than after.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from raptor_engine.errors import SpendingLimitReached


@dataclass(frozen=True, slots=True)
class ModelUsage:
    """Counters of language-model work.

    ``calls`` counts logical requests (a chat completion or an embedding
    batch), each of which may take several HTTP attempts (``retries`` counts
    the extra ones); ``failed_calls`` those that raised. Tokens are the
    server's own counts from its responses (also of responses rejected as junk:
    they were paid for). ``seconds`` is wall time inside requests, summed over
    requests (concurrent requests overlap, so it can exceed elapsed time).
    """

    calls: int = 0
    failed_calls: int = 0
    retries: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True, slots=True)
class SpendingLimits:
    """Ceilings for one metered piece of work; 0 means no ceiling."""

    max_calls: int = 0
    max_tokens: int = 0

    @property
    def bounded(self) -> bool:
        return bool(self.max_calls or self.max_tokens)


class Meter:
    """Thread-safe counters, optionally bounded by ``limits``."""

    def __init__(self, limits: SpendingLimits = SpendingLimits()) -> None:
        self.limits = limits
        self._lock = threading.Lock()
        self._usage = ModelUsage()
        self._reserved_calls = 0
        self._reserved_tokens = 0

    def usage(self) -> ModelUsage:
        """A snapshot of the counters."""
        with self._lock:
            return self._usage

    def reserve(self, calls: int, tokens: int, what: str) -> None:
        """Books ``calls`` requests costing about ``tokens`` tokens, or raises
        :class:`SpendingLimitReached` (booking nothing) if that would pass a ceiling.

        Bookings add up: the ceiling bounds everything reserved in this meter,
        so concurrent batches cannot together pass it. ``what`` names the batch
        in the message (e.g. "12 summaries for layer 2").
        """
        with self._lock:
            calls_after = self._reserved_calls + calls
            tokens_after = self._reserved_tokens + tokens
            limits = self.limits
            if limits.max_calls and calls_after > limits.max_calls:
                raise SpendingLimitReached(
                    f"it would pass the ceiling of {limits.max_calls:,} language-model calls per rebuild: "
                    f"{self._reserved_calls:,} already made or under way, and {what} need {calls:,} more",
                    kind="calls", limit=limits.max_calls, used=self._reserved_calls,
                )
            if limits.max_tokens and tokens_after > limits.max_tokens:
                raise SpendingLimitReached(
                    f"it would pass the ceiling of {limits.max_tokens:,} language-model tokens per rebuild: "
                    f"about {self._reserved_tokens:,} already spent or under way, and {what} need about "
                    f"{tokens:,} more",
                    kind="tokens", limit=limits.max_tokens, used=self._reserved_tokens,
                )
            self._reserved_calls, self._reserved_tokens = calls_after, tokens_after

    def record(self, usage: ModelUsage) -> None:
        """Adds ``usage`` to the counters."""
        with self._lock:
            u = self._usage
            self._usage = ModelUsage(
                calls=u.calls + usage.calls,
                failed_calls=u.failed_calls + usage.failed_calls,
                retries=u.retries + usage.retries,
                prompt_tokens=u.prompt_tokens + usage.prompt_tokens,
                completion_tokens=u.completion_tokens + usage.completion_tokens,
                seconds=u.seconds + usage.seconds,
            )


_current: contextvars.ContextVar[Meter | None] = contextvars.ContextVar("raptor_meter", default=None)


def current_meter() -> Meter | None:
    """The meter of the work in progress in this context, if any."""
    return _current.get()


def adopt_meter(meter: Meter | None) -> None:
    """Makes ``meter`` current in this context: for a task started on another event loop
    on behalf of metered work (tasks inherit the context of the loop that makes them)."""
    if meter is not None:
        _current.set(meter)


@contextmanager
def metering(limits: SpendingLimits = SpendingLimits()) -> Iterator[Meter]:
    """Counts the language-model requests made inside the block (and in tasks and
    threads it starts) in a new meter, bounded by ``limits``."""
    meter = Meter(limits)
    token = _current.set(meter)
    try:
        yield meter
    finally:
        _current.reset(token)
