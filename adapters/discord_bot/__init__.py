"""The Discord adapter (discord.py): slash commands, mentions, threads, pins and buttons.

``translate`` holds the pure translation of Discord's objects into neutral
events, ``render`` the pure rendering of replies as messages within Discord's
limits (``layout``, an answer as one Components v2 message), ``sending`` posts them
(``posting`` turns them into discord.py's arguments, falling back from Components v2),
``connection`` keeps discord.py connected, and
``client`` holds the discord.py client, :func:`run_discord` and :class:`DiscordAdapter`,
the adapter ``python -m bot serve`` runs when ``discord.token`` is set. The client is
assembled from ``lifecycle`` (start-up, shutdown, failure reports), ``messages``
(questions, follow-ups, uploads; ``uploads`` hands attachments over), ``pins``,
``interactions`` (slash commands and buttons; ``slash_command`` declares the group),
``message_commands`` (the context menus on messages) and ``forums`` (forum channels as help
desks; ``forum_posts`` translates them).

(Never name a module here ``discord``: it would shadow the SDK.)
"""

from adapters.discord_bot.client import DiscordAdapter, DiscordClient, run_discord

__all__ = ["DiscordAdapter", "DiscordClient", "run_discord"]
