"""What the Slack adapter does with a payload once bolt has acknowledged it.

:class:`SlackHandling` turns Slack payloads into work for one started
:class:`~bot.runtime.Assistant`; it is the platform-side piece that
:class:`~adapters.slack.app.SlackAdapter` (the :class:`~adapters.protocol.Adapter`) runs. Contract:

* the ``on_*`` methods (called by the listeners of :mod:`adapters.slack.listeners`,
  after the acknowledgement) read the payload once (:mod:`adapters.slack.translate`: an
  event's arrival, a click, a submitted form), decide, and start a background task with
  the flow it takes, then return: the acknowledgement never waits for the work. What is
  not for the bot is dropped there with a log line. At most ``max_concurrency`` tasks
  work at once; :meth:`SlackHandling.drain` waits for them when the app stops;
* :meth:`SlackHandling.first_delivery` tells an Events API delivery from Slack's
  retry of it (Slack resends events not acknowledged within 3 s, possibly to another
  replica behind the load balancer), so an event is answered once whatever the
  retries: the bot's delivery ledger (``Assistant.first_delivery``, shared by the
  replicas) remembers ``slack:event:<event_id>``. A shared file, which arrives as two
  events (its message and ``file_shared``), is taken once by ``slack:file:<channel>:<file id>``;
* Slack's assistant container (the AI app side panel: a thread opened, the channel viewed
  beside it, a question there) is :mod:`adapters.slack.assistant_flows`'; a new thread's
  event takes no slot, as its suggested prompts are due within 3 s;
* deletions (a file, a message) and channels archived, deleted or left by the bot, and
  their reverse, are read by :mod:`adapters.slack.removals` and handed to the bot's
  ``handler.follow``: nobody is answered;
* :meth:`SlackHandling.courier` posts replies to a channel without an event (a rebuild's
  progress and result that a worker process produced), as :class:`~adapters.slack.outbox.Outbox`
  posts every reply;
* each flow (:mod:`~adapters.slack.question_flows`, :mod:`~adapters.slack.source_flows`,
  :mod:`~adapters.slack.interaction_flows`, sharing :class:`~adapters.slack.core.HandlingCore`)
  fetches what Slack did not send (:mod:`adapters.slack.web`: the person, the thread;
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
from collections.abc import Coroutine, Mapping
from contextlib import nullcontext
from dataclasses import replace
from typing import Any

import aiohttp
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack import assistant_flows, interaction_flows, question_flows, removals, source_flows, translate
from adapters.slack.assistant_events import ASSISTANT_EVENTS, ThreadViewed
from adapters.slack.core import HandlingCore
from adapters.slack.outbox import Target
from adapters.slack.translate import (
    Asked,
    BotIdentity,
    FileNotice,
    FilesShared,
    FollowUp,
    Ignored,
    Pinned,
    Unpinned,
)
from bot.config import SlackConfig
from bot.neutral import Reply, ReplyAddress, Send
from bot.runtime import Assistant

log = logging.getLogger(__name__)

MAX_CONCURRENT_EVENTS = 16  # events worked on at once; more wait (their acknowledgement does not)
DRAIN_TIMEOUT_S = 10.0  # on stop, how long events being worked on may take to finish


class SlackHandling(HandlingCore):
    """Turns Slack payloads into work for one started :class:`~bot.runtime.Assistant`.

    The ``on_*`` methods are called by bolt's listeners after the acknowledgement;
    they read the payload, then only start a background task (bounded to
    ``max_concurrency`` at once) and return. :meth:`drain` waits for those tasks when
    the app stops.
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
        super().__init__(bot, config, client, session, identity)
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
        deliver = self.send_to(Target(address.channel.channel, "", thread=address.thread))

        async def send(reply: Reply) -> None:
            await deliver(replace(reply, private=False) if reply.private else reply)

        return send

    def on_event(self, body: Mapping[str, Any]) -> None:
        """An event; a new assistant thread's takes no slot (its prompts are due within 3 s)."""
        event = body.get("event")
        kind = event.get("type") if isinstance(event, Mapping) else None
        self.spawn(self._event(body), "slack event", urgent=kind in ASSISTANT_EVENTS)

    def on_command(self, body: Mapping[str, Any]) -> None:
        self.spawn(interaction_flows.slash_command(self, body), "slack command")

    def on_action(self, body: Mapping[str, Any]) -> None:
        """A click, read once: on one of the bot's buttons, its event is handed over; a 👎
        also opens the feedback form, first and without waiting for a slot (the trigger_id
        is good for 3 s after the click)."""
        click = translate.read_click(body, self.identity.team_id)
        if click is None:
            log.debug("a click that carries nothing for the bot: %.120r", body.get("actions"))
            return
        if click.form_answer:
            self.spawn(interaction_flows.open_feedback_form(self, click), "slack feedback form", urgent=True)
        self.spawn(interaction_flows.clicked(self, click), "slack action")

    def on_view(self, body: Mapping[str, Any]) -> None:
        """A submitted form, read once: the bot's feedback form is handed over; one that cannot be
        read is dropped with a log line."""
        form = translate.submission(body, self.identity.team_id)
        if form is None:
            view = body.get("view")
            callback = view.get("callback_id") if isinstance(view, Mapping) else None
            log.warning("a view submission (callback %r) that is no readable feedback form was dropped",
                        str(callback)[:80])
            return
        self.spawn(interaction_flows.feedback_submitted(self, form), "slack view submission")

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

    # -- events ------------------------------------------------------------------------

    async def _event(self, body: Mapping[str, Any]) -> None:
        """An Events API payload, classified once, then taken by its flow; a deletion or a
        channel change (:mod:`adapters.slack.removals`) is handed to the bot to follow."""
        change = removals.platform_change(body, self.identity)
        if change is not None:
            log.info("event %s: %s followed", body.get("event_id"), type(change).__name__)
            await self.bot.handler.follow(change)
            reply = removals.deleted_reply(body, self.identity)
            if reply is not None:
                await source_flows.reply_deleted(self, reply)
            return
        arrival = translate.classify_event(body, self.identity)
        if isinstance(arrival, ThreadViewed):
            await assistant_flows.thread_viewed(self, arrival)
            return
        shared = body.get("is_ext_shared_channel")
        if not isinstance(arrival, Ignored) and isinstance(shared, bool):
            self.shared.note(arrival.origin.channel, shared)  # Slack's own word, fresher than a lookup
        if isinstance(arrival, Ignored):
            log.debug("event %s ignored: %s", body.get("event_id"), arrival.reason)
        elif isinstance(arrival, Asked) and arrival.in_assistant_thread:
            await assistant_flows.asked_in_container(self, arrival)
        elif isinstance(arrival, Asked):
            await question_flows.asked(self, arrival)
        elif isinstance(arrival, FollowUp):
            await question_flows.follow_up(self, arrival)
        elif isinstance(arrival, FilesShared):
            await source_flows.files_shared(self, arrival.origin, arrival.files)
        elif isinstance(arrival, FileNotice):
            await source_flows.file_noticed(self, arrival)
        elif isinstance(arrival, Pinned):
            await source_flows.pin_added(self, arrival)
        elif isinstance(arrival, Unpinned):
            await source_flows.pin_removed(self, arrival)
