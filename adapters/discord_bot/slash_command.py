"""The ``/raptor`` slash command as Discord sees it: one group named by ``discord.command``,
with one subcommand per chat command of :mod:`bot.commands`.

Contract: the group only declares (names, descriptions, parameters); every subcommand
hands over to :meth:`~adapters.discord_bot.interactions.InteractionHandling.run_command`,
and ``forget``'s autocomplete to
:meth:`~adapters.discord_bot.interactions.InteractionHandling.source_choices`.
"""

from __future__ import annotations

import re

import discord
from discord import app_commands

from adapters.discord_bot.interactions import InteractionHandling
from bot import commands
from bot.errors import ConfigError

GROUP_DESCRIPTION = "Ask this channel's documents, and manage its RAPTOR tree"


def command_name(configured: str) -> str:
    """``discord.command`` as a slash command name (lower case, no leading slash)."""
    name = configured.strip().lstrip("/").lower()
    if not re.fullmatch(r"[-_\w]{1,32}", name):
        raise ConfigError(f"discord.command: {configured!r} is not a valid slash command name")
    return name


def _help(name: str) -> str:
    """A chat command's help as a subcommand description (Discord takes 100 characters at most)."""
    return commands.COMMANDS[name].help[:100]


def command_group(client: InteractionHandling, name: str) -> app_commands.Group:
    """``/<name>`` with one subcommand per chat command; each hands over to :meth:`~adapters.discord_bot.interactions.InteractionHandling.run_command`."""
    group = app_commands.Group(name=name, description=GROUP_DESCRIPTION)

    @group.command(name=commands.ASK, description=_help(commands.ASK))
    @app_commands.describe(question="What you want to know")
    async def ask(interaction: discord.Interaction, question: str) -> None:
        await client.run_command(interaction, commands.ASK, question)

    @group.command(name=commands.REBUILD, description=_help(commands.REBUILD))
    @app_commands.describe(force="Rebuild even if nothing changed; serve it even if the approved-question check would hold it back")
    async def rebuild(interaction: discord.Interaction, force: bool = False) -> None:
        await client.run_command(interaction, commands.REBUILD, "force" if force else "")

    @group.command(name=commands.STATUS, description=_help(commands.STATUS))
    async def status(interaction: discord.Interaction) -> None:
        await client.run_command(interaction, commands.STATUS)

    @group.command(name=commands.SOURCES, description=_help(commands.SOURCES))
    async def sources(interaction: discord.Interaction) -> None:
        await client.run_command(interaction, commands.SOURCES)

    @group.command(name=commands.FORGET, description=_help(commands.FORGET))
    @app_commands.describe(source="The source's id (or its first characters), as /sources lists it")
    async def forget(interaction: discord.Interaction, source: str) -> None:
        await client.run_command(interaction, commands.FORGET, source)

    @forget.autocomplete("source")
    async def forget_choices(interaction: discord.Interaction, current: str) -> list[app_commands.Choice[str]]:
        return await client.source_choices(interaction, current)

    @group.command(name=commands.NODE, description=_help(commands.NODE))
    @app_commands.describe(node_id="The node id shown under a cited source")
    async def node(interaction: discord.Interaction, node_id: str) -> None:
        await client.run_command(interaction, commands.NODE, node_id)

    @group.command(name=commands.TREE, description=_help(commands.TREE))
    async def tree(interaction: discord.Interaction) -> None:
        await client.run_command(interaction, commands.TREE)

    @group.command(name=commands.FEEDBACK, description=_help(commands.FEEDBACK))
    async def feedback(interaction: discord.Interaction) -> None:
        await client.run_command(interaction, commands.FEEDBACK)

    @group.command(name=commands.CHECK, description=_help(commands.CHECK))
    async def check(interaction: discord.Interaction) -> None:
        await client.run_command(interaction, commands.CHECK)

    @group.command(name=commands.HELP, description=_help(commands.HELP))
    async def help_(interaction: discord.Interaction) -> None:
        await client.run_command(interaction, commands.HELP)

    return group
