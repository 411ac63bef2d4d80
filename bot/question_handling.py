"""Answering questions: a :class:`~bot.neutral.Question`, or the argument of ``ask``.

Contracts (a part of :class:`bot.handler.ChatHandler`):

- A workspace that used up its daily model budget (``bot.model_budget``) gets no answer
  until UTC midnight, and is told so; what each answer's model calls cost is counted
  against it (:class:`bot.model_budget.ModelBudget`), streamed or not, failed or not.
- Questions are limited per person and minute, counted across every channel of the
  person's workspace (``bot.rate_limits``; the channel asked in may set its own
  ``bot.channels[...].rate_limits``), a refusal saying when to try again.
- A question in a channel that holds no source (the engine's ``NoMaterial``: nothing was
  searched) is no failure: it gets the INFO reply ``replies.NO_MATERIAL`` (what to add),
  streamed or not, is logged at INFO and counted as the question outcome ``no_material``,
  never as an error nor as ``not_found``.
- Answers stream when they can: with a language model answering (the engine
  ``streams_answers``) and a ``send`` that can show a draft (a
  :class:`~bot.neutral.DraftingSend`), the answer is shown as it is written, paced by
  :class:`bot.streaming.DraftPacer`, and the finished reply (citations rendered, the very
  reply the non-streamed path sends) takes the draft's place. Any failure, also one in the
  middle of the stream, ends the draft with the ERROR reply the event would have had (the
  handler's, given as ``failure_reply``), so no half answer stays without notice. Offline
  answers, and adapters that cannot edit or stream, get the finished reply only.
- Answers are kept in the store with their question and the thread they go to, so a later
  vote on one is stored beside both; an answer that cannot be kept still goes out, without
  vote buttons.
- Every question is counted, with its time, by its outcome.
- A ``send`` that can show a status line (a :class:`~bot.neutral.StatusSend`) is told the
  stages: :attr:`~bot.neutral.Stage.SEARCHING` once the question is past the budget and the
  limits, :attr:`~bot.neutral.Stage.WRITING` once a streamed answer's material is found.
  Clearing the line is the adapter's, after the last reply.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace

from bot import replies
from bot.config import Config
from bot.coordination.shared_limits import Limiter
from bot.engine_calls import AsyncEngine
from bot.model_budget import ModelBudget
from bot.neutral import Command, DraftingSend, Question, Reply, ReplyKind, Send, Stage, StatusSend
from bot.observability.metrics import Metrics
from bot.rate_limits import person_in_workspace
from bot.streaming import DraftPacer
from raptor_engine import Answer, AnswerStream, ChannelKey, NoMaterial, RaptorError, metered

log = logging.getLogger(__name__)

CONTEXT_MESSAGES = 2  # earlier thread messages prepended to a follow-up question for retrieval
CONTEXT_CHARS = 500  # each cut to this many characters, so a long paste cannot drown the question

FailureReply = Callable[[Question | Command, Exception], Reply]
"""The ERROR reply for a failure that ended the handling of an event (logged and counted)."""
ErrorSend = Callable[[Send, Reply], Awaitable[None]]
"""Sends an ERROR reply, never raising (if even that fails, the log is all that is left)."""


def retrieval_query(question: Question) -> str:
    """The text retrieval and answering work from: the question itself, preceded by the
    last :data:`CONTEXT_MESSAGES` messages of its thread (each cut to
    :data:`CONTEXT_CHARS`), so that a follow-up such as "and who approves it?"
    carries what "it" is. Without context, the question unchanged."""
    earlier = [message.strip()[:CONTEXT_CHARS] for message in question.context[-CONTEXT_MESSAGES:]]
    return "\n".join([*(m for m in earlier if m), question.text.strip()])


async def show_stage(send: Send, stage: Stage) -> None:
    """Tells ``send`` the stage, when it can show one (a :class:`~bot.neutral.StatusSend`)."""
    if isinstance(send, StatusSend):
        await send.show_stage(stage)


class QuestionHandling:
    """Answers questions with citations; see the module docstring. ``limiter`` counts the
    questions per person and minute, ``budget`` the workspace's model use per day."""

    def __init__(self, engine: AsyncEngine, config: Config, limiter: Limiter, budget: ModelBudget, metrics: Metrics,
                 failure_reply: FailureReply, send_error: ErrorSend) -> None:
        self._engine = engine
        self._config = config
        self._limiter = limiter
        self._budget = budget
        self._metrics = metrics
        self._failure_reply = failure_reply
        self._send_error = send_error

    async def ask(self, event: Question | Command, text: str, send: Send) -> None:
        """Answers ``text`` (a question, or the argument of ``ask``) with citations, in its thread,
        and counts it (with its time) by outcome."""
        started = time.monotonic()
        outcome = "failed"
        try:
            outcome = await self._answer(event, text, send)
        finally:
            self._metrics.observe_question(event.channel.platform, outcome, time.monotonic() - started)

    async def _answer(self, event: Question | Command, text: str, send: Send) -> str:
        """Answers and returns the outcome: ``answered``, ``not_found`` (searched, nothing
        relevant), ``no_material`` (the channel holds no source: nothing to search) or ``refused``."""
        if not text.strip():
            await send(Reply(ReplyKind.INFO, replies.EMPTY_QUESTION, thread=event.thread))
            return "refused"
        key = event.channel
        spent = await self._budget.reached(key)
        if spent:
            log.info("channel %s: a question refused: the workspace used up its daily model %s", key, spent)
            await send(Reply(ReplyKind.INFO, self._budget.refusal(spent), thread=event.thread))
            return "refused"
        limit = self._config.bot.rate_limits_for(str(key)).questions_per_user_per_minute
        wait = await self._limiter.try_acquire(person_in_workspace(key, event.person.id), limit=limit)
        if wait > 0:
            await send(Reply(ReplyKind.INFO, replies.question_limit_text(limit, wait), private=True, thread=event.thread))
            return "refused"
        await show_stage(send, Stage.SEARCHING)
        context = event.context if isinstance(event, Question) else ()
        query = retrieval_query(Question(key, event.person, text, event.thread, context))
        with metered() as meter:  # what the answer's model calls cost, wherever they run
            try:
                if isinstance(send, DraftingSend) and self._engine.streams_answers:
                    return await self._streamed_answer(event, text, query, send)
                try:
                    answer = await self._engine.answer(key, query)
                except NoMaterial:
                    await send(self._no_material(event))
                    return "no_material"
                return await self._reply_with(event, text, answer, send)
            finally:
                await self._budget.record(key, meter.usage())

    def _no_material(self, event: Question | Command) -> Reply:
        """The INFO reply to a question asked of a channel that holds no source (the engine's
        ``NoMaterial``): nothing was searched, so it says what to add, never "not found". A
        normal situation, not a failure: logged at INFO, counted as no error."""
        log.info("channel %s: a question, but the channel has no material yet", event.channel)
        return Reply(ReplyKind.INFO, replies.NO_MATERIAL, thread=event.thread)

    async def _streamed_answer(self, event: Question | Command, text: str, query: str, send: DraftingSend) -> str:
        """:meth:`_answer` with the answer shown while it is written (see the module docstring).
        A failure ends the draft with its ERROR reply here (it is not raised: the draft, not a
        new message, must say it), and the outcome is ``failed``. A channel with no material
        (``NoMaterial``, raised before anything is shown) gets the same INFO reply as
        :meth:`_answer` gives, through the draft (which, having shown nothing, simply sends it)."""
        pacer = DraftPacer(send.draft(event.thread))
        try:
            stream: AnswerStream = await self._engine.answer_stream(event.channel, query)
            await show_stage(send, Stage.WRITING)
            async for piece in stream:
                pacer.add(piece)
            return await self._reply_with(event, text, stream.answer, pacer.finish)
        except NoMaterial:
            await pacer.finish(self._no_material(event))
            return "no_material"
        except Exception as exc:
            failure = self._failure_reply(event, exc)
            if pacer.text:  # part of the answer is on screen: say it is not the whole of it
                failure = replace(failure, text=replies.broke_off_text(failure.text))
            if pacer.finished:  # the draft's own finish failed: the error goes as a message of its own
                await self._send_error(send, failure)
            else:
                await pacer.finish(failure)
            return "failed"
        finally:
            await pacer.close()  # cancelled: the draft stops growing

    async def _reply_with(self, event: Question | Command, text: str, answer: Answer, send: Send) -> str:
        """Keeps and sends ``answer`` to ``text``; the outcome (``answered`` or ``not_found``)."""
        key = event.channel
        if self._config.llm.base_url:
            self._metrics.count_model_call("answer")  # the answer's tokens are not reported back
        answer_id = await self._keep(key, text, answer, event.person.label, event.thread)
        log.info("channel %s: answer %s with %d citation(s), %d unverified quote(s), %d unsupported sentence(s)",
                 key, answer_id or "-", len(answer.citations), answer.unverified_quotes, len(answer.unsupported))
        self._metrics.count_answer_checks(answer.unverified_quotes, len(answer.unsupported))
        drop = self._config.answers.drop_unsupported
        await send(replies.answer_reply(answer, thread=event.thread, answer_id=answer_id, drop_unsupported=drop))
        return "answered" if answer.found else "not_found"

    async def _keep(self, key: ChannelKey, question: str, answer: Answer, asked_by: str, thread: str) -> str:
        """Keeps the answer for votes, with the thread it goes to; its id, or "" when it could not
        be kept (the answer still goes out, without vote buttons: a store hiccup must not swallow
        an answer)."""
        answer_id = uuid.uuid4().hex[:12]
        try:
            kept = self._config.bot.limits_for(str(key)).kept_answers_per_channel
            await self._engine.keep_answer(key, answer_id, question, answer, asked_by, kept, thread)
        except RaptorError as exc:
            log.warning("channel %s: could not keep answer %s for votes: %s", key, answer_id, exc)
            return ""
        return answer_id
