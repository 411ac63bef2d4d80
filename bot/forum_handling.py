"""Forum posts, a help desk where each post is one question: what a post asks, who may mark it
solved, and what a solved post becomes.

Contracts (the rules; the adapters say which forums they serve and hand over each event once):

- A new post in a forum the bot serves asks its title and its opening message
  (:func:`bot.commands.post_question`, public: adapters compose the question), and is answered once, in the post. Every later message in the post
  is a question too (no mention needed), with the post's earlier messages as context.
- Only the post's author or an admin of the forum (:func:`bot.commands.may_manage`) may mark a
  post solved (:func:`bot.commands.may_mark_solved`); anyone else is told so privately and nothing is stored.
- A solved post becomes ONE source of the forum's tree, of kind ``THREAD``: the question, then
  the accepted answer (:func:`solved_document`), titled "Solved: <title>", linked to the post,
  kept under the event's external id. Marked again (the button pressed under another answer,
  or the Solved tag after the button), the source takes the new text in place of the old one;
  the same text again changes nothing. It is stored within the limits of a pin, counted against
  the person who marked it (:meth:`bot.source_handling.SourceHandling.solved`).
- The accepted answer is the kept answer the event names (the bot's answer, confirmed by a
  person: the one case where an answer of the bot's becomes material), else the answer text the
  event carries. A kept answer that is gone (forgotten, or past the channel's kept answers) and
  no text is said privately; nothing is stored.

:class:`ForumHandling` is the part of :class:`bot.handler.ChatHandler` for
:class:`~bot.neutral.Solved`.
"""

from __future__ import annotations

import logging

from bot.commands import may_mark_solved, post_question
from bot.config import Config
from bot.engine_calls import AsyncEngine
from bot.ingestion import added_by
from bot.neutral import Reply, ReplyKind, Send, Solved
from bot.source_handling import SourceHandling
from raptor_engine import Document, SourceKind

log = logging.getLogger(__name__)

TITLE_CHARS = 80  # a solved post's source title: "Solved: " and the post's title, cut to this
NOT_ALLOWED = "Only the post's author or an admin of this forum can mark it solved."
NO_ANSWER = "I found no answer to keep for this post (it may have been forgotten since), so nothing was added."


def solved_document(solved: Solved, answer: str, answerer: str = "") -> Document:
    """The source a solved post becomes: the question (title and opening message) and the
    accepted ``answer`` as one text, linked to the post. ``added_at`` is left to the engine."""
    question = post_question(solved.title, solved.question) or solved.title
    by = f" (by {answerer})" if answerer else ""
    text = f"Question: {question}\n\nAccepted answer{by}: {answer.strip()}"
    title = " ".join(solved.title.split()) or " ".join(question.split())
    if len(title) > TITLE_CHARS:
        title = title[: TITLE_CHARS - 1] + "…"
    return Document(text=text, title=f"Solved: {title}", kind=SourceKind.THREAD, link=solved.link,
                    added_by=added_by(solved.person), added_at="", external_id=solved.external_id)


class ForumHandling:
    """Solved forum posts become sources; see the module docstring."""

    def __init__(self, engine: AsyncEngine, config: Config, sources: SourceHandling) -> None:
        self._engine = engine
        self._config = config
        self._sources = sources

    async def solved(self, solved: Solved, send: Send) -> None:
        """Stores the post's question and accepted answer as a source, when its marker may."""
        key = solved.channel
        if not may_mark_solved(solved.person, solved.author_id, key, self._config.bot):
            log.info("channel %s: %s may not mark post %s solved", key, solved.person.id, solved.thread)
            await send(Reply(ReplyKind.INFO, NOT_ALLOWED, private=True, thread=solved.thread))
            return
        answer, answerer = await self._accepted_answer(solved)
        if not answer.strip():
            await send(Reply(ReplyKind.INFO, NO_ANSWER, private=True, thread=solved.thread))
            return
        log.info("channel %s: post %s marked solved by %s", key, solved.thread, solved.person.id)
        await self._sources.solved(solved, solved_document(solved, answer, answerer), send)

    async def _accepted_answer(self, solved: Solved) -> tuple[str, str]:
        """The accepted answer's text and its writer: the kept answer named, else the event's."""
        if not solved.answer_id:
            return solved.answer, solved.answerer
        key, wanted = solved.channel, solved.answer_id
        kept = await self._engine.run(lambda engine: [a for a in engine.answers(key) if a.answer_id == wanted])
        return (kept[0].text, "") if kept else ("", "")
