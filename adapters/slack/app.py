"""Running the Slack adapter: :func:`run_slack`, and :class:`SlackAdapter` for the
composition root.

:func:`run_slack` checks the bot token (``auth.test``), builds the
:class:`~adapters.slack.handling.SlackHandling` and the ``AsyncApp``
(:func:`~adapters.slack.listeners.build_app`), then serves in ``slack.mode``: Socket
Mode (the app token is checked first; the session is watched by
:mod:`~adapters.slack.watchdog`), or HTTP mode behind an aiohttp server (the endpoint,
which checks each request's signature before reading it, is
:class:`~adapters.slack.endpoint.EventsEndpoint`) with a health check at
:data:`HEALTH_PATH`. Once it receives events it registers the handling's courier with the
bot (platform ``"slack"``), so replies without an event (a rebuild run by a worker
process) can be posted. It runs until cancelled, then stops receiving, lets the events
being worked on finish, and closes its connections.

Tokens and the signing secret come only from :class:`~bot.config.SlackConfig`
(bolt is given every one explicitly, so its environment fallbacks never
apply); the Web API client is built at run time by a factory, with the
configured ``api_base_url``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass

import aiohttp
from aiohttp import web
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.app.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.web.async_client import AsyncWebClient

from adapters.loop_watchdog import LoopWatchdog
from adapters.slack import web as slack_web
from adapters.slack.endpoint import EventsEndpoint
from adapters.slack.handling import DRAIN_TIMEOUT_S, MAX_CONCURRENT_EVENTS, SlackHandling
from adapters.slack.listeners import build_app
from adapters.slack.translate import PLATFORM, BotIdentity
from adapters.slack.watchdog import SocketWatchdog
from bot.config import SlackConfig
from bot.errors import BotError
from bot.runtime import Assistant

__all__ = [
    "API_TIMEOUT_S", "DRAIN_TIMEOUT_S", "HEALTH_PATH", "MAX_CONCURRENT_EVENTS", "RATE_LIMIT_RETRIES",
    "ClientFactory", "SlackAdapter", "SlackHandling", "SlackRunning",
    "build_app", "default_client", "fetch_identity", "run_slack",
]

log = logging.getLogger(__name__)

API_TIMEOUT_S = 30  # per Web API call
RATE_LIMIT_RETRIES = 2  # a 429 is retried after its Retry-After this many times
HEALTH_PATH = "/healthz"

ClientFactory = Callable[[SlackConfig, aiohttp.ClientSession], AsyncWebClient]
"""Builds the Web API client from the configuration and the adapter's HTTP session."""


def default_client(config: SlackConfig, session: aiohttp.ClientSession | None = None) -> AsyncWebClient:
    """``AsyncWebClient(bot_token, base_url=api_base_url)`` sharing ``session`` (one connection
    pool for every call), retrying rate-limited calls after Slack's ``Retry-After``."""
    base_url = config.api_base_url if config.api_base_url.endswith("/") else config.api_base_url + "/"
    client = AsyncWebClient(
        token=config.bot_token.get_secret_value(), base_url=base_url, session=session, timeout=API_TIMEOUT_S
    )
    client.retry_handlers.append(AsyncRateLimitErrorRetryHandler(max_retry_count=RATE_LIMIT_RETRIES))
    return client


@dataclass(frozen=True, slots=True)
class SlackRunning:
    """What :func:`run_slack` tells ``on_ready``: the :class:`SlackHandling` of the payloads, the
    mode, and in HTTP mode the URL Slack must be configured to post to (``http://host:port/path``)."""

    handling: SlackHandling
    mode: str
    url: str = ""


async def fetch_identity(client: AsyncWebClient) -> BotIdentity:
    """Who the bot token belongs to (``auth.test``); raises ``BotError`` saying what to fix."""
    try:
        response = await client.auth_test()
    except SlackApiError as exc:
        code = slack_web.error_code(exc)
        raise BotError(f"Slack refused slack.bot_token ({code}); check the bot token (xoxb-...)") from None
    except slack_web.TRANSPORT_ERRORS as exc:
        raise BotError(f"cannot reach Slack's Web API at {client.base_url} ({slack_web.error_code(exc)})") from exc
    return BotIdentity(
        user_id=str(response.get("user_id") or ""),
        bot_id=str(response.get("bot_id") or ""),
        team_id=str(response.get("team_id") or ""),
    )


