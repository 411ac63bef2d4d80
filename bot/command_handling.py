"""The chat commands (:data:`bot.commands.COMMANDS`): ask, rebuild, status, sources,
forget, node, tree, feedback and help.

Contracts (a part of :class:`bot.handler.ChatHandler`): an unknown command is answered
with the command list, privately (a mistyped command is the person's own business, not
the channel's); the ``feedback`` report is private too (it quotes reasons people gave in
a private form); ``rebuild`` and ``forget`` are for the channel's admins only (see
:func:`bot.commands.may_manage`), and anyone else is told so privately. Rebuild requests
are limited per channel and hour (``bot.rate_limits``, a channel's own in their place),
a refusal saying when to try again; a channel with no source is told so at once, without
using up a rebuild. ``ask`` is a question (:class:`~bot.question_handling.QuestionHandling`).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from bot import commands, replies
from bot.config import Config
from bot.coordination.shared_limits import Limiter
from bot.engine_calls import AsyncEngine
from bot.neutral import Attachment, Command, Reply, ReplyAddress, ReplyKind, Send
from bot.question_handling import QuestionHandling
from bot.rebuilds.service import RequestResult
from bot.tree_outline import tree_outline
from bot.tree_picture import render_png
from raptor_engine import ChannelKey

if TYPE_CHECKING:
    from bot.rebuilds.service import RebuildService

TREE_PICTURE_NAME = "raptor-tree.png"


FORCE_WORDS = ("force", "--force")  # `rebuild force`: serve the tree even if the check would hold it back


class CommandHandling:
    """Runs the chat commands; see the module docstring. ``limiter`` counts the rebuild
    requests per channel and hour; ``questions`` answers ``ask``."""

    def __init__(self, engine: AsyncEngine, config: Config, scheduler: RebuildService, limiter: Limiter,
                 questions: QuestionHandling) -> None:
        self._engine = engine
        self._config = config
        self._scheduler = scheduler
        self._limiter = limiter
        self._questions = questions

    async def run(self, command: Command, send: Send) -> None:
        """Runs ``command`` (help for an unknown one), if the person may."""
        name = command.name.strip().lstrip("/").lower()  # adapters parse with bot.commands; be lenient anyway
        spec = commands.COMMANDS.get(name)
        if spec is None:
            await send(Reply(ReplyKind.INFO, replies.help_text(unknown=name), private=True, thread=command.thread))
            return
        if spec.admin_only and not commands.may_manage(command.person, command.channel, self._config.bot):
            await send(Reply(ReplyKind.ERROR, replies.refusal_text(name), private=True, thread=command.thread))
            return
        if name == commands.ASK:
            await self._questions.ask(command, command.argument, send)
        elif name == commands.REBUILD:
            await self._rebuild(command, send)
        elif name == commands.STATUS:
            await self._status(command, send)
        elif name == commands.SOURCES:
            sources = await self._engine.sources(command.channel)
            await self._info(send, command, replies.sources_text(sources))
        elif name == commands.FORGET:
            await self._forget(command, send)
        elif name == commands.NODE:
            await self._node(command, send)
        elif name == commands.TREE:
            await self._tree(command, send)
        elif name == commands.CHECK:
            check = await self._engine.run(lambda engine: engine.check_questions(command.channel))
            await self._info(send, command, replies.check_text(check))
        elif name == commands.FEEDBACK:
            answers = await self._engine.run(lambda engine: engine.answers(command.channel))
            # People gave their reasons in a private form: the report of them stays private too.
            await send(Reply(ReplyKind.INFO, replies.feedback_report_text(answers), private=True,
                             thread=command.thread))
        else:
            await self._info(send, command, replies.help_text())

    async def _rebuild(self, command: Command, send: Send) -> None:
        key = command.channel
        if not await self._engine.sources(key):
            # Said now rather than by the scheduler later, and without using up a rebuild of the hour.
            await send(Reply(ReplyKind.ERROR, replies.NO_MATERIAL, thread=command.thread))
            return
        force = command.argument.strip().lower() in FORCE_WORDS
        version = 0 if force else await self._engine.unchanged_since(key)
        if version:  # said at once, writing nothing, and without using up a rebuild of the hour
            await self._info(send, command, replies.unchanged_text(version))
            return
        limit = self._config.bot.rate_limits_for(str(key)).rebuilds_per_channel_per_hour
        wait = await self._limiter.try_acquire(key, limit=limit)
        if wait > 0:
            await send(Reply(ReplyKind.INFO, replies.rebuild_limit_text(limit, wait), thread=command.thread))
            return
        address = ReplyAddress(key, command.thread)
        result = await self._scheduler.request(key, command.person.label, send, address, force)
        # A queued request is announced by the scheduler itself (it says so through ``send``).
        if result is RequestResult.STARTED:
            await self._info(send, command, replies.REBUILD_STARTED)

    async def _status(self, command: Command, send: Send) -> None:
        stats = await self._engine.stats(command.channel)
        schedule = await self._scheduler.status(command.channel)
        await self._info(send, command, replies.status_text(stats, schedule))

    async def _forget(self, command: Command, send: Send) -> None:
        if not command.argument:
            await self._info(send, command, replies.usage_text(commands.FORGET))
            return
        source = await self._engine.forget(command.channel, command.argument)
        self._scheduler.watch(command.channel)  # the summaries still count it until the next rebuild
        await self._info(send, command, replies.forgot_text(source))

    async def _node(self, command: Command, send: Send) -> None:
        if not command.argument:
            await self._info(send, command, replies.usage_text(commands.NODE))
            return
        view = await self._engine.node(command.channel, command.argument.split()[0])
        await self._info(send, command, replies.node_text(view))

    async def _tree(self, command: Command, send: Send) -> None:
        key = command.channel
        outline = await self._engine.run(lambda engine: tree_outline(engine, key, _channel_title(key)))
        picture = await asyncio.to_thread(render_png, outline)
        reply = Reply(
            ReplyKind.INFO,
            replies.outline_text(outline),
            attachments=(Attachment(TREE_PICTURE_NAME, picture),),
            thread=command.thread,
        )
        await send(reply)

    async def _info(self, send: Send, command: Command, text: str) -> None:
        await send(Reply(ReplyKind.INFO, text, thread=command.thread))


def _channel_title(key: ChannelKey) -> str:
    """The caption of a channel's tree picture."""
    return f"#{key.channel} ({key.platform})"
