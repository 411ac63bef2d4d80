"""The one shape of every adapter: it receives a started bot and serves it until stopped.

The composition root (:mod:`bot.composition`) opens and starts the bot, hands it to
each adapter's :meth:`Adapter.serve`, and stops the bot when the first adapter ends
or the process is signalled; then it cancels the others. An adapter never opens,
starts or stops the bot itself.

What an adapter may import: ``bot``'s public surface only (:mod:`bot.neutral` for the
neutral types, :mod:`bot.runtime` for the facade, :mod:`bot.replies` for the texts,
:mod:`bot.config` for its own settings, :mod:`bot.errors`), never ``raptor_engine``
and never another platform's adapter. ``tests/test_architecture.py`` enforces it.

Names: each platform's :class:`Adapter` is called ``<Platform>Adapter``
(:class:`~adapters.slack.app.SlackAdapter`, :class:`~adapters.discord_bot.client.DiscordAdapter`,
:class:`~adapters.console.app.ConsoleAdapter`), the one class the registry
(:mod:`adapters.registry`; for the console, the composition root) builds. What it runs
on the platform's side has a name saying what it is: :class:`~adapters.slack.handling.SlackHandling`
(Slack's payloads, once bolt acknowledged them), :class:`~adapters.discord_bot.client.DiscordClient`
(the discord.py client) and :class:`~adapters.console.app.ConsoleChannel` (the terminal as a channel).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from bot.runtime import Assistant


class Adapter(Protocol):
    """A chat platform (or the terminal) serving one started bot."""

    @property
    def name(self) -> str:
        """The platform's name for people and logs: ``Slack``, ``Discord``, ``the console``."""
        ...

    @property
    def ends_on_its_own(self) -> bool:
        """Whether the person can end the session from the platform (the console's
        ``/quit``). Where not, only a signal ends it, and an adapter that returns anyway
        has lost its platform."""
        ...

    async def serve(self, bot: Assistant) -> None:
        """Feeds the platform's events to ``bot.handler`` and delivers the replies, until
        cancelled (the root then stops the bot before cancelling the adapter, so replies
        about interrupted work can still go out). Returns only when the platform's own
        session ends (the console's ``/quit``); raises when it cannot serve (a token the
        platform refuses), which stops the bot."""
        ...
