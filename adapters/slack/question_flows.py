"""Questions on Slack: a mention of the bot (or a direct message), and a follow-up in a
thread the bot answered in.

Contract: a question is answered in its thread (or a new one under it), with the thread's
earlier messages as its context; a thread Slack will not give is logged and the question
answered without it. A follow-up needs the thread to tell whether the bot answered there:
without it, it is left unanswered (logged). Every reply in a thread also reaches the
thread's pinned source, if its root is one (:func:`~adapters.slack.source_flows.thread_grew`).
While a question is worked on, its thread's status line says the stage, where Slack allows
one, and is cleared at the end whatever happened (:meth:`~adapters.slack.assistant_web.AssistantWeb.working`).
Questions in the assistant container are :mod:`adapters.slack.assistant_flows`'.
"""

from __future__ import annotations

import logging

from adapters.slack import translate, web as slack_web
from adapters.slack.assistant_web import StatusSlackSend
from adapters.slack.core import HandlingCore
from adapters.slack.outbox import Target
from adapters.slack.source_flows import thread_grew
from adapters.slack.translate import Asked, FollowUp, Origin

log = logging.getLogger(__name__)


async def asked(core: HandlingCore, arrival: Asked) -> None:
    """A question addressed to the bot, answered in ``arrival.reply_thread``, its stages in the
    thread's status line meanwhile."""
    origin = arrival.origin
    target = Target(origin.channel, origin.user, thread=arrival.reply_thread)
    async with core.assistant.working(origin.channel, arrival.reply_thread) as status:
        async with core.reporting(target, "a question"):
            person = await core.people.get(origin.user)
            context: tuple[str, ...] = ()
            if origin.thread_ts:
                context = await thread_context(core, origin)
            send = StatusSlackSend(core.outbox, target, status)
            await core.handle(translate.question(arrival, person, context), target, origin.ts, send)


async def thread_context(core: HandlingCore, origin: Origin) -> tuple[str, ...]:
    """The thread's earlier messages; none (logged) when Slack will not give them."""
    try:
        messages = await slack_web.thread_messages(core.client, origin.channel, origin.thread_ts)
    except slack_web.TRANSPORT_ERRORS as exc:
        log.warning("reading thread %s in %s failed (%s): answering without its context",
                    origin.thread_ts, origin.channel, slack_web.error_code(exc))
        return ()
    return translate.thread_context(messages, origin.ts, core.identity)


async def follow_up(core: HandlingCore, arrival: FollowUp) -> None:
    """A message in a thread, not addressed to the bot: a question when the bot answered there."""
    origin = arrival.origin
    try:
        messages = await slack_web.thread_messages(core.client, origin.channel, origin.thread_ts)
    except slack_web.TRANSPORT_ERRORS as exc:
        # Not addressed to the bot: without the thread there is no telling it was meant for it.
        log.warning("reading thread %s in %s failed (%s): a possible follow-up is left unanswered",
                    origin.thread_ts, origin.channel, slack_web.error_code(exc))
        return
    await thread_grew(core, origin, messages)
    if not translate.bot_answered(messages, core.identity):
        log.debug("message %s in thread %s: the bot has not answered there", origin.ts, origin.thread_ts)
        return
    target = Target(origin.channel, origin.user, thread=origin.thread_ts)
    async with core.assistant.working(origin.channel, origin.thread_ts) as status:
        async with core.reporting(target, "a follow-up question"):
            person = await core.people.get(origin.user)
            context = translate.thread_context(messages, origin.ts, core.identity)
            send = StatusSlackSend(core.outbox, target, status)
            await core.handle(translate.question(arrival, person, context), target, origin.ts, send)
