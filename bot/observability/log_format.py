"""Structured logs: one JSON object per line, carrying the process's role and the channel served.

The channel comes from :data:`current_channel`, set around the handling of an event with
:func:`channel_context`. asyncio copies the current context into every task at its creation,
and :func:`asyncio.to_thread` runs its function in a copy too, so the channel follows the work
an event starts, into tasks and worker threads alike. (A bare ``loop.run_in_executor`` or
``threading.Thread`` does not copy it.)

This module configures no logger: the entry point installs :func:`json_handler` where it wants.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, TextIO

log = logging.getLogger(__name__)

# The channel whose event is being handled ("" outside any).
current_channel: ContextVar[str] = ContextVar("current_channel", default="")

# This process's part in the deployment ("front-end", "worker", "bot"); one per process, so a
# plain module global rather than a context variable.
_process_role = ""


def set_process_role(role: str) -> None:
    """Name this process's role in every JSON log line from now on."""
    global _process_role
    _process_role = role


@contextmanager
def channel_context(channel: str) -> Iterator[None]:
    """Set :data:`current_channel` to ``channel`` for the block, restoring the previous value after."""
    token = current_channel.set(channel)
    try:
        yield
    finally:
        current_channel.reset(token)


class JsonFormatter(logging.Formatter):
    """Formats a record as one line of JSON.

    Keys: ``time`` (ISO 8601, UTC, milliseconds), ``level``, ``logger``, ``message`` (with its
    arguments filled in), ``role``; ``channel`` (``extra={"channel": ...}`` first, else
    :data:`current_channel`; left out when empty); ``reference`` when the call passed
    ``extra={"reference": ...}``; ``exception`` (the formatted traceback) with ``exc_info``;
    ``stack`` with ``stack_info``. Values JSON cannot hold are written as their ``str()``.
    """

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": _timestamp(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "role": _process_role,
        }
        channel = getattr(record, "channel", None) or current_channel.get()
        if channel:
            entry["channel"] = str(channel)
        if hasattr(record, "reference"):
            entry["reference"] = record.reference
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:  # already formatted by another handler's formatter
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        # default=str: a reference or channel of another type must not lose the whole line.
        return json.dumps(entry, ensure_ascii=False, default=str)


def _timestamp(created: float) -> str:
    """``created`` (epoch seconds) as ``2024-05-01T12:00:00.123Z``."""
    moment = datetime.fromtimestamp(created, tz=UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def json_handler(stream: TextIO | None = None) -> logging.Handler:
    """A StreamHandler writing :class:`JsonFormatter` lines to ``stream`` (stderr when None)."""
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    return handler
