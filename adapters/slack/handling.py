"""What the Slack adapter does with a payload once bolt has acknowledged it.

:class:`SlackHandling` turns Slack payloads into work for one started
:class:`~bot.runtime.Assistant`; it is the platform-side piece that
:class:`~adapters.slack.app.SlackAdapter` (the :class:`~adapters.protocol.Adapter`) runs. Contract:

* the ``on_*`` methods (called by the listeners of :mod:`adapters.slack.listeners`,
  after the acknowledgement) only start a background task and return: the
  acknowledgement never waits for the work. At most ``max_concurrency`` tasks work
  at once; :meth:`SlackHandling.drain` waits for them when the app stops;
* :meth:`SlackHandling.first_delivery` tells an Events API delivery from Slack's
  retry of it (Slack resends events not acknowledged within 3 s, possibly to another
  replica behind the load balancer), so an event is answered once whatever the
  retries: the bot's delivery ledger (``Assistant.first_delivery``, shared by the
  replicas) remembers ``slack:event:<event_id>``. A shared file, which arrives as two
  events (its message and ``file_shared``), is taken once by ``slack:file:<channel>:<file id>``;
* :meth:`SlackHandling.courier` posts replies to a channel without an event (a rebuild's
  progress and result that a worker process produced), as :class:`~adapters.slack.outbox.Outbox`
  posts every reply;
* a task classifies the payload (:mod:`adapters.slack.translate`), fetches what
  Slack did not send (:mod:`adapters.slack.web`: the person, the thread;
  :mod:`adapters.slack.downloads`: the file), and gives the neutral event to
  ``bot.handler.handle`` with a ``send`` that posts Block Kit messages
  (:mod:`adapters.slack.blocks`) and can show a language model's answer while it is
  written (:class:`~adapters.slack.sending.SlackDraft`: Slack's native streaming in the
  thread, or paced ``chat.update`` edits where streaming is refused);
* a 👎 on an answer opens the feedback form (:mod:`adapters.slack.feedback_form`) with
  ``views.open`` in a task of its own that waits for no slot (the click's ``trigger_id``
  expires 3 s after the click), and is recorded as a vote as before, so a dismissed form
  still counts the 👎; the form's submission becomes a :class:`~bot.neutral.Feedback`,
  whose private reply is an ephemeral message in the answer's thread.

Nothing fails silently: the handler turns its failures into ERROR replies with a
reference; failures here (Slack refusing a call, a download) are logged under a
fresh reference too, and the person gets a short note naming it. A malformed
payload is dropped with a log line.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Coroutine, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from dataclasses import replace
from typing import Any

import aiohttp
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack import translate, web as slack_web
from adapters.slack.blocks import render_question
from adapters.slack.downloads import Downloader, DownloadError
from adapters.slack.outbox import Outbox, Target
from adapters.slack.sending import SlackSend
from adapters.slack.translate import (
    Asked,
    BotIdentity,
    FileNotice,
    FilesShared,
    FollowUp,
    Ignored,
    Origin,
    Pinned,
    SlackFile,
    Unpinned,
)
from adapters.slack.web import People
from bot import replies
from bot.commands import ASK
from bot.config import SlackConfig
from bot.errors import BotError, log_failure, new_reference
from bot.neutral import Event, Person, Reply, ReplyAddress, ReplyKind, Send, Vote
from bot.runtime import Assistant

log = logging.getLogger(__name__)

MAX_CONCURRENT_EVENTS = 16  # events worked on at once; more wait (their acknowledgement does not)
DRAIN_TIMEOUT_S = 10.0  # on stop, how long events being worked on may take to finish


class SlackHandling:
    """Turns Slack payloads into work for one started :class:`~bot.runtime.Assistant`.

    The ``on_*`` methods are called by bolt's listeners after the acknowledgement;
    they only start a background task (bounded to ``max_concurrency`` at once) and
    return. :meth:`drain` waits for those tasks when the app stops.
    """

    def __init__(
        self,
        bot: Assistant,
        config: SlackConfig,
        client: AsyncWebClient,
        session: aiohttp.ClientSession,
        identity: BotIdentity,
        max_concurrency: int = MAX_CONCURRENT_EVENTS,
    ) -> None:
        self.bot = bot
        self.config = config
        self.client = client
        self.identity = identity
        self.people = People(client)
        self.outbox = Outbox(client, session, team=identity.team_id)  # streaming names the workspace
        self.downloader = Downloader(session, config.bot_token.get_secret_value(), bot.max_upload_bytes,
                                     config.api_base_url)
        self._slots = asyncio.Semaphore(max_concurrency)
        self._tasks: set[asyncio.Task[None]] = set()

    # -- called by the listeners (after the acknowledgement) ---------------------------

    async def first_delivery(self, body: Mapping[str, Any], retry: str = "") -> bool:
        """False for an Events API delivery whose ``event_id`` any replica saw already (a retry
        of an event already being handled); True otherwise, remembering it. Anything else
        (slash commands, clicks: Slack does not retry them) is always a first delivery."""
        event_id = body.get("event_id")
        if body.get("type") != "event_callback" or not isinstance(event_id, str) or not event_id:
            return True
        if await self.bot.first_delivery(f"slack:event:{event_id}"):
            if retry:
                log.info("event %s arrives first as Slack's retry %s", event_id, retry)
            return True
        log.info("event %s delivered again (retry %s): answered once already", event_id, retry or "?")
        return False

    def courier(self, address: ReplyAddress) -> Send:
        """The ``send`` of replies to ``address`` without an event (a rebuild's progress and
        result from a worker): posted in the conversation, in ``address.thread`` unless the
        reply names its own, exactly as replies to events are (it never raises either).
        With no person to show it to, a private reply is posted in the conversation like
        any other (ephemeral messages need one)."""
        deliver = SlackSend(self.outbox, Target(address.channel.channel, "", thread=address.thread))

        async def send(reply: Reply) -> None:
            await deliver(replace(reply, private=False) if reply.private else reply)

        return send

    def on_event(self, body: Mapping[str, Any]) -> None:
        self.spawn(self._event(body), "slack event")

    def on_command(self, body: Mapping[str, Any]) -> None:
        self.spawn(self._command(body), "slack command")

    def on_action(self, body: Mapping[str, Any]) -> None:
        answer_id = translate.down_vote(body)
        if answer_id:
            # First, and without waiting for a slot: the trigger_id is good for 3 s after the click.
            self.spawn(self._open_feedback_form(body, answer_id), "slack feedback form", urgent=True)
        self.spawn(self._action(body), "slack action")

    def on_view(self, body: Mapping[str, Any]) -> None:
        self.spawn(self._view(body), "slack view submission")

    # -- background tasks ---------------------------------------------------------------

    def spawn(self, work: Coroutine[Any, Any, None], name: str, *, urgent: bool = False) -> None:
        """Runs ``work`` in a task kept until it ends (so it is neither collected nor lost at stop).
        ``urgent`` work (one quick call that must happen within seconds) takes no slot."""
        task = asyncio.get_running_loop().create_task(self._bounded(work, urgent), name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _bounded(self, work: Coroutine[Any, Any, None], urgent: bool = False) -> None:
        try:
            async with nullcontext() if urgent else self._slots:
                await work
        except asyncio.CancelledError:
            raise
        except Exception:
            # The flows report their own failures; this is the net under a mistake in that reporting.
            log.exception("a Slack event's background task failed")
        finally:
            work.close()  # a no-op once it ran; silences "never awaited" when cancelled before starting

    async def wait_idle(self) -> None:
        """Until no event is being worked on (for tests and benchmarks)."""
        while self._tasks:
            await asyncio.wait(set(self._tasks))

    async def drain(self, timeout_s: float = DRAIN_TIMEOUT_S) -> None:
        """Lets the events being worked on finish for up to ``timeout_s``, then cancels the rest."""
        pending = set(self._tasks)
        if pending:
            _, pending = await asyncio.wait(pending, timeout=timeout_s)
        for task in pending:
            task.cancel()
        if pending:
            log.info("cancelled %d Slack event(s) still being worked on at stop", len(pending))
            await asyncio.gather(*pending, return_exceptions=True)

    @asynccontextmanager
    async def _reporting(self, target: Target, what: str) -> AsyncIterator[None]:
        """Any failure in the block is logged under a new reference, and the person told."""
        try:
            yield
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            reference = log_failure(log, "Slack: %s failed (reference %s)", what)
            if isinstance(exc, slack_web.TRANSPORT_ERRORS):
                text = translate.api_failure_text(slack_web.error_code(exc), reference)
            else:
                text = replies.unexpected_text(reference)
            await self.outbox.deliver(target, Reply(ReplyKind.ERROR, text, reference=reference))

    def _working(self, channel: str, ts: str) -> AbstractAsyncContextManager[None]:
        return slack_web.working(self.client, channel, ts) if ts else nullcontext()

    async def _handle(self, event: Event, target: Target, ts: str = "") -> None:
        """Gives the event to the bot's handler, the working reaction on ``ts`` meanwhile."""
        async with self._working(target.channel, ts):
            await self.bot.handler.handle(event, SlackSend(self.outbox, target))

    # -- events ------------------------------------------------------------------------

    async def _event(self, body: Mapping[str, Any]) -> None:
        arrival = translate.classify_event(body, self.identity)
        if isinstance(arrival, Ignored):
            log.debug("event %s ignored: %s", body.get("event_id"), arrival.reason)
        elif isinstance(arrival, Asked):
            await self._asked(arrival)
        elif isinstance(arrival, FollowUp):
            await self._follow_up(arrival)
        elif isinstance(arrival, FilesShared):
            await self._files(arrival.origin, arrival.files)
        elif isinstance(arrival, FileNotice):
            await self._file_notice(arrival)
        elif isinstance(arrival, Pinned):
            await self._pinned(arrival)
        elif isinstance(arrival, Unpinned):
            await self._unpinned(arrival)

    async def _asked(self, asked: Asked) -> None:
        origin = asked.origin
        target = Target(origin.channel, origin.user, thread=asked.reply_thread)
        async with self._reporting(target, "a question"):
            person = await self.people.get(origin.user)
            context: tuple[str, ...] = ()
            if origin.thread_ts:
                context = await self._context(origin)
            await self._handle(translate.question(asked, person, context), target, origin.ts)

    async def _context(self, origin: Origin) -> tuple[str, ...]:
        """The thread's earlier messages; none (logged) when Slack will not give them."""
        try:
            messages = await slack_web.thread_messages(self.client, origin.channel, origin.thread_ts)
        except slack_web.TRANSPORT_ERRORS as exc:
            log.warning("reading thread %s in %s failed (%s): answering without its context",
                        origin.thread_ts, origin.channel, slack_web.error_code(exc))
            return ()
        return translate.thread_context(messages, origin.ts, self.identity)

    async def _follow_up(self, follow_up: FollowUp) -> None:
        origin = follow_up.origin
        try:
            messages = await slack_web.thread_messages(self.client, origin.channel, origin.thread_ts)
        except slack_web.TRANSPORT_ERRORS as exc:
            # Not addressed to the bot: without the thread there is no telling it was meant for it.
            log.warning("reading thread %s in %s failed (%s): a possible follow-up is left unanswered",
                        origin.thread_ts, origin.channel, slack_web.error_code(exc))
            return
        await self._thread_grew(origin, messages)
        if not translate.bot_answered(messages, self.identity):
            log.debug("message %s in thread %s: the bot has not answered there", origin.ts, origin.thread_ts)
            return
        target = Target(origin.channel, origin.user, thread=origin.thread_ts)
        async with self._reporting(target, "a follow-up question"):
            person = await self.people.get(origin.user)
            context = translate.thread_context(messages, origin.ts, self.identity)
            await self._handle(translate.question(follow_up, person, context), target, origin.ts)

    async def _thread_grew(self, reply: Origin, messages: list[dict[str, Any]]) -> None:
        """A reply was added to a thread: if the thread's root is a pinned source, the source
        takes the thread as it is now, replies included, quietly (see ``Pin.grew``)."""
        root_ts = reply.thread_ts
        root = next((m for m in messages if m.get("ts") == root_ts), None)
        if root is None:
            return
        origin = Origin(reply.team, reply.channel, reply.user, root_ts, root_ts)
        target = Target(reply.channel, reply.user, thread=root_ts)
        async with self._reporting(target, "a reply in a pinned thread"):
            text, thread_replies = translate.pinned_thread(messages, root_ts, self.identity)
            author = str(root.get("user") or "")
            person = await self.people.get(reply.user)
            label = (await self.people.get(author)).label if author else ""
            pinned = Pinned(origin, text=text, author=author, edited=True)
            grown = replace(translate.pin(pinned, person, text, "", label, thread_replies), grew=True)
            await self.bot.handler.handle(grown, SlackSend(self.outbox, target))

    # -- sources -------------------------------------------------------------------------

    async def _files(self, origin: Origin, files: tuple[SlackFile, ...]) -> None:
        fresh = [f for f in files if await self._first_sight(origin.channel, f.id)]
        if not fresh:
            return
        # Notes go in a thread under the file's message, so sharing stays quiet in the channel.
        target = Target(origin.channel, origin.user, thread=origin.thread_ts or origin.ts)
        async with self._reporting(target, "a shared file"):
            person = await self.people.get(origin.user)
            for file in fresh:
                await self._upload(origin, person, file, target)

    async def _file_notice(self, notice: FileNotice) -> None:
        origin = notice.origin
        if not await self._first_sight(origin.channel, notice.file_id):
            return  # its message (subtype file_share) brought it already, here or on another replica
        target = Target(origin.channel, origin.user)
        async with self._reporting(target, "a shared file"):
            file = await slack_web.file_info(self.client, notice.file_id)
            if file is None:
                raise BotError(f"files.info gave no file for {notice.file_id}")
            person = await self.people.get(origin.user)
            await self._upload(origin, person, file, target)

    async def _first_sight(self, channel: str, file_id: str) -> bool:
        """True the first time any replica takes the file shared in ``channel``: it arrives
        twice (its message and ``file_shared``), possibly at two replicas."""
        return await self.bot.first_delivery(f"slack:file:{channel}:{file_id}")

    async def _upload(self, origin: Origin, person: Person, file: SlackFile, target: Target) -> None:
        async with self._working(origin.channel, origin.ts):
            try:
                data = await self.downloader.fetch(file)
            except DownloadError as exc:
                reference = new_reference()
                log.warning("downloading file %s (%s) in %s failed: %s (reference %s)",
                            file.id, file.filename, origin.channel, exc.detail, reference)
                text = translate.download_failure_text(file.filename, exc.problem, reference)
                await self.outbox.deliver(target, Reply(ReplyKind.ERROR, text, reference=reference))
                return
            upload = translate.upload(origin, person, file, data)
            await self.bot.handler.handle(upload, SlackSend(self.outbox, target))

    async def _pinned(self, pinned: Pinned) -> None:
        if pinned.edited:
            await self._edited(pinned)
            return
        origin = pinned.origin
        target = Target(origin.channel, origin.user, thread=origin.thread_ts or origin.ts)
        async with self._reporting(target, "a pinned message"):
            person = await self.people.get(origin.user)
            text, thread_replies = await self._pinned_text(pinned)
            author = (await self.people.get(pinned.author)).label if pinned.author else ""
            link = pinned.permalink or await slack_web.permalink(self.client, origin.channel, origin.ts)
            pin = translate.pin(pinned, person, text, link, author, thread_replies)
            await self._handle(pin, target, origin.ts)

    async def _edited(self, pinned: Pinned) -> None:
        """An edited message, for the handler to update its source if it is one. No working
        reaction (most edited messages are no source); a thread's root is read again with its
        replies, as when it was pinned; its link stays the source's own. An edited reply
        also changes its thread: a pinned thread's source takes it (see :meth:`_thread_grew`)."""
        origin = pinned.origin
        target = Target(origin.channel, origin.user, thread=origin.thread_ts or origin.ts)
        async with self._reporting(target, "an edited message"):
            person = await self.people.get(origin.user)
            text, thread_replies = await self._pinned_text(pinned) if origin.thread_ts else (pinned.text, ())
            pin = translate.pin(pinned, person, text, "", person.label, thread_replies)
            await self.bot.handler.handle(pin, SlackSend(self.outbox, target))
        if pinned.is_reply:
            try:
                messages = await slack_web.thread_messages(self.client, origin.channel, origin.thread_ts)
            except slack_web.TRANSPORT_ERRORS as exc:
                log.warning("reading thread %s in %s after an edited reply failed (%s): its source, if pinned, "
                            "keeps the earlier text", origin.thread_ts, origin.channel, slack_web.error_code(exc))
                return
            await self._thread_grew(origin, messages)

    async def _pinned_text(self, pinned: Pinned) -> tuple[str, tuple[str, ...]]:
        """The pinned message's text and, for a thread's root, its replies (read from Slack:
        the event carries neither the replies nor, always, the text)."""
        origin = pinned.origin
        root = origin.thread_ts if pinned.is_reply else origin.ts
        if pinned.is_reply and pinned.text:
            return pinned.text, ()
        messages = await slack_web.thread_messages(self.client, origin.channel, root)
        if pinned.is_reply:
            found = [m for m in messages if m.get("ts") == origin.ts]
            return (translate.plain_text(str(found[0].get("text") or ""), self.identity.user_id) if found else ""), ()
        text, thread = translate.pinned_thread(messages, origin.ts, self.identity)
        return text or pinned.text, thread

    async def _unpinned(self, unpinned: Unpinned) -> None:
        origin = unpinned.origin
        target = Target(origin.channel, origin.user, thread=origin.thread_ts or origin.ts)
        async with self._reporting(target, "an unpinned message"):
            person = await self.people.get(origin.user)
            await self._handle(translate.unpin(unpinned, person), target)

    # -- slash commands and buttons -------------------------------------------------------

    async def _command(self, body: Mapping[str, Any]) -> None:
        origin = translate.slash_origin(body)
        target = Target(origin.channel, origin.user, response_url=str(body.get("response_url") or ""))
        async with self._reporting(target, "a slash command"):
            person = await self.people.get(origin.user)
            command = translate.command(body, person)
            thread = ""
            if command.name == ASK and command.argument:
                # A slash command is seen by nobody else: the question is shown in the channel,
                # and answered in a thread under it (where follow-ups then work as usual).
                thread = await self._show_question(target, command.argument)
                if not thread:
                    return
                command = replace(command, thread=thread)
            await self._handle(command, replace(target, thread=thread), thread)

    async def _show_question(self, target: Target, text: str) -> str:
        """Posts the question asked with the slash command; its ts, or empty (reported) on failure."""
        try:
            first = ""
            for message in render_question(target.user, text):
                ts = await self.outbox.post(target, message, first)
                first = first or ts
            return first
        except slack_web.TRANSPORT_ERRORS as exc:
            await self.outbox.report(target, "", "a question's echo", exc)
            return ""

    async def _action(self, body: Mapping[str, Any]) -> None:
        origin = translate.action_origin(body)
        target = Target(origin.channel, origin.user, thread=origin.thread_ts,
                        response_url=str(body.get("response_url") or ""))
        async with self._reporting(target, "a button"):
            person = await self.people.get(origin.user)
            event = translate.action_event(body, person)
            if event is None:
                log.debug("a click in %s carries nothing for the bot", origin.channel)
                return
            if isinstance(event, Vote) and not event.up:
                # The form it opened answers a 👎: the vote's own thanks would be a second message.
                await self.bot.handler.handle(event, self._errors_only(target))
                return
            await self._handle(event, target)

    def _errors_only(self, target: Target) -> Send:
        """A ``send`` to ``target`` that posts error replies only (others are logged at debug level)."""
        send = SlackSend(self.outbox, target)

        async def errors_only(reply: Reply) -> None:
            if reply.kind is ReplyKind.ERROR:
                await send(reply)
            else:
                log.debug("not posted in %s (the feedback form speaks instead): %.80r", target.channel, reply.text)

        return errors_only

    # -- the feedback form a 👎 opens -------------------------------------------------------

    async def _open_feedback_form(self, body: Mapping[str, Any], answer_id: str) -> None:
        """Opens the feedback form about ``answer_id`` for the person who clicked 👎. Nothing
        slow comes before ``views.open`` (the trigger expires 3 s after the click); a refusal
        is logged under a reference and the person told (their 👎 is recorded anyway)."""
        origin = translate.action_origin(body)
        trigger = str(body.get("trigger_id") or "")
        view = translate.feedback_view(origin, answer_id)
        if not trigger or view is None:
            log.warning("a 👎 on answer %s in %s opens no feedback form: %s", answer_id[:80], origin.channel,
                        "no trigger_id" if not trigger else "its metadata is over Slack's limit")
            return
        try:
            await self.client.views_open(trigger_id=trigger, view=view)
        except slack_web.TRANSPORT_ERRORS as exc:
            code, reference = slack_web.error_code(exc), new_reference()
            log.warning("opening the feedback form on answer %s in %s failed: %s (reference %s)",
                        answer_id, origin.channel, code, reference)
            target = Target(origin.channel, origin.user, thread=origin.thread_ts,
                            response_url=str(body.get("response_url") or ""))
            await self.outbox.note(target, origin.thread_ts,
                                   translate.api_failure_text(code, reference, "open the feedback form"))

    async def _view(self, body: Mapping[str, Any]) -> None:
        """A submitted feedback form, given to the handler as a ``Feedback`` (its reply, private,
        goes to the person as an ephemeral message in the answer's thread). A form that cannot
        be read is dropped with a log line."""
        form = translate.submission(body)
        if form is None:
            view = body.get("view")
            callback = view.get("callback_id") if isinstance(view, Mapping) else None
            log.warning("a view submission (callback %r) that is no readable feedback form was dropped",
                        str(callback)[:80])
            return
        origin = form.origin
        target = Target(origin.channel, origin.user, thread=origin.thread_ts)
        async with self._reporting(target, "feedback"):
            person = await self.people.get(origin.user)
            await self._handle(translate.feedback(form, person), target)
