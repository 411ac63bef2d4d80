"""The chat handler: turns every neutral event into engine calls and replies.

:meth:`ChatHandler.handle` is the one entry point. It dispatches a
:class:`Question`, :class:`Command`, :class:`Upload`, :class:`Pin`,
:class:`Unpin` or :class:`Vote` and speaks only through the ``send`` it is given.
Answers are kept in the store with their question, so a later vote on one
is stored beside both.

Contracts:

- Every blocking engine call runs in a worker thread (through ``bot.engine_calls``),
  so questions are answered while a rebuild runs.
- It never fails silently. Errors written for people (``RaptorError``,
  ``BotError``) become an ERROR reply carrying their message. Anything else is
  logged with ``log.exception`` and a short reference id, and becomes an ERROR
  reply naming that reference, so an operator can find the full story.
- A question in a channel that holds no source (the engine's ``NoMaterial``: nothing was
  searched) is no failure: it gets the INFO reply ``replies.NO_MATERIAL`` (what to add),
  streamed or not, is logged at INFO and counted as the question outcome ``no_material``,
  never as an error nor as ``not_found``.
- ``rebuild`` and ``forget`` are for the channel's admins only (see
  :func:`bot.commands.may_manage`); questions are limited per person and
  minute, rebuild requests per channel and hour, each refusal saying when to
  try again. Limits are ``bot.rate_limits``, with a channel's own keys from
  ``bot.channels[...].rate_limits`` in their place.
- Ingestion is bounded before any loading or embedding: files and pins per
  person and hour, their bytes per channel and day (a duplicate, or anything
  that stores nothing, gives its bytes back), and optional caps on a channel's
  number of sources and stored text (``bot.limits``). The caps are read from
  the store just before ingesting, so two uploads at the same moment may pass
  a cap by one source.
- Answers stream when they can: with a language model answering (the engine
  ``streams_answers``) and a ``send`` that can show a draft (a
  :class:`~bot.neutral.DraftingSend`), the answer is shown as it is written, paced by
  :class:`bot.streaming.DraftPacer`, and the finished reply (citations rendered, the very
  reply the non-streamed path sends) takes the draft's place. Any failure, also one in the
  middle of the stream, ends the draft with the ERROR reply the event would have had, so no
  half answer stays without notice. Offline answers, and adapters that cannot edit or
  stream, get the finished reply only, as before.
- Unpinning removes the sources a pin became only when ``bot.unpin_removes_source``
  is on and the person unpinning is an admin or the one who pinned it
  (:func:`bot.commands.may_remove_pin`); otherwise they stay, and the reply says
  who can remove them.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from bot import commands, replies
from bot.config import Config
from bot.coordination.shared_limits import LimiterFactory, local_limiters
from bot.engine_calls import AsyncEngine
from bot.errors import BotError, log_failure
from bot.ingestion import (
    SourceUpdate,
    adder_id,
    ingest_correction,
    ingest_pin,
    ingest_upload,
    pin_document,
    pinned_sources,
    update_pin,
)
from bot.neutral import (
    Attachment,
    Command,
    DraftingSend,
    Event,
    Feedback,
    Person,
    Pin,
    Question,
    Reply,
    ReplyAddress,
    ReplyKind,
    Send,
    Unpin,
    Upload,
    Vote,
)
from bot.observability.log_format import channel_context
from bot.observability.metrics import Metrics
from bot.rebuilds.service import RequestResult
from bot.streaming import DraftPacer
from bot.tree_outline import tree_outline
from bot.tree_picture import render_png
from raptor_engine import Answer, AnswerStream, ChannelKey, NoMaterial, RaptorError

if TYPE_CHECKING:
    from bot.rebuilds.service import RebuildService
    from raptor_engine import Engine

log = logging.getLogger(__name__)

CONTEXT_MESSAGES = 2  # earlier thread messages prepended to a follow-up question for retrieval
CONTEXT_CHARS = 500  # each cut to this many characters, so a long paste cannot drown the question
TREE_PICTURE_NAME = "raptor-tree.png"
HOUR_S = 3600.0
DAY_S = 24 * HOUR_S
CHANGED_NOTICES = 10  # answer threads told about one changed source, at most


def retrieval_query(question: Question) -> str:
    """The text retrieval and answering work from: the question itself, preceded by the
    last :data:`CONTEXT_MESSAGES` messages of its thread (each cut to
    :data:`CONTEXT_CHARS`), so that a follow-up such as "and who approves it?"
    carries what "it" is. Without context, the question unchanged."""
    earlier = [message.strip()[:CONTEXT_CHARS] for message in question.context[-CONTEXT_MESSAGES:]]
    return "\n".join([*(m for m in earlier if m), question.text.strip()])


class ChatHandler:
    """Answers questions and runs commands for every channel; see the module docstring."""

    def __init__(
        self,
        engine: Engine,
        config: Config,
        scheduler: RebuildService,
        clock: Callable[[], float] = time.monotonic,
        limiters: LimiterFactory | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        """``limiters`` makes the rate limiters (default: counted in this process; with several
        replicas, counted in Redis). ``clock`` is for local limiters only (tests pass their own)."""
        self._engine = AsyncEngine(engine)
        self._config = config
        self._scheduler = scheduler
        self.metrics = metrics or Metrics()
        # The limits themselves are passed per call: a channel may have its own (bot.channels[...]).
        make = limiters or local_limiters(clock)
        self._questions = make("questions", 60.0)
        self._rebuilds = make("rebuilds", HOUR_S)
        self._uploads = make("uploads", HOUR_S)
        self._upload_bytes = make("upload-bytes", DAY_S)

    async def handle(self, event: Event, send: Send) -> None:
        """Handles one event, replying through ``send``; never raises for a failure of the
        event itself (see the module docstring). Cancellation passes through."""
        try:
            with channel_context(str(event.channel)):  # every log line of this event names its channel
                await self._dispatch(event, send)
        except Exception as exc:
            await self._send_error(send, self._failure_reply(event, exc))

    def _failure_reply(self, event: Event, exc: Exception) -> Reply:
        """The ERROR reply for ``exc``, which ended the handling of ``event``; logged and counted.
        Errors written for people carry their message; anything else a logged reference."""
        thread = getattr(event, "thread", "")
        if isinstance(exc, (RaptorError, BotError)):
            log.info("%s refused: %s", type(event).__name__, exc)
            self.metrics.count_error(type(exc).__name__)
            return Reply(ReplyKind.ERROR, replies.error_text(exc), thread=thread)
        self.metrics.count_error("unexpected")
        reference = log_failure(log, "handling %s failed (reference %s)", type(event).__name__)
        return Reply(ReplyKind.ERROR, replies.unexpected_text(reference), reference=reference, thread=thread)

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
        elif isinstance(event, Feedback):
            await self._feedback(event, send)
        else:
            raise TypeError(f"the chat handler does not know events of type {type(event).__name__}")

    # -- questions ----------------------------------------------------------------

    async def _question(self, event: Question | Command, text: str, send: Send) -> None:
        """Answers ``text`` (a question, or the argument of ``ask``) with citations, in its thread,
        and counts it (with its time) by outcome."""
        started = time.monotonic()
        outcome = "failed"
        try:
            outcome = await self._answer(event, text, send)
        finally:
            self.metrics.observe_question(event.channel.platform, outcome, time.monotonic() - started)

    async def _answer(self, event: Question | Command, text: str, send: Send) -> str:
        """Answers and returns the outcome: ``answered``, ``not_found`` (searched, nothing
        relevant), ``no_material`` (the channel holds no source: nothing to search) or ``refused``."""
        if not text.strip():
            await send(Reply(ReplyKind.INFO, replies.EMPTY_QUESTION, thread=event.thread))
            return "refused"
        key = event.channel
        limit = self._config.bot.rate_limits_for(str(key)).questions_per_user_per_minute
        wait = await self._questions.try_acquire((key, event.person.id), limit=limit)
        if wait > 0:
            await send(Reply(ReplyKind.INFO, replies.question_limit_text(limit, wait), private=True, thread=event.thread))
            return "refused"
        context = event.context if isinstance(event, Question) else ()
        query = retrieval_query(Question(key, event.person, text, event.thread, context))
        if isinstance(send, DraftingSend) and self._engine.streams_answers:
            return await self._streamed_answer(event, text, query, send)
        try:
            answer = await self._engine.answer(key, query)
        except NoMaterial:
            await send(self._no_material(event))
            return "no_material"
        return await self._reply_with(event, text, answer, send)

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
            async for piece in stream:
                pacer.add(piece)
            return await self._reply_with(event, text, stream.answer, pacer.finish)
        except NoMaterial:
            await pacer.finish(self._no_material(event))
            return "no_material"
        except Exception as exc:
            failure = self._failure_reply(event, exc)
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
            self.metrics.count_model_call("answer")  # the answer's tokens are not reported back
        answer_id = await self._keep(key, text, answer, event.person.label, event.thread)
        log.info("channel %s: answer %s with %d citation(s)", key, answer_id or "-", len(answer.citations))
        await send(replies.answer_reply(answer, thread=event.thread, answer_id=answer_id))
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

    async def _vote(self, vote: Vote, send: Send) -> None:
        record = await self._engine.vote(vote.channel, vote.answer_id, vote.person.id, vote.up)
        log.info("channel %s: %s voted %s on answer %s", vote.channel, vote.person.id, "up" if vote.up else "down",
                 vote.answer_id)
        text = replies.vote_text(vote.up, record.ups, record.downs) + replies.changed_note(record)
        await send(Reply(ReplyKind.INFO, text, private=True))

    async def _feedback(self, feedback: Feedback, send: Send) -> None:
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
            sources = await self._engine.sources(command.channel)
            await self._info(send, command, replies.sources_text(sources))
        elif name == commands.FORGET:
            await self._forget(command, send)
        elif name == commands.NODE:
            await self._node(command, send)
        elif name == commands.TREE:
            await self._tree(command, send)
        elif name == commands.FEEDBACK:
            answers = await self._engine.run(lambda engine: engine.answers(command.channel))
            await self._info(send, command, replies.feedback_report_text(answers))
        else:
            await self._info(send, command, replies.help_text())

    async def _rebuild(self, command: Command, send: Send) -> None:
        key = command.channel
        if not await self._engine.sources(key):
            # Said now rather than by the scheduler later, and without using up a rebuild of the hour.
            await send(Reply(ReplyKind.ERROR, replies.NO_MATERIAL, thread=command.thread))
            return
        limit = self._config.bot.rate_limits_for(str(key)).rebuilds_per_channel_per_hour
        wait = await self._rebuilds.try_acquire(key, limit=limit)
        if wait > 0:
            await send(Reply(ReplyKind.INFO, replies.rebuild_limit_text(limit, wait), thread=command.thread))
            return
        address = ReplyAddress(key, command.thread)
        result = await self._scheduler.request(key, command.person.label, send, address)
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

    # -- sources ----------------------------------------------------------------

    async def _upload(self, upload: Upload, send: Send) -> None:
        """Stores an uploaded file; with ``files.replace_same_name``, in place of the channel's
        earlier files of that name (see :func:`ingest_upload`)."""
        replacing = self._config.files.replace_same_name
        await self._add(upload, upload.size or len(upload.data), upload.filename, send,
                        lambda engine: ingest_upload(engine, upload, replacing))

    async def _pin(self, pin: Pin, send: Send) -> None:
        if pin.edited:
            await self._pin_edited(pin, send)
            return
        document = pin_document(pin)  # a pin with no text is refused here, before it counts against any limit
        size = len(document.text.encode("utf-8"))
        await self._add(pin, size, document.title, send, lambda engine: SourceUpdate(ingest_pin(engine, pin)))

    async def _pin_edited(self, pin: Pin, send: Send) -> None:
        """An edited message: its source, if it is one, takes the new text (see :func:`update_pin`).
        Nothing is said for a message that is no source, nor for an edit that changed nothing kept,
        nor for a pinned thread that grew by a reply (see ``Pin.grew``) but to its answers."""
        update = await self._engine.run(lambda engine: update_pin(engine, pin))
        if update is None or not update.replaced:
            return
        log.info("channel %s: source %s updated after %s %s (%d answers cite its earlier text)", pin.channel,
                 update.result.source.id[:12], "a reply to" if pin.grew else "an edit of", pin.external_id,
                 len(update.changed_answers))
        self._scheduler.watch(pin.channel)
        if not pin.grew:
            await send(Reply(ReplyKind.INFO, replies.updated_text(update.result, len(update.changed_answers))))
        await self._tell_changed_answers(update, send)

    async def _tell_changed_answers(self, update: SourceUpdate, send: Send) -> None:
        """Says in the thread of each answer that cited a replaced source's earlier text (and had
        not been told yet) that it cites material that changed after it was given: one line per
        thread, at most :data:`CHANGED_NOTICES` threads per change, so that one edit cannot flood
        a channel. Answers given outside a thread are counted in the change's own message."""
        threads = dict.fromkeys(a.thread for a in update.changed_answers if a.thread and not a.changed)
        notice = replies.changed_answer_notice(update.result.source.title)
        for thread in list(threads)[:CHANGED_NOTICES]:
            await send(Reply(ReplyKind.INFO, notice, thread=thread))

    async def _add(
        self, event: Upload | Pin, size: int, name: str, send: Send, ingest: Callable[[Engine], SourceUpdate]
    ) -> None:
        """Stores a file or a pin of ``size`` bytes (``name`` is how refusals call it) by calling
        ``ingest`` in a worker thread, once the limits allow it; otherwise says which limit refused."""
        key = event.channel
        refusal = await self._refusal(key, event.person, size, name)
        if refusal is not None:
            log.info("channel %s: %s by %s refused by a limit", key, type(event).__name__.lower(), event.person.id)
            await send(refusal)
            return
        stored = False
        try:
            update = await self._engine.run(ingest)
            stored = not update.result.duplicate
        finally:
            if not stored:  # only what is stored spends the channel's budget (not a duplicate, not a rejected file)
                await self._upload_bytes.refund(key, size)
        self._scheduler.watch(key)
        await send(Reply(ReplyKind.INFO, _added_text(update)))
        await self._tell_changed_answers(update, send)

    async def _refusal(self, key: ChannelKey, person: Person, size: int, name: str) -> Reply | None:
        """None when a new source of ``size`` bytes may be added now (and it is counted against the
        rate limits); else the reply saying which limit refused it (and nothing is counted)."""
        caps = self._config.bot.limits_for(str(key))
        max_stored = megabytes_to_bytes(caps.max_stored_mb_per_channel)
        if caps.max_sources_per_channel or max_stored:
            sources = await self._engine.sources(key)
            if caps.max_sources_per_channel and len(sources) >= caps.max_sources_per_channel:
                return Reply(ReplyKind.ERROR, replies.source_cap_text(name, caps.max_sources_per_channel))
            held = sum(source.chars for source in sources)
            if max_stored and held + size > max_stored:
                return Reply(ReplyKind.ERROR, replies.stored_cap_text(name, size, held, max_stored))
        limits = self._config.bot.rate_limits_for(str(key))
        mine = (key, person.id)
        # The channel's admins are trusted with many uploads (a Discord pin, made by a Manage Messages
        # holder, arrives with no person at all); the channel's byte budget still holds for them.
        per_person = 0 if commands.may_manage(person, key, self._config.bot) else limits.uploads_per_user_per_hour
        wait = await self._uploads.try_acquire(mine, limit=per_person)
        if wait > 0:
            text = replies.upload_limit_text(name, limits.uploads_per_user_per_hour, wait)
            return Reply(ReplyKind.INFO, text, private=True)
        budget = megabytes_to_bytes(limits.upload_mb_per_channel_per_day)
        wait = await self._upload_bytes.try_acquire(key, size, limit=budget)
        if wait > 0:
            await self._uploads.refund(mine)  # refused: it is not one of their uploads of the hour
            return Reply(ReplyKind.INFO, replies.upload_budget_text(name, size, budget, wait), private=True)
        return None

    async def _unpin(self, unpin: Unpin, send: Send) -> None:
        key = unpin.channel
        removes = self._config.bot.unpin_removes_source
        sources = await self._engine.run(lambda engine: pinned_sources(engine, key, unpin.external_id))
        if not removes or not sources:
            await send(Reply(ReplyKind.INFO, replies.unpinned_text(sources, removes)))
            return
        allowed = [
            s for s in sources if commands.may_remove_pin(unpin.person, adder_id(s.added_by), key, self._config.bot)
        ]
        kept = [s for s in sources if s not in allowed]
        for source in allowed:
            await self._engine.forget(key, source.id)
        if allowed:
            self._scheduler.watch(key)
        if kept:
            log.info("channel %s: unpin of %s by %s left %d source(s): not an admin nor the pinner",
                     key, unpin.external_id, unpin.person.id, len(kept))
        texts = ([replies.unpinned_text(allowed, removes)] if allowed else []) + (
            [replies.unpin_kept_text(kept)] if kept else []
        )
        await send(Reply(ReplyKind.INFO, "\n".join(texts)))


def _added_text(update: SourceUpdate) -> str:
    """What storing a file or pin did: added it, or replaced earlier files of its name."""
    if not update.replaced:
        return replies.added_text(update.result)
    return replies.replaced_text(update.result, len(update.replaced), len(update.changed_answers))


def megabytes_to_bytes(mb: float) -> int:
    """A size in MB of the configuration (binary, as ``files.max_mb``) in bytes; 0 stays 0 (no limit)."""
    return int(mb * replies.MEGABYTE)


def _channel_title(key: ChannelKey) -> str:
    """The caption of a channel's tree picture."""
    return f"#{key.channel} ({key.platform})"
