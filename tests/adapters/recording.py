"""What the adapters' tests share: recording the neutral events an adapter gives the bot."""

from __future__ import annotations

from bot.neutral import Event, Send
from bot.runtime import Assistant


def recorded(bot: Assistant) -> list[Event]:
    """Every neutral event the adapter gives the bot's handler, recorded on the way in."""
    events: list[Event] = []
    handle = bot.handler.handle

    async def recording(event: Event, send: Send) -> None:
        events.append(event)
        await handle(event, send)

    bot.handler.handle = recording  # type: ignore[method-assign]
    return events
