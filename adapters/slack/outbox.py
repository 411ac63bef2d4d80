"""Posting replies to Slack: where they go (:class:`Target`) and how (:class:`Outbox`).

Contract: :class:`Outbox` never raises for Slack's or the network's failures when it
delivers a reply: it logs one line with a fresh reference and tells the person in a
short note, through the first way that works (the command's ``response_url``, an
ephemeral message, a plain message). A reply's messages are rendered by
:mod:`adapters.slack.blocks`; the ``send`` the handler gets, which can also show an
answer while it is written, is :class:`~adapters.slack.sending.SlackSend`.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.webhook.async_client import AsyncWebhookClient

from adapters.slack import translate
from adapters.slack.blocks import SlackMessage, render_reply
from adapters.slack.web import TRANSPORT_ERRORS, error_code, in_thread
from bot.errors import new_reference
from bot.neutral import Attachment, Reply

log = logging.getLogger(__name__)

NOTE_TIMEOUT_S = 10.0
NOTE_ERRORS = TRANSPORT_ERRORS + (OSError,)  # a response_url's webhook also fails with plain socket errors


@dataclass(frozen=True, slots=True)
class Target:
    """Where replies to one event go: the conversation, the person the event came from
    (ephemeral replies are theirs), the thread used when a reply names none, and the
    ``response_url`` of a slash command or a click (empty otherwise)."""

    channel: str
    user: str
    thread: str = ""
    response_url: str = ""


class Outbox:
    """Posts replies to Slack; see the module docstring for what happens when Slack refuses.
    ``team`` is the workspace's id (``auth.test``), which Slack's streaming asks for."""

    def __init__(self, client: AsyncWebClient, session: aiohttp.ClientSession, team: str = "") -> None:
        self._client = client
        self._session = session
        self.team = team

    @property
    def client(self) -> AsyncWebClient:
        return self._client

    async def deliver(self, target: Target, reply: Reply) -> None:
        """Posts the reply (its messages in order, then its attachments) in its thread, or
        in ``target.thread``; ephemeral when ``private``. Never raises for Slack's or the
        network's failures: they are logged under a reference and the person is told."""
        thread = reply.thread or target.thread
        try:
            for message in render_reply(reply):
                await self.post(target, message, thread, private=reply.private)
            for attachment in reply.attachments:
                await self.upload(target, attachment, thread, private=reply.private)
        except TRANSPORT_ERRORS as exc:
            await self.report(target, thread, f"a {reply.kind.value} reply", exc)

    async def post(self, target: Target, message: SlackMessage, thread: str = "", private: bool = False) -> str:
        """Posts one message; returns its ``ts`` (empty for an ephemeral one). Raises what the client raises."""
        arguments: dict[str, Any] = message.payload()
        if thread:
            arguments["thread_ts"] = thread
        if private:
            await self._client.chat_postEphemeral(channel=target.channel, user=target.user, **arguments)
            return ""
        # No unfurling: a citation's link must not grow a preview under every answer.
        response = await self._client.chat_postMessage(
            channel=target.channel, unfurl_links=False, unfurl_media=False, **arguments
        )
        return str(response.get("ts") or "")

    async def upload(self, target: Target, attachment: Attachment, thread: str, private: bool) -> None:
        """Uploads one file of a reply. Raises what the client raises."""
        channel = target.channel
        if private:
            # Files cannot be ephemeral: a private picture goes to the person's direct conversation.
            opened = await self._client.conversations_open(users=target.user)
            channel = str((opened.get("channel") or {}).get("id") or "")
            thread = ""
        await self._client.files_upload_v2(
            channel=channel,
            thread_ts=thread or None,
            file=attachment.data,
            filename=attachment.filename,
            title=attachment.filename,
        )

    async def report(self, target: Target, thread: str, what: str, error: BaseException) -> None:
        """Logs a failure to deliver ``what`` under a new reference and tells the person."""
        code = error_code(error)
        reference = new_reference()
        log.error(
            "delivering %s to %s failed: %s (reference %s)", what, target.channel, code, reference,
            exc_info=not isinstance(error, SlackApiError),
        )
        await self.note(target, thread, translate.posting_failure_text(code, reference))

    async def note(self, target: Target, thread: str, text: str) -> bool:
        """Tells the person ``text`` (plain, short) by the first way that works; False if none did."""
        for attempt in (self._by_response_url, self._by_ephemeral, self._by_message):
            try:
                if await asyncio.wait_for(attempt(target, thread, text), NOTE_TIMEOUT_S):
                    return True
            except NOTE_ERRORS as exc:
                log.info("telling %s in %s by %s failed: %s", target.user, target.channel, attempt.__name__,
                         error_code(exc))
        log.error("could not tell anyone in %s: %s", target.channel, text)
        return False

    async def _by_response_url(self, target: Target, thread: str, text: str) -> bool:
        # A slash command's or a click's response_url works even where the bot is no member.
        if not target.response_url:
            return False
        webhook = AsyncWebhookClient(target.response_url, session=self._session, timeout=int(NOTE_TIMEOUT_S))
        response = await webhook.send(text=text, response_type="ephemeral", replace_original=False)
        return response.status_code == 200

    async def _by_ephemeral(self, target: Target, thread: str, text: str) -> bool:
        if not target.user:
            return False
        await self._client.chat_postEphemeral(channel=target.channel, user=target.user, text=text, **in_thread(thread))
        return True

    async def _by_message(self, target: Target, thread: str, text: str) -> bool:
        await self._client.chat_postMessage(channel=target.channel, text=text, **in_thread(thread))
        return True
