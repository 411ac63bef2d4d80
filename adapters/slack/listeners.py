"""slack-bolt's ``AsyncApp`` for the bot: its middleware and its listeners.

How a request reaches :class:`~adapters.slack.handling.SlackHandling` (:func:`build_app` wires it):

1. bolt receives it: a Socket Mode envelope, or (HTTP mode) a POST whose ``v0``
   signature and timestamp were verified before its body was read
   (:mod:`adapters.slack.endpoint`; a bad or more than 5 minutes old one gets 401, and
   nothing runs);
2. ``app_rate_limited`` (Slack is dropping the app's events: it has no inner event) is
   logged as a warning and acknowledged;
3. a global middleware asks :meth:`~adapters.slack.handling.SlackHandling.first_delivery`
   and drops an Events API delivery seen already, by this replica or another (Slack's
   retries, told by ``X-Slack-Retry-Num``), with a bare 200;
4. the listener acknowledges at once (bolt acks events before the listener runs;
   slash commands, clicks and form submissions call ``ack()`` first — an empty
   acknowledgement of a ``view_submission`` closes the modal) and hands the payload to
   the handling, which starts a background task and returns.

The signing secret comes only from :class:`~bot.config.SlackConfig`: bolt is given it
explicitly (empty in Socket Mode), so its environment fallback never applies.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Coroutine
from typing import Any

from slack_bolt.app.async_app import AsyncApp
from slack_bolt.logger import get_bolt_logger
from slack_bolt.logger.messages import warning_client_prioritized_and_token_skipped
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse

from adapters.slack import translate
from adapters.slack.assistant_events import ASSISTANT_EVENTS
from adapters.slack.handling import SlackHandling
from adapters.slack.removals import FOLLOWED_EVENTS
from bot.config import SlackConfig

log = logging.getLogger(__name__)

HANDLED_EVENTS = ("app_mention", "message", "file_shared", "pin_added", "pin_removed", *ASSISTANT_EVENTS,
                  *FOLLOWED_EVENTS)

class _ClientTokenNotice(logging.Filter):
    """Drops bolt's warning that a token is unused because a client was given.

    bolt reads ``SLACK_BOT_TOKEN`` from the environment whenever no token is
    passed, and warns when a client is passed too; the adapter passes its own
    client, built with the configured token, so with the usual environment
    variable set every start would log a warning about nothing.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != warning_client_prioritized_and_token_skipped()


def build_app(handling: SlackHandling, config: SlackConfig) -> AsyncApp:
    """The ``AsyncApp`` with the middleware and listeners of ``handling``. HTTP mode verifies
    request signatures with the configured secret; Socket Mode needs none."""
    http = config.mode == "http"
    bolt_log = get_bolt_logger(AsyncApp)
    if not any(isinstance(f, _ClientTokenNotice) for f in bolt_log.filters):
        bolt_log.addFilter(_ClientTokenNotice())
    app = AsyncApp(
        name="raptor",
        client=handling.client,
        # Explicit even when empty, so bolt never falls back to SLACK_SIGNING_SECRET.
        signing_secret=config.signing_secret.get_secret_value() if http else "",
        request_verification_enabled=http,
        process_before_response=False,
    )

    async def note_rate_limits(body: dict[str, Any],
                               next: Callable[[], Coroutine[Any, Any, None]]) -> BoltResponse | None:
        if body.get("type") == "app_rate_limited":
            log.warning("Slack: app_rate_limited: Slack is dropping this app's events from team %s "
                        "(minute %s); events are missed until it stops", body.get("team_id"),
                        body.get("minute_rate_limited"))
            return BoltResponse(status=200, body="")
        return await next()  # type: ignore[func-returns-value]

    async def drop_repeats(body: dict[str, Any], request: AsyncBoltRequest,
                           next: Callable[[], Coroutine[Any, Any, None]]) -> BoltResponse | None:
        retry = (request.headers.get("x-slack-retry-num") or [""])[0]
        retry = "" if retry == "0" else retry  # Socket Mode says 0 for a first delivery
        started = time.perf_counter()
        if not await handling.first_delivery(body, retry):
            return BoltResponse(status=200, body="")
        try:
            return await next()  # type: ignore[func-returns-value]
        finally:
            # Listeners only start work and acknowledge: this is the time to Slack's acknowledgement.
            handling.bot.metrics.observe_ack("slack", time.perf_counter() - started)

    async def on_event(body: dict[str, Any]) -> None:
        handling.on_event(body)

    async def on_command(ack: Callable[..., Coroutine[Any, Any, None]], body: dict[str, Any]) -> None:
        await ack()
        handling.on_command(body)

    async def on_action(ack: Callable[..., Coroutine[Any, Any, None]], body: dict[str, Any]) -> None:
        await ack()
        handling.on_action(body)

    async def on_view(ack: Callable[..., Coroutine[Any, Any, None]], body: dict[str, Any]) -> None:
        await ack()  # closes the modal at once; the handling drops (and logs) a submission it cannot read
        handling.on_view(body)

    async def ignore_event(event: dict[str, Any]) -> None:
        log.debug("Slack: ignoring a %s event", event.get("type"))

    app.middleware(note_rate_limits)
    app.middleware(drop_repeats)
    for event_type in HANDLED_EVENTS:
        app.event(event_type)(on_event)
    app.event(re.compile(".*"))(ignore_event)  # last: bolt runs the first listener that matches
    app.command(config.command)(on_command)
    app.action(re.compile(f"^{re.escape(translate.ACTION_PREFIX)}"))(on_action)
    # Every view_submission of ours (callback ids share the prefix): an unknown one is acknowledged and logged.
    app.view(re.compile(f"^{re.escape(translate.ACTION_PREFIX)}"))(on_view)
    return app
