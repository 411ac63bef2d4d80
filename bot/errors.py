"""The errors raised by ``bot``, as one tree::

    BotError
    └── ConfigError   the configuration file or environment is invalid

Engine errors (``raptor_engine.errors.RaptorError``) pass through unchanged:
they are already written for the person who caused them.
"""

from __future__ import annotations


class BotError(Exception):
    """Base of every error raised on purpose by ``bot``."""


class ConfigError(BotError):
    """The configuration is invalid; the message names the key path and the problem."""
