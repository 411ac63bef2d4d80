"""The chat handler: turns every neutral event into engine calls and replies.

:meth:`ChatHandler.handle` is the one entry point. It dispatches a
:class:`Question`, :class:`Command`, :class:`Upload`, :class:`Pin`,
:class:`Unpin` or :class:`Vote` and speaks only through the ``send`` it is given.
Answers are kept in the store with their question, so a later vote on one
is stored beside both.

Contracts:

- Every blocking engine call runs in a worker thread (``asyncio.to_thread``),
  so questions are answered while a rebuild runs.
- It never fails silently. Errors written for people (``RaptorError``,
  ``BotError``) become an ERROR reply carrying their message. Anything else is
  logged with ``log.exception`` and a short reference id, and becomes an ERROR
  reply naming that reference, so an operator can find the full story.
- ``rebuild`` and ``forget`` are for the channel's admins only (see
  :func:`bot.commands.may_manage`); questions are limited per person and
  minute, rebuild requests per channel and hour, each refusal saying when to
  try again.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from bot import commands, replies
from bot.chat import Attachment, Command, Event, Pin, Question, Reply, ReplyKind, Send, Unpin, Upload, Vote
from bot.config import Config
from bot.errors import BotError
from bot.ingestion import ingest_pin, ingest_upload, pinned_sources
from bot.rate_limits import RateLimiter
from bot.scheduler import RequestResult
from bot.tree_picture import render_outline_text, render_png, tree_outline
from raptor_engine.errors import RaptorError
from raptor_engine.types import Answer, ChannelKey

if TYPE_CHECKING:
    from bot.scheduler import RebuildScheduler
    from raptor_engine.engine import Engine

log = logging.getLogger(__name__)

CONTEXT_MESSAGES = 2  # earlier thread messages prepended to a follow-up question for retrieval
CONTEXT_CHARS = 500  # each cut to this many characters, so a long paste cannot drown the question
TREE_PICTURE_NAME = "raptor-tree.png"


def retrieval_query(question: Question) -> str:
    """The text retrieval and answering work from: the question itself, preceded by the
    last :data:`CONTEXT_MESSAGES` messages of its thread (each cut to
    :data:`CONTEXT_CHARS`), so that a follow-up such as "and who approves it?"
    carries what "it" is. Without context, the question unchanged."""
    earlier = [message.strip()[:CONTEXT_CHARS] for message in question.context[-CONTEXT_MESSAGES:]]
    return "\n".join([*(m for m in earlier if m), question.text.strip()])


def new_reference() -> str:
    """A short id (8 hex characters) tying an error reply to its log line."""
    return uuid.uuid4().hex[:8]


class ChatHandler:
    """Answers questions and runs commands for every channel; see the module docstring."""

    def __init__(
        self,
        engine: Engine,
        config: Config,
        scheduler: RebuildScheduler,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._engine = engine
        self._config = config
        self._scheduler = scheduler
        limits = config.bot.rate_limits
        self._questions = RateLimiter(limits.questions_per_user_per_minute, 60.0, clock=clock)
        self._rebuilds = RateLimiter(limits.rebuilds_per_channel_per_hour, 3600.0, clock=clock)

    async def handle(self, event: Event, send: Send) -> None:
        """Handles one event, replying through ``send``; never raises for a failure of the
        event itself (see the module docstring). Cancellation passes through."""
        thread = getattr(event, "thread", "")
        try:
            await self._dispatch(event, send)
        except (RaptorError, BotError) as exc:
            log.info("%s refused: %s", type(event).__name__, exc)
            await self._send_error(send, Reply(ReplyKind.ERROR, replies.error_text(exc), thread=thread))
        except Exception:
            reference = new_reference()
            log.exception("handling %s failed (reference %s)", type(event).__name__, reference)
            reply = Reply(ReplyKind.ERROR, replies.unexpected_text(reference), reference=reference, thread=thread)
            await self._send_error(send, reply)

    async def _send_error(self, send: Send, reply: Reply) -> None:
        # If even the error cannot be sent (the platform is down), the log is all that is left.
        try:
            await send(reply)
        except Exception:
            log.exception("could not send the error reply %r", reply.text)

    async def _dispatch(self, event: Event, send: Send) -> None:
        if isinstance(event, Question):
            await self._question(event, event.text, send)
        elif isinstance(event, Command):
            await self._command(event, send)
        elif isinstance(event, Upload):
            await self._upload(event, send)
        elif isinstance(event, Pin):
            await self._pin(event, send)
        elif isinstance(event, Unpin):
            await self._unpin(event, send)
        elif isinstance(event, Vote):
            await self._vote(event, send)
        else:
            raise TypeError(f"the chat handler does not know events of type {type(event).__name__}")

    # -- questions ----------------------------------------------------------------

    async def _question(self, event: Question | Command, text: str, send: Send) -> None:
        """Answers ``text`` (a question, or the argument of ``ask``) with citations, in its thread."""
        if not text.strip():
            await send(Reply(ReplyKind.INFO, replies.EMPTY_QUESTION, thread=event.thread))
            return
        key = event.channel
        wait = self._questions.try_acquire((key, event.person.id))
        if wait > 0:
            limit = self._config.bot.rate_limits.questions_per_user_per_minute
            await send(Reply(ReplyKind.INFO, replies.question_limit_text(limit, wait), private=True, thread=event.thread))
            return
        context = event.context if isinstance(event, Question) else ()
        query = retrieval_query(Question(key, event.person, text, event.thread, context))
        answer = await self._engine.answer(key, query)
        if not answer.found and not await asyncio.to_thread(self._engine.sources, key):
            await send(Reply(ReplyKind.INFO, replies.NO_MATERIAL, thread=event.thread))
            return
        answer_id = await self._keep(key, text, answer, event.person.label)
        log.info("channel %s: answer %s with %d citation(s)", key, answer_id or "-", len(answer.citations))
        await send(replies.answer_reply(answer, thread=event.thread, answer_id=answer_id))

    async def _keep(self, key: ChannelKey, question: str, answer: Answer, asked_by: str) -> str:
        """Keeps the answer for votes; its id, or "" when it could not be kept (the answer
        still goes out, without vote buttons: a store hiccup must not swallow an answer)."""
        answer_id = uuid.uuid4().hex[:12]
        try:
            await asyncio.to_thread(self._engine.keep_answer, key, answer_id, question, answer, asked_by)
        except RaptorError as exc:
            log.warning("channel %s: could not keep answer %s for votes: %s", key, answer_id, exc)
            return ""
        return answer_id

    async def _vote(self, vote: Vote, send: Send) -> None:
        record = await asyncio.to_thread(self._engine.vote, vote.channel, vote.answer_id, vote.person.id, vote.up)
        log.info("channel %s: %s voted %s on answer %s", vote.channel, vote.person.id, "up" if vote.up else "down",
                 vote.answer_id)
        await send(Reply(ReplyKind.INFO, replies.vote_text(vote.up, record.ups, record.downs), private=True))

    # -- commands -----------------------------------------------------------------

    async def _command(self, command: Command, send: Send) -> None:
        name = command.name.strip().lstrip("/").lower()  # adapters parse with bot.commands; be lenient anyway
        spec = commands.COMMANDS.get(name)
        if spec is None:
            await self._info(send, command, replies.help_text(unknown=name))
            return
        if spec.admin_only and not commands.may_manage(command.person, command.channel, self._config.bot):
            await send(Reply(ReplyKind.ERROR, replies.refusal_text(name), private=True, thread=command.thread))
            return
        if name == commands.ASK:
            await self._question(command, command.argument, send)
        elif name == commands.REBUILD:
            await self._rebuild(command, send)
        elif name == commands.STATUS:
            await self._status(command, send)
        elif name == commands.SOURCES:
            sources = await asyncio.to_thread(self._engine.sources, command.channel)
            await self._info(send, command, replies.sources_text(sources))
        elif name == commands.FORGET:
            await self._forget(command, send)
        elif name == commands.NODE:
            await self._node(command, send)
        elif name == commands.TREE:
            await self._tree(command, send)
        else:
            await self._info(send, command, replies.help_text())

    async def _rebuild(self, command: Command, send: Send) -> None:
        key = command.channel
        if not await asyncio.to_thread(self._engine.sources, key):
            # Said now rather than by the scheduler later, and without using up a rebuild of the hour.
            await send(Reply(ReplyKind.ERROR, replies.NO_MATERIAL, thread=command.thread))
            return
        wait = self._rebuilds.try_acquire(key)
        if wait > 0:
            limit = self._config.bot.rate_limits.rebuilds_per_channel_per_hour
            await send(Reply(ReplyKind.INFO, replies.rebuild_limit_text(limit, wait), thread=command.thread))
            return
        result = await self._scheduler.request(key, command.person.label, send)
        # A queued request is announced by the scheduler itself (it says so through ``send``).
        if result is RequestResult.STARTED:
            await self._info(send, command, replies.REBUILD_STARTED)

    async def _status(self, command: Command, send: Send) -> None:
        stats = await asyncio.to_thread(self._engine.stats, command.channel)
        schedule = self._scheduler.status(command.channel)
        await self._info(send, command, replies.status_text(stats, schedule))

    async def _forget(self, command: Command, send: Send) -> None:
        if not command.argument:
            await self._info(send, command, replies.usage_text(commands.FORGET))
            return
        source = await asyncio.to_thread(self._engine.forget, command.channel, command.argument)
        self._scheduler.watch(command.channel)  # the summaries still count it until the next rebuild
        await self._info(send, command, replies.forgot_text(source))

    async def _node(self, command: Command, send: Send) -> None:
        if not command.argument:
            await self._info(send, command, replies.usage_text(commands.NODE))
            return
        view = await asyncio.to_thread(self._engine.node, command.channel, command.argument.split()[0])
        await self._info(send, command, replies.node_text(view))

    async def _tree(self, command: Command, send: Send) -> None:
        key = command.channel
        outline = await asyncio.to_thread(tree_outline, self._engine, key, _channel_title(key))
        picture = await asyncio.to_thread(render_png, outline)
        reply = Reply(
            ReplyKind.INFO,
            render_outline_text(outline),
            attachments=(Attachment(TREE_PICTURE_NAME, picture),),
            thread=command.thread,
        )
        await send(reply)

    async def _info(self, send: Send, command: Command, text: str) -> None:
        await send(Reply(ReplyKind.INFO, text, thread=command.thread))

    # -- sources ----------------------------------------------------------------

    async def _upload(self, upload: Upload, send: Send) -> None:
        result = await asyncio.to_thread(ingest_upload, self._engine, upload)
        self._scheduler.watch(upload.channel)
        await send(Reply(ReplyKind.INFO, replies.added_text(result)))

    async def _pin(self, pin: Pin, send: Send) -> None:
        result = await asyncio.to_thread(ingest_pin, self._engine, pin)
        self._scheduler.watch(pin.channel)
        await send(Reply(ReplyKind.INFO, replies.added_text(result)))

    async def _unpin(self, unpin: Unpin, send: Send) -> None:
        key = unpin.channel
        removes = self._config.bot.unpin_removes_source
        sources = await asyncio.to_thread(pinned_sources, self._engine, key, unpin.external_id)
        if removes:
            for source in sources:
                await asyncio.to_thread(self._engine.forget, key, source.id)
            if sources:
                self._scheduler.watch(key)
        await send(Reply(ReplyKind.INFO, replies.unpinned_text(sources, removes)))


def _channel_title(key: ChannelKey) -> str:
    """The caption of a channel's tree picture."""
    return f"#{key.channel} ({key.platform})"
