"""Where the language model is and how hard to try: :class:`LLMSettings`, and prompt fingerprints.

Contract: settings are checked when made (``ValueError``) and never print the API key
(their repr says only whether one is set).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from raptor_engine import defaults

PLACEHOLDER_API_KEY = "not-needed"  # local servers ignore the key, but the openai client insists on one


@dataclass(frozen=True, slots=True)
class LLMSettings:
    """Where the model is and how hard to try.

    ``api_key`` may be empty: a placeholder is sent, as local servers need
    none. ``timeout_s`` bounds each attempt; a call makes at most
    ``1 + max_retries`` attempts, waiting ``backoff_base_s * 2**k`` (capped at
    ``backoff_cap_s``, plus up to 10 % jitter) between them, or what the
    server's Retry-After asks (capped at ``retry_after_cap_s``).
    ``summary_tokens`` and ``answer_tokens`` cap the completions;
    ``context_tokens`` is the input budget for a summary's cluster text.
    """

    base_url: str
    model: str
    api_key: str = ""
    max_concurrency: int = defaults.LLM_MAX_CONCURRENCY
    timeout_s: float = defaults.LLM_TIMEOUT_S
    max_retries: int = defaults.LLM_MAX_RETRIES
    summary_tokens: int = defaults.LLM_SUMMARY_TOKENS
    answer_tokens: int = defaults.LLM_ANSWER_TOKENS
    context_tokens: int = defaults.LLM_CONTEXT_TOKENS
    temperature: float = 0.0
    backoff_base_s: float = 0.5
    backoff_cap_s: float = 8.0
    retry_after_cap_s: float = 60.0

    def __post_init__(self) -> None:
        if self.max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1")
        if self.max_retries < 0 or self.timeout_s <= 0:
            raise ValueError("max_retries must be >= 0 and timeout_s > 0")

    def __repr__(self) -> str:
        # The dataclass repr would print the key into logs and tracebacks.
        return f"LLMSettings(base_url={self.base_url!r}, model={self.model!r}, api_key=<{'set' if self.api_key else 'empty'}>)"


def prompt_hash(*parts: str) -> str:
    """A short fingerprint of a prompt's texts, for the identity of a summariser or an answerer."""
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:10]
