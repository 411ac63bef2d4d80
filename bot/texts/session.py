"""What the operator at the terminal reads as a serving session starts and ends."""

from __future__ import annotations

from collections.abc import Sequence

SESSION_STARTING = "Starting (loading the embedding model)…"
SESSION_ENDED = "Bye."


def serving_text(platforms: Sequence[str]) -> str:
    """``Serving Slack and Discord; stop with Ctrl-C or SIGTERM.``"""
    return f"Serving {' and '.join(platforms)}; stop with Ctrl-C or SIGTERM."
