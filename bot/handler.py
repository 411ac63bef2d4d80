"""The chat handler: turns every neutral event into engine calls and replies.

:meth:`ChatHandler.handle` is the entry point of what people ask and give. It dispatches a
:class:`Question`, :class:`Command`, :class:`Upload`, :class:`Pin`, :class:`Unpin`,
:class:`Vote`, :class:`Feedback` or :class:`Solved` to the part that handles its kind, and speaks only
through the ``send`` it is given:

- :mod:`bot.question_handling` answers questions (and ``ask``), streamed when it can;
- :mod:`bot.command_handling` runs the other chat commands;
- :mod:`bot.source_handling` adds and removes sources (files, pins, edits, unpins)
  within the limits;
- :mod:`bot.feedback_handling` stores votes and feedback on kept answers;
- :mod:`bot.forum_handling` makes solved forum posts sources.

:meth:`ChatHandler.follow` takes what happened on the platform that nobody is answered for
(a :class:`Deleted` message or file, a :class:`ChannelGone` or :class:`ChannelBack`), and
hands it to :mod:`bot.deletions`.

Each part's module states its own contracts. Those of the whole:

- Every blocking engine call runs in a worker thread (through ``bot.engine_calls``),
  so questions are answered while a rebuild runs.
- A channel shared with other organisations (the adapter says so: Slack Connect) is served
  only with ``slack.shared_channels: allow``. Otherwise nothing from it reaches the engine or
  the limits: a question or command gets the one line :data:`bot.replies.SHARED_CHANNEL`,
  anything else (files, pins, edits, votes) is dropped with a log line, so nothing said
  there is stored.
- While ``slack.distribution`` is ``distributed`` (an app offered to other workspaces, which
  Slack's API terms do not let keep an index of their messages), nothing from Slack becomes a
  source: a file shared or a message pinned gets the one line
  :data:`bot.replies.DISTRIBUTED_REFUSAL`, an edit of a message is dropped with a log line,
  and a channel admin's correction is kept out (the 👎 and its reason are stored, and the admin
  is told :data:`bot.replies.DISTRIBUTED_CORRECTION`).
  Questions are answered as always.
- It never fails silently. Errors written for people (``RaptorError``,
  ``BotError``) become an ERROR reply carrying their message, except failures of the
  bot's own servers (the model endpoint, Chroma, also when it did not answer within
  ``chroma.timeout_s``: :func:`bot.errors.names_servers`), whose message names the server:
  it is logged under a reference, and the reply says only what kind of server failed, with
  that reference. Anything else is logged with ``log.exception`` and a short reference id,
  and becomes an ERROR reply naming that reference, so an operator can find the full story.
  What ``follow`` takes has nobody to reply to: its failures are logged with a reference.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from bot import replies
from bot.command_handling import CommandHandling
from bot.config import Config
from bot.coordination.shared_limits import LimiterFactory, local_limiters
from bot.deletions import DeletionHandling
from bot.engine_calls import AsyncEngine
from bot.errors import BotError, log_failure, names_servers, new_reference
from bot.feedback_handling import FeedbackHandling
from bot.forum_handling import ForumHandling
from bot.model_budget import LocalSpending, ModelBudget
from bot.neutral import (
    ChannelBack,
    ChannelGone,
    Command,
    Deleted,
    Event,
    Feedback,
    Pin,
    PlatformChange,
    Question,
    Reply,
    ReplyKind,
    Send,
    Solved,
    Unpin,
    Upload,
    Vote,
)
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
        budget: ModelBudget | None = None,
    ) -> None:
        """``limiters`` makes the rate limiters and ``budget`` keeps the workspaces' daily model
        budget (default: counted in this process; with several replicas, counted in Redis).
        ``clock`` is for local limiters only (tests pass their own)."""
        self._engine = engine
        self._refuses_shared_channels = config.slack.shared_channels == "refuse"
        self._keeps_no_slack_material = config.slack.distribution == "distributed"
        self.metrics = metrics or Metrics()
        # The limits themselves are passed per call: a channel may have its own (bot.channels[...]).
        make = limiters or local_limiters(clock)
        budget = budget or ModelBudget(config.bot.model_budget, LocalSpending())
        self._questions = QuestionHandling(self._engine, config, make("questions", 60.0), budget, self.metrics,
                                           self._failure_reply, _send_error)
        self._commands = CommandHandling(self._engine, config, scheduler, make("rebuilds", HOUR_S), self._questions)
        self._sources = SourceHandling(self._engine, config, scheduler, make("uploads", HOUR_S),
                                       make("upload-bytes", DAY_S))
        self._feedback = FeedbackHandling(self._engine, config, scheduler)
        self._forums = ForumHandling(self._engine, config, self._sources)
        self._deletions = DeletionHandling(self._engine, config, scheduler)

    async def handle(self, event: Event, send: Send, shared_externally: bool = False) -> None:
        """Handles one event, replying through ``send``; never raises for a failure of the
        event itself (see the module docstring). ``shared_externally``: the event's channel
        is shared with other organisations. Cancellation passes through."""
        try:
            with channel_context(str(event.channel)):  # every log line of this event names its channel
                if shared_externally and self._refuses_shared_channels:
                    await self._refuse_shared(event, send)
                elif self._refuses_material(event):
                    await self._refuse_material(event, send)
                elif isinstance(event, Feedback) and self._refuses_correction(event):
                    await self._dispatch(replace(event, correction=""), send)
                    await send(Reply(ReplyKind.INFO, replies.DISTRIBUTED_CORRECTION, private=True))
                else:
                    await self._dispatch(event, send)
        except Exception as exc:
            await _send_error(send, self._failure_reply(event, exc))

    async def follow(self, change: PlatformChange) -> None:
        """Follows a change made on the platform (see :mod:`bot.deletions`). Never raises for
        a failure of its own: it is logged under a reference (there is nobody to tell).
        Cancellation passes through."""
        try:
            with channel_context(str(change.channel)):
                if isinstance(change, Deleted):
                    await self._deletions.deleted(change)
                elif isinstance(change, ChannelGone):
                    await self._deletions.gone(change)
                elif isinstance(change, ChannelBack):
                    await self._deletions.back(change)
                else:
                    raise TypeError(f"the chat handler does not follow changes of type {type(change).__name__}")
        except Exception:
            self.metrics.count_error("unexpected")
            log_failure(log, "following %s failed (reference %s)", type(change).__name__)

    async def _refuse_shared(self, event: Event, send: Send) -> None:
        """An event from a channel shared with other organisations, refused: questions and
        commands are told why in one line (privately for a command); the rest is dropped."""
        log.info("%s in a channel shared with other organisations: refused (slack.shared_channels)",
                 type(event).__name__)
        if isinstance(event, (Question, Command)):
            await send(Reply(ReplyKind.INFO, replies.SHARED_CHANNEL, private=isinstance(event, Command),
                             thread=event.thread))

    def _keeps_nothing_from(self, event: Event) -> bool:
        """Whether ``event`` comes from Slack while ``slack.distribution`` forbids keeping its material."""
        return self._keeps_no_slack_material and event.channel.platform == "slack"

    def _refuses_material(self, event: Event) -> bool:
        """Whether ``event`` would store Slack-sourced material that ``slack.distribution`` forbids."""
        return self._keeps_nothing_from(event) and isinstance(event, (Upload, Pin))

    def _refuses_correction(self, event: Feedback) -> bool:
        """Whether the feedback's correction would become a source of Slack-sourced text that
        ``slack.distribution`` forbids (its vote and reason are kept all the same)."""
        return self._keeps_nothing_from(event) and bool(event.correction.strip())

    async def _refuse_material(self, event: Event, send: Send) -> None:
        """A file or pin refused while the Slack app is distributed: the person who shared or
        pinned it is told why; an edit (nobody asked for anything) is only logged."""
        log.info("%s on Slack refused: slack.distribution is distributed", type(event).__name__)
        if isinstance(event, Pin) and event.edited:
            return
        await send(Reply(ReplyKind.INFO, replies.DISTRIBUTED_REFUSAL))

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
        elif isinstance(event, Solved):
            await self._forums.solved(event, send)
        else:
            raise TypeError(f"the chat handler does not know events of type {type(event).__name__}")


async def _send_error(send: Send, reply: Reply) -> None:
    """Sends an ERROR reply. If even the error cannot be sent (the platform is down), the log is
    all that is left."""
    try:
        await send(reply)
    except Exception:
        log.exception("could not send the error reply %r", reply.text)
