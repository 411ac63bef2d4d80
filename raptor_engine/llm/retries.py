"""How an LLM client's calls are tried again, and what a call that failed for good raises.

Contract: :class:`RetryPolicy` runs one call's attempts (:meth:`RetryPolicy.run`) within the
client's bound on requests in flight and a timeout per attempt. Retried: 408, 409, 429
(honouring Retry-After), 5xx, connection errors and timeouts, up to ``max_retries`` times;
junk (bad JSON, no choices, blank text) at most ``JUNK_RETRIES`` times. Other 4xx raise at
once. Between attempts it waits the server's Retry-After or an exponential backoff with
jitter, holding no slot, and logs a warning. A call that failed for good raises a
:class:`~raptor_engine.errors.ProviderError` subclass naming the endpoint, the model and what
went wrong (logged as an error); an exception :func:`~raptor_engine.llm.failures.translate`
does not know is re-raised untouched (a bug). A stream that broke after its first text is never
retried (:meth:`RetryPolicy.broken_stream`). No message, log line or chained cause holds the
API key.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

import httpx

from raptor_engine.errors import (
    ModelBadResponse,
    ModelRequestRejected,
    ModelTimeout,
    ModelUnavailable,
    ProviderError,
)
from raptor_engine.llm.failures import Failure, translate
from raptor_engine.llm.settings import PLACEHOLDER_API_KEY, LLMSettings

# The package's name, not this module's: log records keep the name they had before the split.
logger = logging.getLogger("raptor_engine.llm")

T = TypeVar("T")

JUNK_RETRIES = 1  # a garbled body may be a one-off (a proxy cut it); twice in a row is the server's way


@dataclass(slots=True)
class Tries:
    """The attempts of one call so far (for the retry policy)."""

    attempt: int = 0
    junk_seen: int = 0
    details: list[str] = field(default_factory=list)


class RetryPolicy:
    """The attempts of one client's calls. See the module docstring."""

    def __init__(self, settings: LLMSettings, endpoint: str, api_key: str, on_retry: Callable[[], None]) -> None:
        """``endpoint`` is the server as messages name it; ``on_retry`` counts each retry."""
        self._settings = settings
        self._endpoint = endpoint
        self._api_key = api_key
        self._on_retry = on_retry

    async def run(self, what: str, model: str, once: Callable[[], Awaitable[T]], limit: asyncio.Semaphore) -> T:
        """``once`` tried until it succeeds or fails for good, each attempt holding a slot of
        ``limit`` and bounded by the timeout."""
        tries = Tries()
        while True:
            try:
                async with limit:
                    # Our own deadline too: httpx's timeout is per read, a server dripping bytes would evade it.
                    async with asyncio.timeout(self._settings.timeout_s):
                        return await once()
            except Exception as exc:  # classified by after_failure; unknown ones are re-raised untouched
                await self.after_failure(what, model, exc, tries)

    async def after_failure(self, what: str, model: str, exc: Exception, tries: Tries) -> None:
        """After a failed attempt: raises the call's final error (or ``exc`` itself when it is
        not one we know), or waits the delay before the next attempt (holding no slot)."""
        settings = self._settings
        failure = translate(exc, settings.timeout_s)
        if failure is None:
            raise exc
        tries.attempt += 1
        tries.details.append(failure.detail)
        tries.junk_seen += failure.kind == "junk"
        out_of_tries = tries.attempt > settings.max_retries or tries.junk_seen > JUNK_RETRIES
        if failure.kind == "rejected" or out_of_tries:
            raise self._final_error(what, model, failure, tries.details) from self.scrubbed(exc)
        delay = self._delay(tries.attempt, failure)
        logger.warning("%s to %s (model %s) %s; retry %d of %d in %.2f s", what, self._endpoint, model,
                       failure.detail, tries.attempt, settings.max_retries, delay)
        self._on_retry()
        await asyncio.sleep(delay)

    def broken_stream(self, exc: Exception) -> ProviderError | None:
        """The error for a stream that failed with ``exc`` after its first text; None for an
        exception we do not know (a bug: re-raised as it is)."""
        failure = translate(exc, self._settings.timeout_s)
        if failure is None and isinstance(exc, httpx.HTTPError):
            # The transport's own errors: httpx raises them unwrapped while a body is being read.
            failure = Failure("unavailable", f"cut the stream ({type(exc).__name__})")
        if failure is None:
            return None
        model = self._settings.model
        message = (f"the answer broke off after it began: the model server at {self._endpoint} (model {model!r}) "
                   f"{failure.detail}; not retried, as its beginning was already given")
        error: ProviderError
        if failure.kind == "timeout":
            error = ModelTimeout(message, endpoint=self._endpoint, model=model, status=None, attempts=1)
        else:
            error = ModelUnavailable(message, endpoint=self._endpoint, model=model, status=failure.status, attempts=1)
        error.args = (self._redacted(str(error)),)
        logger.error("%s", error)
        return error

    def scrubbed(self, exc: BaseException) -> BaseException | None:
        """The cause to chain, unless its text holds the key (then none: a traceback would print it)."""
        return None if self._api_key and self._api_key in str(exc) else exc

    def _delay(self, attempt: int, failure: Failure) -> float:
        """Seconds before the next attempt: the server's Retry-After if it gave one, else backoff."""
        settings = self._settings
        if failure.retry_after_s is not None:
            return min(failure.retry_after_s, settings.retry_after_cap_s)
        backoff = min(settings.backoff_cap_s, settings.backoff_base_s * 2 ** (attempt - 1))
        return backoff * (1 + random.uniform(0, 0.1))  # jitter: parallel calls do not retry in lockstep

    def _final_error(self, what: str, model: str, failure: Failure, details: list[str]) -> ProviderError:
        """The error for a call that failed: ``failure`` is the last attempt's, ``details`` every attempt's."""
        endpoint = self._endpoint
        where = f"the model server at {endpoint} (model {model!r})"
        attempts = len(details)
        if failure.kind == "rejected":
            message = f"{what} refused: {where} {failure.detail}; not retried"
            error: ProviderError = ModelRequestRejected(message, endpoint=endpoint, model=model, status=failure.status)
        else:
            if attempts == 1:
                message = f"{what} failed: {where} {failure.detail}"
            elif len(set(details)) == 1:
                message = f"{what} failed: {where} {failure.detail}, {attempts} times in a row"
            else:
                message = f"{what} failed after {attempts} attempts: {where} last {failure.detail}"
            if failure.kind == "junk":
                error = ModelBadResponse(message, endpoint=endpoint, model=model, attempts=attempts)
            elif failure.kind == "timeout":
                error = ModelTimeout(message, endpoint=endpoint, model=model, status=None, attempts=attempts)
            else:
                error = ModelUnavailable(message, endpoint=endpoint, model=model, status=failure.status,
                                         attempts=attempts)
        error.args = (self._redacted(str(error)),)  # belt and braces: the key never leaves
        logger.error("%s", error)
        return error

    def _redacted(self, text: str) -> str:
        """``text`` with the key masked; the placeholder is no secret (masking it would garble messages)."""
        secret = self._api_key
        return text.replace(secret, "***") if secret and secret != PLACEHOLDER_API_KEY else text
