"""Classifying one failed attempt at the model server, and saying what went wrong.

Contract: :func:`translate` turns the exception of one attempt into a
:class:`Failure` (its kind decides whether the retry loop in
:mod:`raptor_engine.llm.retries` tries again) or None for an exception we do
not know, which the caller re-raises untouched as a bug. This module is the
only place that knows the ``openai`` package's exception classes; a
``Failure``'s ``detail`` completes "the model server at X (model Y) ..." and
never holds the API key (authentication errors' server text is not quoted),
nor does :func:`public_endpoint`, the endpoint as messages name it.
"""

from __future__ import annotations

import email.utils
import json
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import openai

RETRYABLE_STATUSES = frozenset({408, 409, 429})  # plus every 5xx; the set the openai client itself retries


class Junk(Exception):
    """A response arrived but holds no usable output (raised by our own checks)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Failure:
    """One failed attempt, classified. ``kind``: rejected, unavailable, timeout or junk."""

    kind: str
    detail: str  # completes "the model server at X (model Y) ..."
    status: int | None = None
    retry_after_s: float | None = None


def translate(exc: BaseException, timeout_s: float) -> Failure | None:
    """Classifies an exception of one attempt; None for one we do not know (a bug: re-raised)."""
    if isinstance(exc, Junk):
        return Failure("junk", f"sent an unusable response ({exc.reason})")
    if isinstance(exc, (TimeoutError, openai.APITimeoutError)):  # TimeoutError: our own per-attempt deadline
        return Failure("timeout", f"did not answer within {timeout_s:g} s")
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        if status in RETRYABLE_STATUSES or status >= 500:
            return Failure("unavailable", f"answered HTTP {status}", status, retry_after(exc.response.headers))
        return Failure("rejected", rejection_detail(status, exc.message), status)
    if isinstance(exc, openai.APIConnectionError):
        cause = type(exc.__cause__).__name__ if exc.__cause__ is not None else "connection error"
        return Failure("unavailable", f"could not be reached ({cause})")
    if isinstance(exc, openai.APIResponseValidationError):
        return Failure("junk", "sent an unusable response (not in the API's schema)")
    if isinstance(exc, (json.JSONDecodeError, UnicodeDecodeError)):
        return Failure("junk", "sent an unusable response (a body that is not valid JSON)")
    if isinstance(exc, openai.OpenAIError):
        return Failure("rejected", f"could not be used ({type(exc).__name__})")
    return None


def rejection_detail(status: int, server_message: str) -> str:
    """Why a 4xx happened, in words; the server's own message except for auth errors (they echo keys)."""
    hints = {
        401: "authentication failed: check the API key",
        403: "the key is not allowed to use this model",
        404: "not found: check base_url and the model name",
    }
    if status in hints:
        return f"answered HTTP {status} ({hints[status]})"
    said = " ".join(str(server_message).split())[:200]
    return f"answered HTTP {status} ({said})" if said else f"answered HTTP {status}"


def retry_after(headers: Any) -> float | None:
    """Seconds asked by ``retry-after-ms`` or ``Retry-After`` (seconds or an HTTP date); None if absent."""
    try:
        millis = headers.get("retry-after-ms")
        if millis is not None:
            return max(0.0, float(millis) / 1000)
        value = headers.get("retry-after")
        if value is None:
            return None
        try:
            return max(0.0, float(value))
        except ValueError:
            when = email.utils.parsedate_to_datetime(value)
            return max(0.0, when.timestamp() - time.time())
    except (TypeError, ValueError):
        return None


def public_endpoint(base_url: str) -> str:
    """``base_url`` without any user:password@ part, fit for messages and logs."""
    parts = urlsplit(base_url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))
