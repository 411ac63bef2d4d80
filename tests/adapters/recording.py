"""What the adapters' tests share: recording the neutral events an adapter gives the bot, and
reading what the bot counted and logged while it handled them."""

from __future__ import annotations

import logging

from prometheus_client.parser import text_string_to_metric_families

from bot.neutral import Event, Send
from bot.runtime import Assistant


def recorded(bot: Assistant) -> list[Event]:
    """Every neutral event the adapter gives the bot's handler, recorded on the way in."""
    events: list[Event] = []
    handle = bot.handler.handle

    async def recording(event: Event, send: Send, shared_externally: bool = False) -> None:
        events.append(event)
        await handle(event, send, shared_externally)

    bot.handler.handle = recording  # type: ignore[method-assign]
    return events


def counted(bot: Assistant, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """The samples of the bot's metric ``name`` (e.g. ``raptor_questions_total``) by their labels,
    as Prometheus reads them from the bot's own ``/metrics`` text."""
    families = text_string_to_metric_families(bot.metrics.render().decode())
    return {tuple(sorted(s.labels.items())): s.value for f in families for s in f.samples if s.name == name}


def question_outcomes(bot: Assistant, platform: str) -> dict[str, float]:
    """How many of ``platform``'s questions ended in each outcome (``answered``, ``no_material``, ...)."""
    return {dict(labels)["outcome"]: n for labels, n in counted(bot, "raptor_questions_total").items()
            if dict(labels)["platform"] == platform}


def our_warnings(records: list[logging.LogRecord]) -> list[str]:
    """The WARNING-or-worse lines the bot and its adapters logged (their libraries' are left out)."""
    return [f"{r.name}: {r.getMessage()}" for r in records
            if r.levelno >= logging.WARNING and r.name.split(".")[0] in ("bot", "adapters")]
