"""What people say about an answer: a 👍 or 👎 (:class:`~bot.neutral.Vote`), and the
feedback form a 👎 opens (:class:`~bot.neutral.Feedback`).

Contracts (a part of :class:`bot.handler.ChatHandler`): votes and reasons are stored with
the kept answer, one per person; the replies are private. A right answer given with the
feedback becomes a source of the channel at once, cited like any other, when a channel
admin gives it (:func:`bot.commands.may_manage`); anyone else is thanked, and told so.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from bot import commands, replies
from bot.config import Config
from bot.engine_calls import AsyncEngine
from bot.ingestion import ingest_correction
from bot.neutral import Feedback, Reply, ReplyKind, Send, Vote

if TYPE_CHECKING:
    from bot.rebuilds.service import RebuildService

log = logging.getLogger(__name__)


class FeedbackHandling:
    """Votes and feedback on kept answers; see the module docstring."""

    def __init__(self, engine: AsyncEngine, config: Config, scheduler: RebuildService) -> None:
        self._engine = engine
        self._config = config
        self._scheduler = scheduler

    async def vote(self, vote: Vote, send: Send) -> None:
        """Stores a 👍 or 👎 on a kept answer; the person is told the counts, privately."""
        record = await self._engine.vote(vote.channel, vote.answer_id, vote.person.id, vote.up)
        log.info("channel %s: %s voted %s on answer %s", vote.channel, vote.person.id, "up" if vote.up else "down",
                 vote.answer_id)
        text = replies.vote_text(vote.up, record.ups, record.downs) + replies.changed_note(record)
        await send(Reply(ReplyKind.INFO, text, private=True))

    async def feedback(self, feedback: Feedback, send: Send) -> None:
        """Stores the reason with the answer (and the person's 👎); a correction from a channel
        admin becomes a source at once, cited like any other (see :func:`bot.ingestion.ingest_correction`)."""
        key = feedback.channel
        record = await self._engine.run(
            lambda engine: engine.add_feedback(key, feedback.answer_id, feedback.person.id, feedback.reason))
        log.info("channel %s: %s gave feedback on answer %s", key, feedback.person.id, feedback.answer_id)
        correction = feedback.correction.strip()
        changed = replies.changed_note(record)
        if not correction:
            await send(Reply(ReplyKind.INFO, replies.feedback_text() + changed, private=True))
            return
        if not commands.may_manage(feedback.person, key, self._config.bot):
            await send(Reply(ReplyKind.INFO, replies.feedback_text(correction_kept=False) + changed, private=True))
            return
        result = await self._engine.run(lambda engine: ingest_correction(engine, key, record, correction, feedback.person))
        self._scheduler.watch(key)
        text = replies.feedback_text(correction_kept=True, added=result) + changed
        await send(Reply(ReplyKind.INFO, text, private=True))
