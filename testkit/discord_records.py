"""What the Discord stand-in records, and how a test reads a message: each REST request (a
:class:`Call`), each interaction dispatched and how the bot answered it (an
:class:`Interaction`), each failure armed by ``fail_next`` (a :class:`Failure`); the text and the
button ids of a message as a person sees them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from testkit.discord_payloads import MODAL_CALLBACK


@dataclass(frozen=True, slots=True)
class Call:
    """One REST request: ``body`` is the JSON (or ``payload_json``) sent, ``files`` the
    uploaded (filename, bytes), ``at`` the ``perf_counter`` time it arrived."""

    method: str
    path: str
    params: dict[str, str]
    body: Any
    files: tuple[tuple[str, bytes], ...]
    at: float
    status: int = 0


@dataclass(slots=True)
class Interaction:
    """An interaction the test dispatched, and how the bot answered it.

    ``messages`` are the visible messages the bot made for it, in order
    (the deferred one once it has content, then follow-ups), each carrying
    ``flags`` (64 = ephemeral)."""

    id: str
    token: str
    kind: int
    channel_id: str
    dispatched_at: float
    callback_type: int | None = None
    callback_at: float | None = None
    callback_data: dict[str, Any] | None = None
    original: dict[str, Any] | None = None
    loading: bool = False
    original_deleted: bool = False
    deferred_ephemeral: bool = False
    messages: list[dict[str, Any]] = field(default_factory=list)

    def texts(self) -> list[str]:
        return [message_text(m) for m in self.messages]

    @property
    def modal(self) -> dict[str, Any] | None:
        """The modal the interaction was answered with (custom_id, title, components), if it was."""
        return self.callback_data if self.callback_type == MODAL_CALLBACK else None


@dataclass(slots=True)
class Failure:
    method: str
    path: re.Pattern[str]
    status: int
    body: dict[str, Any]
    times: int


def message_text(message: Mapping[str, Any]) -> str:
    """Everything a person reads in a message: content, then every embed's title,
    description, field names and values, footer."""
    parts = [message.get("content") or ""]
    for embed in message.get("embeds") or []:
        parts += [embed.get("title") or "", embed.get("description") or ""]
        for item in embed.get("fields") or []:
            parts += [item.get("name") or "", item.get("value") or ""]
        parts.append((embed.get("footer") or {}).get("text") or "")
    return "\n".join(p for p in parts if p)


def custom_ids(message: Mapping[str, Any]) -> list[str]:
    """The custom ids of every button of a message, row by row."""
    return [
        component.get("custom_id", "")
        for row in message.get("components") or []
        for component in row.get("components") or []
    ]
