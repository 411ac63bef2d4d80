"""Slack's assistant container (the AI app side panel): a thread opened, the channel viewed
beside it, and the questions asked there.

Contracts (the decisions are the bot's: ``bot.assistant_threads`` through
``Assistant.assistant_threads``; the wording is :mod:`bot.replies`'):

* :func:`thread_viewed`: the channel a person views beside a thread (from
  ``assistant_thread_started`` and ``assistant_thread_context_changed``) is kept in the bot's
  thread state (Redis when coordinated). A new thread gets at least three suggested prompts,
  asked within :data:`PROMPTS_WITHIN_S` of the event: the viewed channel's lookups (its name,
  the person's membership) get :data:`LOOKUPS_WITHIN_S`, after which the general prompts go
  alone;
* :func:`asked_in_container`: the first question titles the thread; the status line says
  "reading" at once, then the bot's stages, and is cleared at the end whatever happened; the
  question is answered from the viewed channel's tree only when the asker is a member of that
  channel (``users.conversations``); otherwise the reply says so and nothing is searched; with
  no channel viewed, the direct conversation's own material answers, as for any direct message;
* :func:`answering_key`: a click on an answer there (a vote, a summary's children, the 👎 form)
  is about the channel that answered, not the direct conversation it sits in.
"""

from __future__ import annotations

import asyncio
import logging

from adapters.slack import translate
from adapters.slack.assistant_events import ThreadViewed, assistant_thread_id
from adapters.slack.assistant_web import StatusSlackSend, set_prompts, set_title
from adapters.slack.core import HandlingCore
from adapters.slack.outbox import Target
from adapters.slack.payload import Origin, channel_key, is_direct
from adapters.slack.question_flows import thread_context
from adapters.slack.translate import Asked
from bot import replies
from bot.neutral import ChannelKey, Question, Reply, ReplyKind, Scope

log = logging.getLogger(__name__)

PROMPTS_WITHIN_S = 3.0  # what the issue asks of a new thread's prompts
LOOKUPS_WITHIN_S = 1.5  # of which the viewed channel's lookups may take this much


async def thread_viewed(core: HandlingCore, viewed: ThreadViewed) -> None:
    """A thread opened, or the channel viewed beside it changed; see the module docstring."""
    threads = core.bot.assistant_threads
    # Both events are handled at once, each in a task of its own: the state keeps the view of
    # the latest event by its time, whichever is handled last. A new thread viewing nothing
    # has nothing to keep besides (and, should its payload lack a time, nothing to undo).
    if viewed.viewed or not viewed.started:
        await threads.state.set_viewed(viewed.thread_id, viewed.viewed, viewed.at)
    if not viewed.started:
        log.debug("assistant thread %s: now viewed beside %r", viewed.thread_id, viewed.viewed)
        return
    key, name, member = None, "", False
    if viewed.viewed:
        try:
            name, member = await asyncio.wait_for(_viewed_channel(core, viewed.user, viewed.viewed), LOOKUPS_WITHIN_S)
            key = channel_key(core.identity.team_id, viewed.viewed)
        except TimeoutError:
            log.info("assistant thread %s: %s could not be looked up in time; general prompts only",
                     viewed.thread_id, viewed.viewed)
    prompts = await threads.prompts(key, name, member)
    await set_prompts(core.client, viewed.channel, viewed.thread_ts, replies.PROMPTS_TITLE,
                      [(p.title, p.message) for p in prompts])


async def _viewed_channel(core: HandlingCore, user: str, channel: str) -> tuple[str, bool]:
    """The viewed channel's name, and whether ``user`` is a member of it."""
    name, member = await asyncio.gather(core.assistant.names.name(channel),
                                        core.assistant.memberships.is_member(user, channel))
    return name, member


async def asked_in_container(core: HandlingCore, arrival: Asked) -> None:
    """A question in an assistant thread; see the module docstring."""
    origin = arrival.origin
    target = Target(origin.channel, origin.user, thread=origin.thread_ts)
    threads = core.bot.assistant_threads
    thread_id = assistant_thread_id(core.identity.team_id, origin.channel, origin.thread_ts)
    async with core.assistant.working(origin.channel, origin.thread_ts) as status:
        async with core.reporting(target, "a question in the assistant container"):
            if await threads.state.first_question(thread_id):
                await set_title(core.client, origin.channel, origin.thread_ts, threads.title(arrival.text))
            viewed = await threads.state.viewed(thread_id)
            member = bool(viewed) and await core.assistant.memberships.is_member(origin.user, viewed)
            scope = threads.scope(viewed, member)
            name = await core.assistant.names.name(viewed) if viewed else ""
            if scope is Scope.NOT_A_MEMBER:
                log.info("assistant thread %s: %s is no member of %s: answered from nothing", thread_id,
                         origin.user, viewed)
                await core.outbox.deliver(target, Reply(ReplyKind.INFO, replies.not_a_member_text(name),
                                                        thread=origin.thread_ts))
                return
            status.searched = name
            person = await core.people.get(origin.user)
            context = await thread_context(core, origin)
            question = translate.question(arrival, person, context)
            if scope is Scope.VIEWED:
                question = Question(channel_key(core.identity.team_id, viewed), person, arrival.text,
                                    thread=origin.thread_ts, context=context)
                await threads.state.set_answered(thread_id, viewed)
            await core.handle(question, target, origin.ts, StatusSlackSend(core.outbox, target, status))


async def answering_key(core: HandlingCore, origin: Origin) -> ChannelKey:
    """The channel whose material answered in ``origin``'s thread, for a click or a form about
    an answer there: in an assistant thread (a direct conversation's thread), the channel its
    latest answer came from (recorded by :func:`asked_in_container`); anywhere else, where it is."""
    if not (origin.thread_ts and is_direct(origin.channel)):
        return origin.key
    thread_id = assistant_thread_id(core.identity.team_id, origin.channel, origin.thread_ts)
    answered = await core.bot.assistant_threads.state.answered(thread_id)
    return channel_key(core.identity.team_id, answered) if answered else origin.key
