"""The process's Prometheus metrics, in a registry each :class:`Metrics` owns.

A private :class:`prometheus_client.CollectorRegistry` (never the library's global default)
lets tests, and several bots in one process, each count on their own without clashing over
metric names. Every method is safe to call from any thread: prometheus_client locks its values.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

log = logging.getLogger(__name__)

# The Content-Type that goes with :meth:`Metrics.render`'s bytes.
CONTENT_TYPE = CONTENT_TYPE_LATEST

# How a question can end: with an answer, with nothing relevant found, with nothing to search (the
# channel holds no source yet: a normal state, no failure), turned away (rate limit, permissions, a
# refused input) or with an error.
QUESTION_OUTCOMES = frozenset({"answered", "not_found", "no_material", "refused", "failed"})

# A retrieval plus one model call: tens of milliseconds when cached or refused, up to a minute
# when the model is slow.
QUESTION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0)
# Slack wants an acknowledgement within 3 s; a healthy loop answers in a few milliseconds.
ACK_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0)
# A tree rebuild: seconds for a small channel, up to an hour for a large one.
REBUILD_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0)


class Metrics:
    """The bot's metrics, all named ``raptor_*``, rendered by :meth:`render`.

    Label values (platform, outcome, purpose, kind) are free text except a question's outcome,
    which must be one of :data:`QUESTION_OUTCOMES`; keep them to a small fixed set, since every
    distinct value is a time series of its own.
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self._questions = Counter("raptor_questions", "Questions handled, by how they ended.",
                                  ["platform", "outcome"], registry=r)
        self._question_seconds = Histogram("raptor_question_seconds", "Time from a question to its reply.",
                                           ["platform"], buckets=QUESTION_BUCKETS, registry=r)
        self._ack_seconds = Histogram("raptor_ack_seconds", "Time to acknowledge a platform event.",
                                      ["platform"], buckets=ACK_BUCKETS, registry=r)
        self._rebuilds = Counter("raptor_rebuilds", "Tree rebuild attempts, by outcome.", ["outcome"], registry=r)
        self._rebuild_seconds = Histogram("raptor_rebuild_seconds", "Duration of a tree rebuild attempt.",
                                          buckets=REBUILD_BUCKETS, registry=r)
        self._queue_depth = Gauge("raptor_queue_depth", "Jobs waiting in the work queue (NaN when unknown).",
                                  registry=r)
        # Unknown until watch_queue is called: NaN, not a misleading "empty".
        self._queue_depth.set(math.nan)
        self._model_calls = Counter("raptor_model_calls", "Calls to a model, by purpose.", ["purpose"], registry=r)
        self._model_tokens = Counter("raptor_model_tokens", "Tokens used by model calls, by purpose.",
                                     ["purpose"], registry=r)
        self._errors = Counter("raptor_errors", "Errors, by kind.", ["kind"], registry=r)
        self._reconnects = Counter("raptor_reconnects", "Reconnections of a platform connection, by what set them off.",
                                   ["platform", "reason"], registry=r)
        self._loop_blocks = Counter("raptor_loop_blocks", "Times the event loop was blocked past its watchdog's "
                                    "threshold.", registry=r)
        self._unverified = Counter("raptor_citations_unverified", "Citations whose quote was not verbatim in "
                                   "its source, shown without a quote.", registry=r)
        self._unsupported = Counter("raptor_sentences_unsupported", "Sentences of answers that the passages "
                                    "they cite do not support.", registry=r)

    def observe_question(self, platform: str, outcome: str, seconds: float) -> None:
        """Count one question that ended with ``outcome`` after ``seconds``.

        Raises ValueError when ``outcome`` is not one of :data:`QUESTION_OUTCOMES` (a typo
        would otherwise open a series no dashboard looks at).
        """
        if outcome not in QUESTION_OUTCOMES:
            raise ValueError(f"unknown question outcome {outcome!r}; expected one of {sorted(QUESTION_OUTCOMES)}")
        self._questions.labels(platform=platform, outcome=outcome).inc()
        self._question_seconds.labels(platform=platform).observe(seconds)

    def observe_ack(self, platform: str, seconds: float) -> None:
        """Record the time taken to acknowledge one platform event."""
        self._ack_seconds.labels(platform=platform).observe(seconds)

    def observe_rebuild(self, outcome: str, seconds: float) -> None:
        """Count one rebuild attempt (``built``, ``failed``, ``busy``, ...) and its duration."""
        self._rebuilds.labels(outcome=outcome).inc()
        self._rebuild_seconds.observe(seconds)

    def watch_queue(self, depth: Callable[[], float]) -> None:
        """Read the queue depth from ``depth`` at every scrape (replacing any earlier callable).

        ``depth`` may be called from any thread. When it raises, the gauge shows NaN for that
        scrape: a broken queue must not take the rest of the metrics down with it.
        """
        def safe_depth() -> float:
            try:
                return float(depth())
            except Exception:
                log.debug("queue depth callable failed; reporting NaN", exc_info=True)
                return math.nan

        self._queue_depth.set_function(safe_depth)

    def count_model_calls(self, purpose: str, calls: int, tokens: int = 0) -> None:
        """Count ``calls`` model calls for ``purpose`` that used ``tokens`` in all (a rebuild's
        report gives both summed). Raises ValueError on negative numbers."""
        if calls < 0 or tokens < 0:
            raise ValueError(f"calls and tokens must not be negative, got {calls} and {tokens}")
        self._model_calls.labels(purpose=purpose).inc(calls)
        self._model_tokens.labels(purpose=purpose).inc(tokens)

    def count_model_call(self, purpose: str, tokens: int = 0) -> None:
        """Count one model call for ``purpose`` (``summary``, ``answer``, ``embedding``, ...)
        and the ``tokens`` it used (0 when unknown). Raises ValueError on negative tokens."""
        if tokens < 0:
            raise ValueError(f"tokens must not be negative, got {tokens}")
        self._model_calls.labels(purpose=purpose).inc()
        self._model_tokens.labels(purpose=purpose).inc(tokens)

    def count_answer_checks(self, unverified_quotes: int, unsupported_sentences: int) -> None:
        """Count what one answer's check found: quotes not verbatim in their source, and
        sentences the passages they cite do not support. Raises ValueError on a negative count."""
        if unverified_quotes < 0 or unsupported_sentences < 0:
            raise ValueError("counts must not be negative")
        self._unverified.inc(unverified_quotes)
        self._unsupported.inc(unsupported_sentences)

    def count_error(self, kind: str) -> None:
        """Count one error of ``kind``."""
        self._errors.labels(kind=kind).inc()

    def count_reconnect(self, platform: str, reason: str) -> None:
        """Count one reconnection of ``platform``'s connection, set off by ``reason`` (Slack:
        ``silent``, ``unanswered``, ``refresh``, ``dropped``; Discord: ``gateway``, ``error``)."""
        self._reconnects.labels(platform=platform, reason=reason).inc()

    def count_loop_block(self) -> None:
        """Count one stretch of the event loop blocked past its watchdog's threshold."""
        self._loop_blocks.inc()

    def render(self) -> bytes:
        """Every metric in the Prometheus text exposition format, to serve with :data:`CONTENT_TYPE`."""
        return generate_latest(self.registry)