async def run_slack(
    bot: Assistant,
    config: SlackConfig,
    *,
    client_factory: ClientFactory | None = None,
    on_ready: Callable[[SlackRunning], None] | None = None,
    max_concurrency: int = MAX_CONCURRENT_EVENTS,
    drain_timeout_s: float = DRAIN_TIMEOUT_S,
) -> None:
    """Serves Slack for a started ``bot`` until cancelled, in ``config.mode``.

    Checks the bot token first (``auth.test``; Socket Mode also the app token),
    raising ``BotError`` when Slack refuses one. ``on_ready`` is called once the
    app receives events. On cancellation it stops receiving, lets events being
    worked on finish for ``drain_timeout_s``, and closes its connections; the
    caller stops the bot afterwards.
    """
    factory = client_factory or default_client
    async with aiohttp.ClientSession() as session:
        client = factory(config, session)
        identity = await fetch_identity(client)
        log.info("Slack: the bot is %s in team %s", identity.user_id, identity.team_id)
        handling = SlackHandling(bot, config, client, session, identity, max_concurrency)
        app = build_app(handling, config)
        try:
            if config.mode == "http":
                await _serve_http(app, handling, config, on_ready)
            else:
                await _serve_socket(app, handling, config, on_ready)
        finally:
            await handling.drain(drain_timeout_s)


async def _serve_socket(
    app: AsyncApp, handling: SlackHandling, config: SlackConfig, on_ready: Callable[[SlackRunning], None] | None
) -> None:
    """Socket Mode, watched (unless ``slack.socket_watchdog_s`` is 0) by a
    :class:`~adapters.slack.watchdog.SocketWatchdog`, with the event loop watched for blocks
    that would cost the socket its pongs (:class:`~adapters.loop_watchdog.LoopWatchdog`)."""
    token = config.app_token.get_secret_value()
    handler = AsyncSocketModeHandler(app, app_token=token)
    watchdog = None
    if config.socket_watchdog_s > 0:
        watchdog = SocketWatchdog(handler.client, handling.client, handling.bot.metrics, config.socket_watchdog_s)
    watching: asyncio.Task[None] | None = None
    loop_watchdog = LoopWatchdog.acquire(handling.bot.metrics)
    try:
        if watchdog is not None:
            await watchdog.install()  # before connecting: it times the frames of every socket
        # Asked here rather than by the handler, which would retry a refused token forever.
        try:
            opened = await handling.client.apps_connections_open(app_token=token)
        except SlackApiError as exc:
            code = slack_web.error_code(exc)
            raise BotError(f"Slack refused slack.app_token ({code}); it must be an xapp- token with "
                           "connections:write") from None
        handler.client.wss_uri = str(opened.get("url") or "") or None
        await handler.connect_async()
        log.info("Slack: connected in Socket Mode")
        if watchdog is not None:
            watching = asyncio.create_task(watchdog.run(), name="slack-socket-watchdog")
        _serving(handling, SlackRunning(handling, "socket"), on_ready)
        await asyncio.Event().wait()  # until cancelled
    finally:
        if watching is not None:
            watching.cancel()
            with suppress(asyncio.CancelledError):
                await watching
        loop_watchdog.release()
        await handler.close_async()


async def _serve_http(
    app: AsyncApp, handling: SlackHandling, config: SlackConfig, on_ready: Callable[[SlackRunning], None] | None
) -> None:
    async def health(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    server = web.Application()
    server.router.add_post(config.http_path, EventsEndpoint(app, config.signing_secret.get_secret_value()).handle)
    server.router.add_get(HEALTH_PATH, health)
    runner = web.AppRunner(server, access_log=None, shutdown_timeout=5.0)
    await runner.setup()
    try:
        site = web.TCPSite(runner, config.http_host, config.http_port)
        await site.start()
        host, port = _bound_address(runner, config)
        url = f"http://{host}:{port}{config.http_path}"
        log.info("Slack: HTTP mode, listening on %s", url)
        _serving(handling, SlackRunning(handling, "http", url), on_ready)
        await asyncio.Event().wait()  # until cancelled
    finally:
        await runner.cleanup()


def _serving(handling: SlackHandling, running: SlackRunning, on_ready: Callable[[SlackRunning], None] | None) -> None:
    """The app receives events: the bot may post through it, and ``on_ready`` hears of it."""
    handling.bot.add_courier(PLATFORM, handling.courier)
    if on_ready is not None:
        on_ready(running)


def _bound_address(runner: web.AppRunner, config: SlackConfig) -> tuple[str, int]:
    for address in runner.addresses:
        if isinstance(address, tuple) and len(address) >= 2:
            return str(address[0]), int(address[1])
    return config.http_host, config.http_port


class SlackAdapter:
    """The Slack adapter, the :class:`adapters.protocol.Adapter` the registry builds: serves a
    started bot with :func:`run_slack`."""

    name = "Slack"
    ends_on_its_own = False

    def __init__(self, config: SlackConfig) -> None:
        self._config = config

    async def serve(self, bot: Assistant) -> None:
        """See :func:`run_slack`."""
        await run_slack(bot, self._config)
