"""Slash commands, clicks on the bot's buttons, and the feedback form a 👎 opens, on Slack.

Contract: a slash command is seen by nobody else, so ``/raptor ask`` shows the question
in the channel first and is answered in a thread under it. A click arrives read once
(:class:`~adapters.slack.interactions.Click`); its person is looked up, and its event
handed over. A 👎 also opens the feedback form (:func:`open_feedback_form`, started at
once, as the click's ``trigger_id`` expires 3 s after the click), and the form then
speaks instead of the vote's thanks: only an error about the vote is posted. A refused
form is logged under a reference and the person told; their 👎 is recorded anyway. A
submitted form arrives read once (:class:`~adapters.slack.feedback_form.Submission`) and
becomes a :class:`~bot.neutral.Feedback`, whose private reply is an ephemeral message in
the answer's thread.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from adapters.slack import translate, web as slack_web
from adapters.slack.assistant_flows import answering_key
from adapters.slack.blocks import render_question
from adapters.slack.core import HandlingCore
from adapters.slack.outbox import Target
from adapters.slack.translate import Click, Submission
from bot.commands import ASK
from bot.errors import new_reference
from bot.neutral import Reply, ReplyKind, Send

log = logging.getLogger(__name__)


async def slash_command(core: HandlingCore, body: Mapping[str, Any]) -> None:
    """``/raptor ...``, answered through its ``response_url`` when the bot cannot post."""
    origin = translate.slash_origin(body, core.identity.team_id)
    target = Target(origin.channel, origin.user, response_url=str(body.get("response_url") or ""))
    async with core.reporting(target, "a slash command"):
        person = await core.people.get(origin.user)
        command = translate.command(body, person, core.identity.team_id)
        thread = ""
        if command.name == ASK and command.argument:
            # A slash command is seen by nobody else: the question is shown in the channel,
            # and answered in a thread under it (where follow-ups then work as usual).
            thread = await _show_question(core, target, command.argument)
            if not thread:
                return
            command = replace(command, thread=thread)
        await core.handle(command, replace(target, thread=thread), thread)


async def _show_question(core: HandlingCore, target: Target, text: str) -> str:
    """Posts the question asked with the slash command; its ts, or empty (reported) on failure."""
    try:
        first = ""
        for message in render_question(target.user, text):
            ts = await core.outbox.post(target, message, first)
            first = first or ts
        return first
    except slack_web.TRANSPORT_ERRORS as exc:
        await core.outbox.report(target, "", "a question's echo", exc)
        return ""


async def clicked(core: HandlingCore, click: Click) -> None:
    """A click on one of the bot's buttons, handed over as its event by the person who clicked."""
    target = _reply_target(click)
    async with core.reporting(target, "a button"):
        person = await core.people.get(click.origin.user)
        event = click.event(person, await answering_key(core, click.origin))
        if click.form_answer:
            # The form it opened answers a 👎: the vote's own thanks would be a second message.
            await core.handle(event, target, send=_errors_only(core, target))
            return
        await core.handle(event, target)


def _reply_target(click: Click) -> Target:
    """Where replies to a click go: the clicked message's thread, or its ``response_url``."""
    origin = click.origin
    return Target(origin.channel, origin.user, thread=origin.thread_ts, response_url=click.response_url)


def _errors_only(core: HandlingCore, target: Target) -> Send:
    """A ``send`` to ``target`` that posts error replies only (others are logged at debug level)."""
    send = core.send_to(target)

    async def errors_only(reply: Reply) -> None:
        if reply.kind is ReplyKind.ERROR:
            await send(reply)
        else:
            log.debug("not posted in %s (the feedback form speaks instead): %.80r", target.channel, reply.text)

    return errors_only


async def open_feedback_form(core: HandlingCore, click: Click) -> None:
    """Opens the feedback form about the 👎's answer for the person who clicked. Nothing
    slow comes before ``views.open`` (the trigger expires 3 s after the click); a refusal
    is logged under a reference and the person told (their 👎 is recorded anyway)."""
    origin, answer_id = click.origin, click.form_answer
    view = translate.feedback_view(origin, answer_id)
    if not click.trigger_id or view is None:
        log.warning("a 👎 on answer %s in %s opens no feedback form: %s", answer_id[:80], origin.channel,
                    "no trigger_id" if not click.trigger_id else "its metadata is over Slack's limit")
        return
    try:
        await core.client.views_open(trigger_id=click.trigger_id, view=view)
    except slack_web.TRANSPORT_ERRORS as exc:
        code, reference = slack_web.error_code(exc), new_reference()
        log.warning("opening the feedback form on answer %s in %s failed: %s (reference %s)",
                    answer_id, origin.channel, code, reference)
        await core.outbox.note(_reply_target(click), origin.thread_ts,
                               translate.api_failure_text(code, reference, "open the feedback form"))


async def feedback_submitted(core: HandlingCore, form: Submission) -> None:
    """A submitted feedback form, given to the handler as a ``Feedback`` (its reply, private,
    goes to the person as an ephemeral message in the answer's thread)."""
    origin = form.origin
    target = Target(origin.channel, origin.user, thread=origin.thread_ts)
    async with core.reporting(target, "feedback"):
        person = await core.people.get(origin.user)
        await core.handle(translate.feedback(form, person, await answering_key(core, origin)), target)
