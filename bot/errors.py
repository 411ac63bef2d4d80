"""The errors raised by ``bot``, as one tree::

    BotError
    ├── ConfigError   the configuration file or environment is invalid
    ├── DataDirInUse  another living process holds the embedded data directory
    ├── DataDirNotWritable  this process may not write the data directory (its owner, a read-only mount)
    └── NothingToAsk  a question named a channel with nothing to search (unknown, or no sources)

Engine errors (``raptor_engine.errors.RaptorError``) pass through unchanged:
they are already written for the person who caused them, except the failures of the
bot's own servers (:func:`names_servers`), whose messages name where they run: those
reach the log only, and chat is told their kind (``bot.texts.requests.error_text``).
"""

from __future__ import annotations

import logging
import os
import uuid
from pathlib import Path


class BotError(Exception):
    """Base of every error raised on purpose by ``bot``."""


class ConfigError(BotError):
    """The configuration is invalid; the message names the key path and the problem."""


class DataDirInUse(BotError):
    """Another process holds the embedded data directory's lock; nothing was written.
    ``holder`` describes it ("process 1234 (python -m bot serve)")."""

    def __init__(self, directory: Path, holder: str) -> None:
        self.directory = directory
        self.holder = holder
        super().__init__(
            f"The data directory {directory} is in use by {holder}. Use that process, "
            "or a Chroma server (chroma.host in the configuration) to run several processes."
        )


class DataDirNotWritable(BotError):
    """This process may not create files in the data directory (owned by another user, or
    mounted read-only); nothing was written. The message names the directory and the fix."""

    def __init__(self, directory: Path, read_only: bool) -> None:
        self.directory = directory
        uid = os.getuid()
        fix = ("it is on a read-only file system: mount it writable" if read_only else
               f"this process runs as user {uid}: make that user its owner (chown -R {uid} {directory}), "
               "or run as a user who may write it (docker run --user)")
        super().__init__(f"Cannot write the data directory {directory}: {fix}.")


class NothingToAsk(BotError):
    """A question (the command line's ``ask`` or ``retrieve``) named a channel with nothing to
    search: one the store has never seen, or one holding no source (none added yet, or all
    forgotten). Not "searched, nothing found": the message says which of the two, and what to do."""


_CEILING_KEYS = {"calls": "llm.max_calls_per_rebuild", "tokens": "llm.max_tokens_per_rebuild"}


def explain(error: Exception) -> str:
    """The message a person sees for an engine or bot error: its own text, plus the
    configuration key to change where the engine's message cannot know it."""
    from raptor_engine import SpendingLimitReached  # bot -> raptor_engine, never the reverse

    text = str(error)
    if isinstance(error, SpendingLimitReached) and error.kind in _CEILING_KEYS:
        text += f" To allow more, raise {_CEILING_KEYS[error.kind]} in the configuration."
    return text


def names_servers(error: Exception) -> bool:
    """Whether ``error`` is a failure of one of the bot's own servers (the language model
    endpoint, the Chroma store), whose message may name its host, URL or port. Such a
    message is for the operator's log, never for a chat reply: anyone in the channel would
    learn where the bot's internal servers are."""
    from raptor_engine import ProviderError, StoreError  # bot -> raptor_engine, never the reverse

    return isinstance(error, (ProviderError, StoreError))


def new_reference() -> str:
    """A short id (8 hex characters) tying an error reply to its log line."""
    return uuid.uuid4().hex[:8]


def log_failure(logger: logging.Logger, message: str, *args: object) -> str:
    """The error boundary's log line: logs the exception being handled, with its traceback,
    as ``message % (*args, reference)`` (the message's last ``%s`` is a new reference), and
    returns that reference, for the person's reply to quote."""
    reference = new_reference()
    # Also as a field of its own, for structured (JSON) logs to be searched by reference.
    logger.exception(message, *args, reference, extra={"reference": reference})
    return reference
