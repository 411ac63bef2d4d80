"""slack-bolt's ``AsyncApp`` for the bot, in Socket Mode or HTTP mode, and :func:`run_slack`.

How a request travels:

1. bolt receives it: a Socket Mode envelope, or (HTTP mode) a POST whose
   ``v0`` signature and timestamp bolt verifies (a bad or more than 5 minutes
   old one gets 401, and nothing runs);
2. :meth:`SlackAdapter.first_delivery` (a global middleware) drops an Events
   API delivery whose ``event_id`` was seen already: Slack resends events not
   acknowledged within 3 s (``X-Slack-Retry-Num``), and an event is answered
   once whatever the retries (memory bounded by :data:`SEEN_EVENTS`);
3. the listener acknowledges at once (bolt acks events before the listener
   runs; slash commands and clicks call ``ack()`` first) and hands the payload
   to :class:`SlackAdapter`, which starts a background task and returns: the
   acknowledgement never waits for the work;
4. the task classifies the payload (:mod:`adapters.slack.translate`), fetches
   what Slack did not send (:mod:`adapters.slack.web`: the person, the thread,
   the file), and gives the neutral event to ``bot.handler.handle`` with a
   ``send`` that posts Block Kit messages (:mod:`adapters.slack.blocks`).

Nothing fails silently: the handler turns its failures into ERROR replies
with a reference; failures here (Slack refusing a call, a download) are
logged under a fresh reference too, and the person gets a short note naming
it. A malformed payload is dropped with a log line; the app keeps running.

Tokens and the signing secret come only from :class:`~bot.config.SlackConfig`
(bolt is given every one explicitly, so its environment fallbacks never
apply); the Web API client is built at run time by a factory, with the
configured ``api_base_url``.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from dataclasses import dataclass, replace
from typing import Any

import aiohttp
from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.app.async_app import AsyncApp
from slack_bolt.logger import get_bolt_logger
from slack_bolt.logger.messages import warning_client_prioritized_and_token_skipped
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack import translate, web as slack_web
from adapters.slack.blocks import render_question
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
from adapters.slack.web import Downloader, DownloadError, Outbox, People, Target
from bot import replies
from bot.chat import Event, Person, Reply, ReplyKind
from bot.commands import ASK
from bot.config import SlackConfig
from bot.errors import BotError, log_failure, new_reference
from bot.runtime import Bot

log = logging.getLogger(__name__)

SEEN_EVENTS = 10_000  # event ids (and shared file ids) remembered to drop Slack's retries
MAX_CONCURRENT_EVENTS = 16  # events worked on at once; more wait (their acknowledgement does not)
DRAIN_TIMEOUT_S = 10.0  # on stop, how long events being worked on may take to finish
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


class RecentKeys:
    """The last ``size`` keys seen, to tell a first delivery from a repeated one."""

    def __init__(self, size: int = SEEN_EVENTS) -> None:
        self._size = size
        self._keys: OrderedDict[str, None] = OrderedDict()

    def add(self, key: str) -> bool:
        """Remembers ``key``; True when it was not remembered already."""
        if key in self._keys:
            self._keys.move_to_end(key)
            return False
        self._keys[key] = None
        if len(self._keys) > self._size:
            self._keys.popitem(last=False)
        return True


@dataclass(frozen=True, slots=True)
class SlackRunning:
    """What :func:`run_slack` tells ``on_ready``: the adapter, the mode, and in HTTP mode the
    URL Slack must be configured to post to (``http://host:port/path``)."""

    adapter: SlackAdapter
    mode: str
    url: str = ""


class SlackAdapter:
    """Turns Slack payloads into work for one started :class:`~bot.runtime.Bot`.

    The ``on_*`` methods are called by bolt's listeners after the acknowledgement;
    they only start a background task (bounded to ``max_concurrency`` at once) and
    return. :meth:`drain` waits for those tasks when the app stops.
    """

    def __init__(
        self,
        bot: Bot,
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
        self.outbox = Outbox(client, session)
        self.downloader = Downloader(session, config.bot_token.get_secret_value(), bot.max_upload_bytes,
                                     config.api_base_url)
        self._seen_events = RecentKeys()
        self._seen_files = RecentKeys()
        self._slots = asyncio.Semaphore(max_concurrency)
        self._tasks: set[asyncio.Task[None]] = set()

    # -- called by the listeners (after the acknowledgement) ---------------------------

    def first_delivery(self, body: Mapping[str, Any], retry: str = "") -> bool:
        """False for an Events API delivery whose ``event_id`` was seen (a retry of an event
        already being handled); True otherwise, remembering it."""
        event_id = body.get("event_id")
        if body.get("type") != "event_callback" or not isinstance(event_id, str) or not event_id:
            return True
        if self._seen_events.add(event_id):
            if retry:
                log.info("event %s arrives first as Slack's retry %s", event_id, retry)
            return True
        log.info("event %s delivered again (retry %s): answered once already", event_id, retry or "?")
        return False

    def on_event(self, body: Mapping[str, Any]) -> None:
        self.spawn(self._event(body), "slack event")

    def on_command(self, body: Mapping[str, Any]) -> None:
        self.spawn(self._command(body), "slack command")

    def on_action(self, body: Mapping[str, Any]) -> None:
        self.spawn(self._action(body), "slack action")

    # -- background tasks ---------------------------------------------------------------

    def spawn(self, work: Coroutine[Any, Any, None], name: str) -> None:
        """Runs ``work`` in a task kept until it ends (so it is neither collected nor lost at stop)."""
        task = asyncio.get_running_loop().create_task(self._bounded(work), name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _bounded(self, work: Coroutine[Any, Any, None]) -> None:
        try:
            async with self._slots:
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
            await self.bot.handler.handle(event, self.outbox.sender(target))

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
        if not translate.bot_answered(messages, self.identity):
            log.debug("message %s in thread %s: the bot has not answered there", origin.ts, origin.thread_ts)
            return
        target = Target(origin.channel, origin.user, thread=origin.thread_ts)
        async with self._reporting(target, "a follow-up question"):
            person = await self.people.get(origin.user)
            context = translate.thread_context(messages, origin.ts, self.identity)
            await self._handle(translate.question(follow_up, person, context), target, origin.ts)

    # -- sources -------------------------------------------------------------------------

    async def _files(self, origin: Origin, files: tuple[SlackFile, ...]) -> None:
        fresh = [f for f in files if self._seen_files.add(f"{origin.channel}:{f.id}")]
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
        if not self._seen_files.add(f"{origin.channel}:{notice.file_id}"):
            return  # its message (subtype file_share) brought it already
        target = Target(origin.channel, origin.user)
        async with self._reporting(target, "a shared file"):
            file = await slack_web.file_info(self.client, notice.file_id)
            if file is None:
                raise BotError(f"files.info gave no file for {notice.file_id}")
            person = await self.people.get(origin.user)
            await self._upload(origin, person, file, target)

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
            await self.bot.handler.handle(upload, self.outbox.sender(target))

    async def _pinned(self, pinned: Pinned) -> None:
        origin = pinned.origin
        target = Target(origin.channel, origin.user, thread=origin.thread_ts or origin.ts)
        async with self._reporting(target, "a pinned message"):
            person = await self.people.get(origin.user)
            text, thread_replies = await self._pinned_text(pinned)
            author = (await self.people.get(pinned.author)).label if pinned.author else ""
            link = pinned.permalink or await slack_web.permalink(self.client, origin.channel, origin.ts)
            pin = translate.pin(pinned, person, text, link, author, thread_replies)
            await self._handle(pin, target, origin.ts)

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
            await self._handle(event, target)


# -- the bolt app ------------------------------------------------------------------------


class _ClientTokenNotice(logging.Filter):
    """Drops bolt's warning that a token is unused because a client was given.

    bolt reads ``SLACK_BOT_TOKEN`` from the environment whenever no token is
    passed, and warns when a client is passed too; the adapter passes its own
    client, built with the configured token, so with the usual environment
    variable set every start would log a warning about nothing.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != warning_client_prioritized_and_token_skipped()


def build_app(adapter: SlackAdapter, config: SlackConfig) -> AsyncApp:
    """The ``AsyncApp`` with the adapter's middleware and listeners. HTTP mode verifies
    request signatures with the configured secret; Socket Mode needs none."""
    http = config.mode == "http"
    bolt_log = get_bolt_logger(AsyncApp)
    if not any(isinstance(f, _ClientTokenNotice) for f in bolt_log.filters):
        bolt_log.addFilter(_ClientTokenNotice())
    app = AsyncApp(
        name="raptor",
        client=adapter.client,
        # Explicit even when empty, so bolt never falls back to SLACK_SIGNING_SECRET.
        signing_secret=config.signing_secret.get_secret_value() if http else "",
        request_verification_enabled=http,
        process_before_response=False,
    )

    async def drop_repeats(body: dict[str, Any], request: AsyncBoltRequest,
                           next: Callable[[], Coroutine[Any, Any, None]]) -> BoltResponse | None:
        retry = (request.headers.get("x-slack-retry-num") or [""])[0]
        retry = "" if retry == "0" else retry  # Socket Mode says 0 for a first delivery
        if not adapter.first_delivery(body, retry):
            return BoltResponse(status=200, body="")
        return await next()  # type: ignore[func-returns-value]

    async def on_event(body: dict[str, Any]) -> None:
        adapter.on_event(body)

    async def on_command(ack: Callable[..., Coroutine[Any, Any, None]], body: dict[str, Any]) -> None:
        await ack()
        adapter.on_command(body)

    async def on_action(ack: Callable[..., Coroutine[Any, Any, None]], body: dict[str, Any]) -> None:
        await ack()
        adapter.on_action(body)

    app.middleware(drop_repeats)
    for event_type in ("app_mention", "message", "file_shared", "pin_added", "pin_removed"):
        app.event(event_type)(on_event)
    app.command(config.command)(on_command)
    app.action(re.compile(f"^{re.escape(translate.ACTION_PREFIX)}"))(on_action)
    return app


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
    bot: Bot,
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
        adapter = SlackAdapter(bot, config, client, session, identity, max_concurrency)
        app = build_app(adapter, config)
        try:
            if config.mode == "http":
                await _serve_http(app, adapter, config, on_ready)
            else:
                await _serve_socket(app, adapter, config, on_ready)
        finally:
            await adapter.drain(drain_timeout_s)


async def _serve_socket(
    app: AsyncApp, adapter: SlackAdapter, config: SlackConfig, on_ready: Callable[[SlackRunning], None] | None
) -> None:
    token = config.app_token.get_secret_value()
    handler = AsyncSocketModeHandler(app, app_token=token)
    try:
        # Asked here rather than by the handler, which would retry a refused token forever.
        try:
            opened = await adapter.client.apps_connections_open(app_token=token)
        except SlackApiError as exc:
            code = slack_web.error_code(exc)
            raise BotError(f"Slack refused slack.app_token ({code}); it must be an xapp- token with "
                           "connections:write") from None
        handler.client.wss_uri = str(opened.get("url") or "") or None
        await handler.connect_async()
        log.info("Slack: connected in Socket Mode")
        if on_ready is not None:
            on_ready(SlackRunning(adapter, "socket"))
        await asyncio.Event().wait()  # until cancelled
    finally:
        await handler.close_async()


async def _serve_http(
    app: AsyncApp, adapter: SlackAdapter, config: SlackConfig, on_ready: Callable[[SlackRunning], None] | None
) -> None:
    async def events(request: web.Request) -> web.Response:
        response = await app.async_dispatch(await to_bolt_request(request))
        return await to_aiohttp_response(response)

    async def health(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    server = web.Application()
    server.router.add_post(config.http_path, events)
    server.router.add_get(HEALTH_PATH, health)
    runner = web.AppRunner(server, access_log=None, shutdown_timeout=5.0)
    await runner.setup()
    try:
        site = web.TCPSite(runner, config.http_host, config.http_port)
        await site.start()
        host, port = _bound_address(runner, config)
        url = f"http://{host}:{port}{config.http_path}"
        log.info("Slack: HTTP mode, listening on %s", url)
        if on_ready is not None:
            on_ready(SlackRunning(adapter, "http", url))
        await asyncio.Event().wait()  # until cancelled
    finally:
        await runner.cleanup()


def _bound_address(runner: web.AppRunner, config: SlackConfig) -> tuple[str, int]:
    for address in runner.addresses:
        if isinstance(address, tuple) and len(address) >= 2:
            return str(address[0]), int(address[1])
    return config.http_host, config.http_port


class SlackPlatform:
    """The Slack adapter in the shape the composition root serves (:class:`adapters.protocol.Adapter`)."""

    name = "Slack"
    ends_on_its_own = False

    def __init__(self, config: SlackConfig) -> None:
        self._config = config

    async def serve(self, bot: Bot) -> None:
        """See :func:`run_slack`."""
        await run_slack(bot, self._config)
