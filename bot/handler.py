"""The chat handler: turns every neutral event into engine calls and replies.

:meth:`ChatHandler.handle` is the one entry point. It dispatches a
:class:`Question`, :class:`Command`, :class:`Upload`, :class:`Pin`, :class:`Unpin`,
:class:`Vote` or :class:`Feedback` to the part that handles its kind, and speaks only
through the ``send`` it is given:

- :mod:`bot.question_handling` answers questions (and ``ask``), streamed when it can;
- :mod:`bot.command_handling` runs the other chat commands;
- :mod:`bot.source_handling` adds and removes sources (files, pins, edits, unpins)
  within the limits;
- :mod:`bot.feedback_handling` stores votes and feedback on kept answers.

Each part's module states its own contracts. Those of the whole:

- Every blocking engine call runs in a worker thread (through ``bot.engine_calls``),
  so questions are answered while a rebuild runs.
- It never fails silently. Errors written for people (``RaptorError``,
  ``BotError``) become an ERROR reply carrying their message, except failures of the
  bot's own servers (the model endpoint, Chroma: :func:`bot.errors.names_servers`),
  whose message names the server: it is logged under a reference, and the reply says
  only what kind of server failed, with that reference. Anything else is
  logged with ``log.exception`` and a short reference id, and becomes an ERROR
  reply naming that reference, so an operator can find the full story.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from bot import replies
from bot.command_handling import CommandHandling
from bot.config import Config
from bot.coordination.shared_limits import LimiterFactory, local_limiters
from bot.engine_calls import AsyncEngine
from bot.errors import BotError, log_failure, names_servers, new_reference
from bot.feedback_handling import FeedbackHandling
from bot.neutral import Command, Event, Feedback, Pin, Question, Reply, ReplyKind, Send, Unpin, Upload, Vote
from bot.observability.log_format import channel_context
from bot.observability.metrics import Metrics
from bot.question_handling import QuestionHandling
from bot.source_handling import SourceHandling
from raptor_engine import RaptorError

if TYPE_CHECKING:
    from bot.rebuilds.service import RebuildService

log = logging.getLogger(__name__)

HOUR_S = 3600.0
DAY_S = 24 * HOUR_S


class ChatHandler:
    """Answers questions and runs commands for every channel; see the module docstring."""

    def __init__(
        self,
        engine: AsyncEngine,
        config: Config,
        scheduler: RebuildService,
        clock: Callable[[], float] = time.monotonic,
        limiters: LimiterFactory | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        """``limiters`` makes the rate limiters (default: counted in this process; with several
        replicas, counted in Redis). ``clock`` is for local limiters only (tests pass their own)."""
        self._engine = engine
        self.metrics = metrics or Metrics()
        # The limits themselves are passed per call: a channel may have its own (bot.channels[...]).
        make = limiters or local_limiters(clock)
        self._questions = QuestionHandling(self._engine, config, make("questions", 60.0), self.metrics,
                                           self._failure_reply, _send_error)
        self._commands = CommandHandling(self._engine, config, scheduler, make("rebuilds", HOUR_S), self._questions)
        self._sources = SourceHandling(self._engine, config, scheduler, make("uploads", HOUR_S),
                                       make("upload-bytes", DAY_S))
        self._feedback = FeedbackHandling(self._engine, config, scheduler)

    async def handle(self, event: Event, send: Send) -> None:
        """Handles one event, replying through ``send``; never raises for a failure of the
        event itself (see the module docstring). Cancellation passes through."""
        try:
            with channel_context(str(event.channel)):  # every log line of this event names its channel
                await self._dispatch(event, send)
        except Exception as exc:
            await _send_error(send, self._failure_reply(event, exc))

    def _failure_reply(self, event: Event, exc: Exception) -> Reply:
        """The ERROR reply for ``exc``, which ended the handling of ``event``; logged and counted.
        Errors written for people carry their message; anything else a logged reference."""
        thread = getattr(event, "thread", "")
        if names_servers(exc):
            self.metrics.count_error(type(exc).__name__)
            reference = new_reference()
            log.warning("%s failed: %s (reference %s)", type(event).__name__, exc, reference,
                        extra={"reference": reference})
            return Reply(ReplyKind.ERROR, replies.error_text(exc, reference), reference=reference, thread=thread)
        if isinstance(exc, (RaptorError, BotError)):
            log.info("%s refused: %s", type(event).__name__, exc)
            self.metrics.count_error(type(exc).__name__)
            return Reply(ReplyKind.ERROR, replies.error_text(exc), thread=thread)
        self.metrics.count_error("unexpected")
        reference = log_failure(log, "handling %s failed (reference %s)", type(event).__name__)
        return Reply(ReplyKind.ERROR, replies.unexpected_text(reference), reference=reference, thread=thread)

    async def _dispatch(self, event: Event, send: Send) -> None:
        if isinstance(event, Question):
            await self._questions.ask(event, event.text, send)
        elif isinstance(event, Command):
            await self._commands.run(event, send)
        elif isinstance(event, Upload):
            await self._sources.upload(event, send)
        elif isinstance(event, Pin):
            await self._sources.pin(event, send)
        elif isinstance(event, Unpin):
            await self._sources.unpin(event, send)
        elif isinstance(event, Vote):
            await self._feedback.vote(event, send)
        elif isinstance(event, Feedback):
            await self._feedback.feedback(event, send)
        else:
            raise TypeError(f"the chat handler does not know events of type {type(event).__name__}")


async def _send_error(send: Send, reply: Reply) -> None:
    """Sends an ERROR reply. If even the error cannot be sent (the platform is down), the log is
    all that is left."""
    try:
        await send(reply)
    except Exception:
        log.exception("could not send the error reply %r", reply.text)
