"""What every flow of the Slack handling works with: :class:`HandlingCore`.

The flows (:mod:`~adapters.slack.question_flows`, :mod:`~adapters.slack.source_flows`,
:mod:`~adapters.slack.interaction_flows`) each take one payload, already read, from its
arrival to the bot's handler; :class:`~adapters.slack.handling.SlackHandling`, a
:class:`HandlingCore` itself, starts them. The core holds what they share (the started
bot, the configuration, the Web API client, who the bot is, the people, the outbox, the
downloader) and the ways they all work:

* :meth:`HandlingCore.reporting`: any failure in the block is logged under a new
  reference, and the person told (never silent);
* :meth:`HandlingCore.working`: the working reaction on the message being worked on;
* :meth:`HandlingCore.handle`: the neutral event to ``bot.handler.handle``, replies to a
  :class:`~adapters.slack.outbox.Target` through :meth:`HandlingCore.send_to`, saying
  whether its conversation is shared with another organisation (:class:`~adapters.slack.web.SharedChannels`;
  the bot decides what that means).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext

import aiohttp
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack import translate, web as slack_web
from adapters.slack.assistant_web import AssistantWeb
from adapters.slack.downloads import Downloader
from adapters.slack.outbox import Outbox, Target
from adapters.slack.sending import SlackSend
from adapters.slack.translate import BotIdentity
from adapters.slack.web import People, SharedChannels
from bot import replies
from bot.config import SlackConfig
from bot.errors import log_failure
from bot.neutral import Event, Reply, ReplyKind, Send
from bot.runtime import Assistant

log = logging.getLogger(__name__)


class HandlingCore:
    """The bot and the Slack connections every flow uses; see the module docstring."""

    def __init__(
        self,
        bot: Assistant,
        config: SlackConfig,
        client: AsyncWebClient,
        session: aiohttp.ClientSession,
        identity: BotIdentity,
    ) -> None:
        self.bot = bot
        self.config = config
        self.client = client
        self.identity = identity
        self.people = People(client, identity.team_id)
        self.shared = SharedChannels(client)
        self.assistant = AssistantWeb(client)  # the assistant container: status lines, memberships, names
        self.outbox = Outbox(client, session, team=identity.team_id)  # streaming names the workspace
        self.downloader = Downloader(session, config.bot_token.get_secret_value(), bot.max_upload_bytes,
                                     config.api_base_url)

    def send_to(self, target: Target) -> SlackSend:
        """The ``send`` the handler gets for an event from ``target`` (it can show drafts)."""
        return SlackSend(self.outbox, target)

    @asynccontextmanager
    async def reporting(self, target: Target, what: str) -> AsyncIterator[None]:
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

    def working(self, channel: str, ts: str) -> AbstractAsyncContextManager[None]:
        """The working reaction on the message ``ts`` while the block runs (none without a ``ts``)."""
        return slack_web.working(self.client, channel, ts) if ts else nullcontext()

    async def handle(self, event: Event, target: Target, ts: str = "", send: Send | None = None) -> None:
        """Gives the event to the bot's handler, the working reaction on ``ts`` meanwhile, with
        whether its conversation is shared with another organisation. ``send`` replaces the one
        to ``target``."""
        shared = await self.shared.external(target.channel)
        async with self.working(target.channel, ts):
            await self.bot.handler.handle(event, send or self.send_to(target), shared)
