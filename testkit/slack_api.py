"""A stand-in for Slack on 127.0.0.1, for the real slack-bolt and slack_sdk to talk to.

One aiohttp server (port chosen by the system) plays every part of Slack the
adapter meets:

* the **Web API** under ``/api/`` (``auth.test``, ``apps.connections.open``,
  ``chat.postMessage``/``postEphemeral``/``getPermalink``,
  ``conversations.replies``/``history``/``open``/``info`` (Slack Connect channels: :meth:`SlackStandIn.share_channel`), ``users.info`` (guests of another organisation: ``add_user(team=...)``),
  ``reactions.add``/``remove``, ``files.info``, ``views.open`` (a modal's basic shape checked),
  ``files.getUploadURLExternal`` + the upload URL + ``files.completeUploadExternal``,
  the assistant container's ``assistant.threads.setStatus``/``setTitle``/``setSuggestedPrompts``,
  ``users.conversations`` and its events (:class:`AssistantContainer`),
  and for streamed answers ``chat.startStream``/``appendStream``/``stopStream``,
  ``chat.update`` and ``chat.delete``; :attr:`SlackStandIn.streaming_refusal` refuses
  streaming, :attr:`SlackStandIn.update_limit` rate-limits updates with HTTP 200
  ``ok: false, "ratelimited"`` as Slack does),
  checking the bearer token as Slack does and recording every call with the
  time it arrived;
* **message limits as Slack enforces them**: over 50 blocks, a section or
  context text over 3,000 characters, markdown blocks over 12,000 characters
  together, a duplicate block id, oversized buttons, a malformed ``context_actions``
  block (Slack's native ``feedback_buttons``, also in ``chat.stopStream``'s ``blocks``)
  → ``invalid_blocks``; a
  ``text`` over 40,000 characters → ``msg_too_long``;
* **file downloads** (``/files-pri/...``): the bytes for the bot token, and,
  like Slack, a 200 *HTML sign-in page* for any other token;
* **Socket Mode**: ``/link`` is the websocket ``apps.connections.open`` hands
  out; envelopes are pushed to the app and its acknowledgements awaited; like
  Slack, it pings the app every :attr:`SlackStandIn.ping_every_s` and answers the
  app's pings; :meth:`SlackStandIn.go_silent` makes the open sockets stop
  delivering (no envelope, no ping of its own) while they stay open and still
  answer pings, and :attr:`SlackStandIn.connections` counts the sockets opened;
* the **Events API sender** for an app in HTTP mode: payloads POSTed with
  ``X-Slack-Signature`` computed as Slack does (``v0=`` + HMAC-SHA256 of
  ``v0:{timestamp}:{body}`` with the signing secret), retries marked with
  ``X-Slack-Retry-Num``;
* ``response_url`` endpoints (``/respond/<n>``) recording what is sent there.

It keeps a small workspace (users, the messages of each conversation,
files) so that what the bot posts can be read back by ``conversations.replies``
as on Slack. The helpers ``user_says``, ``share_file``, ``pin``, ``unpin``,
``slash``, ``click``, ``click_feedback`` (the native 👍/👎) and ``submit_view`` do what a person does and deliver the events Slack
would send for it, over the socket or over HTTP (:attr:`SlackStandIn.mode`).

The parts, one module each, which :class:`SlackStandIn` inherits: the workspace
(:mod:`testkit.slack_workspace`), Slack's checks of messages and modals
(:mod:`testkit.slack_limits`), the Web API (:mod:`testkit.slack_web_api`) with streaming and
edits (:mod:`testkit.slack_streaming`), Socket Mode (:mod:`testkit.slack_socket_mode`), the
deliveries to the app (:mod:`testkit.slack_events`), what people do
(:mod:`testkit.slack_people`) and the assistant container (:mod:`testkit.slack_assistant`).
This module joins them and runs their server, and runs the real adapter against it
(:func:`app_running`); tests and benchmarks import everything from here.

Nothing here reaches beyond 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Self

import aiohttp
from aiohttp import web

from testkit.slack_assistant import (
    MAX_SUGGESTED_PROMPTS,
    AssistantContainer,
    StandInCore,
    assistant_event,
    assistant_problem,
)
from testkit.slack_events import SlackEvents, sign
from testkit.slack_limits import (
    MAX_ACTION_ELEMENTS,
    MAX_ACTION_ID,
    MAX_BLOCK_ID,
    MAX_BLOCKS,
    MAX_BUTTON_TEXT,
    MAX_BUTTON_VALUE,
    MAX_CONTEXT_ACTIONS,
    MAX_CONTEXT_ELEMENTS,
    MAX_MARKDOWN_TEXT,
    MAX_SECTION_TEXT,
    MAX_STREAM_TEXT,
    MAX_TEXT,
    as_slack_keeps,
    context_actions_ok,
    feedback_element,
    message_problem,
    stop_blocks_problem,
    view_problem,
)
from testkit.slack_people import SlackPeople
from testkit.slack_socket_mode import ACK_TIMEOUT_S, SERVER_PING_S, Delivery, SlackSocketMode
from testkit.slack_streaming import SlackStreaming
from testkit.slack_web_api import LOGIN_PAGE, ApiCall, SlackWebApi
from testkit.slack_workspace import (
    APP_ID,
    APP_TOKEN,
    BOT_ID,
    BOT_TOKEN,
    BOT_USER,
    SIGNING_SECRET,
    TEAM,
    SlackWorkspace,
)
from testkit.valkey import free_port

# What tests and benchmarks import from here: every public name of the parts, so that no
# importer needs to know which module holds it.
__all__ = [
    "ACK_TIMEOUT_S", "APP_ID", "APP_TOKEN", "BOT_ID", "BOT_TOKEN", "BOT_USER", "LOGIN_PAGE", "MAX_ACTION_ELEMENTS",
    "MAX_ACTION_ID", "MAX_BLOCKS", "MAX_BLOCK_ID", "MAX_BUTTON_TEXT", "MAX_BUTTON_VALUE", "MAX_CONTEXT_ACTIONS",
    "MAX_CONTEXT_ELEMENTS", "MAX_MARKDOWN_TEXT", "MAX_SECTION_TEXT", "MAX_STREAM_TEXT", "MAX_SUGGESTED_PROMPTS",
    "MAX_TEXT", "SERVER_PING_S", "SIGNING_SECRET", "TEAM", "ApiCall", "AssistantContainer", "Delivery",
    "SlackEvents", "SlackPeople", "SlackSocketMode", "SlackStandIn", "SlackStreaming", "SlackWebApi",
    "SlackWorkspace", "StandInCore", "app_running", "as_slack_keeps", "assistant_event", "assistant_problem",
    "context_actions_ok", "feedback_element", "free_port", "lines_of", "message_problem", "sign", "slack_config",
    "stop_blocks_problem", "view_problem",
]


class SlackStandIn(AssistantContainer, SlackPeople, SlackStreaming):
    """See the module docstring. ``async with SlackStandIn() as slack: ...`` starts and stops it."""

    def __init__(self, *, bot_token: str = BOT_TOKEN, app_token: str = APP_TOKEN,
                 signing_secret: str = SIGNING_SECRET, team: str = TEAM) -> None:
        super().__init__(bot_token=bot_token, app_token=app_token, signing_secret=signing_secret, team=team)
        # Each part sets up its own state; the workspace's constructor above holds the shared one.
        self.init_web_api()
        self.init_socket_mode()
        self.init_events()
        self._runner: web.AppRunner | None = None
        self.init_assistant()

    # -- life cycle -----------------------------------------------------------------

    async def start(self) -> Self:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/api/{method}", self._api)
        app.router.add_get("/link", self._socket)
        app.router.add_get("/files-pri/{path:.*}", self._download)
        app.router.add_post("/upload/{file_id}", self._receive_upload)
        app.router.add_post("/respond/{n}", self._respond)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        self._session = aiohttp.ClientSession()
        return self

    async def stop(self) -> None:
        for socket in self._sockets:
            await socket.ws.close()
        if self._session is not None:
            await self._session.close()
        if self._runner is not None:
            await self._runner.cleanup()

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


def lines_of(posts: Sequence[Mapping[str, Any]]) -> str:
    """The fallback texts of posted messages, joined (for assertions)."""
    return "\n".join(str(p.get("text", "")) for p in posts)


# -- running the real adapter against the stand-in ---------------------------------------------


def slack_config(slack: SlackStandIn, mode: str, command: str = "/raptor") -> Any:
    """A ``SlackConfig`` pointing the adapter at the stand-in (HTTP mode on a free loopback port)."""
    from bot.config import SlackConfig

    return SlackConfig.model_validate({
        "bot_token": slack.bot_token, "app_token": slack.app_token, "signing_secret": slack.signing_secret,
        "mode": mode, "api_base_url": slack.base_url, "http_host": "127.0.0.1", "http_port": free_port(),
        "command": command,
    })


@contextlib.asynccontextmanager
async def app_running(bot: Any, slack: SlackStandIn, mode: str, **options: Any) -> AsyncIterator[Any]:
    """Runs ``adapters.slack.app.run_slack`` for ``bot`` against ``slack`` in ``mode`` (the
    stand-in delivers events the same way), yields the ``SlackRunning`` it reported, and
    cancels it at the end (re-raising anything it raised)."""
    from adapters.slack.app import run_slack

    ready: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    config = options.pop("config", None) or slack_config(slack, mode)
    task = asyncio.create_task(run_slack(bot, config, on_ready=ready.set_result, **options))
    done, _ = await asyncio.wait({task, ready}, timeout=15, return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        task.result()  # raises what run_slack raised
    if ready not in done:
        task.cancel()
        raise TimeoutError("the Slack app did not become ready")
    running = ready.result()
    slack.mode = mode
    slack.app_url = running.url
    if mode == "socket":
        await slack.wait_connected()
    try:
        yield running
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
