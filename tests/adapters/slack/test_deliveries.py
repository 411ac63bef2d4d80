"""What Slack really delivers, replayed through the real slack-bolt app: malformed bodies on the
signed HTTP endpoint, events the bot does not handle, and an unknown ``/raptor`` subcommand.

Slack counts every delivery not answered with 200 against an app and can turn its events off,
so every well-signed event is acknowledged, handled or not; a body that cannot be read gets
400 (after its signature was checked: an unsigned one gets 401 whatever it holds), and none
of it leaves a traceback in the log. The events' shapes are Slack's (as in slack-bolt's own
tests and Slack's event reference).
"""

from __future__ import annotations

import json
import logging
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from adapters.slack.app import SlackRunning
from bot.runtime import Assistant
from raptor_engine.engine import Engine
from testkit.slack_api import APP_ID, TEAM, SlackStandIn
from tests.adapters.slack.test_app import BEN, CHANNEL, MODES, run, settle

# Real shapes of events the bot does not subscribe to or does not act on.
UNHANDLED_EVENTS: list[dict[str, Any]] = [
    {"type": "reaction_added", "user": BEN, "reaction": "heart_eyes", "item_user": BEN,
     "item": {"type": "message", "channel": CHANNEL, "ts": "1599529504.000400"}, "event_ts": "1599616881.000800"},
    {"type": "member_joined_channel", "user": BEN, "channel": CHANNEL, "channel_type": "C", "team": TEAM,
     "inviter": "UANA"},
    {"type": "app_home_opened", "user": BEN, "channel": "D111", "tab": "messages", "event_ts": "1606810927.510671"},
    {"type": "channel_shared", "connected_team_id": "E163Q94DX", "channel": CHANNEL, "event_ts": "1561064063.001100"},
]
# Sent over HTTP only, and with no inner event: Slack is limiting the app's events.
APP_RATE_LIMITED = {"token": "legacy-verification-token", "type": "app_rate_limited", "team_id": TEAM,
                    "minute_rate_limited": 1518467820, "api_app_id": APP_ID}


def malformed_bodies(slack: SlackStandIn) -> list[tuple[bytes, str]]:
    """Bodies Slack's endpoint can receive cut short or garbled, with their content types."""
    callback = json.dumps(slack.event_callback({"type": "app_mention", "user": BEN, "channel": CHANNEL,
                                                "text": "hi", "ts": "1.2"})).encode()
    action = urllib.parse.urlencode({"payload": json.dumps({"type": "block_actions", "actions": []})})
    return [
        (callback[: len(callback) // 2], "application/json"),  # truncated JSON
        (json.dumps([json.loads(callback)]).encode(), "application/json"),  # an array, not an object
        (action[: len(action) // 2].encode(), "application/x-www-form-urlencoded"),  # truncated payload=
    ]


NOT_UTF8 = b'{"type": "event_callback", "text": "caf\xe9 \xff"}'


def tracebacks(records: list[logging.LogRecord]) -> list[str]:
    return [r.getMessage() for r in records if r.exc_info or "Traceback" in r.getMessage()]


def test_malformed_bodies_get_400_after_their_signature_and_leave_no_traceback(
        engine: Engine, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async def body(slack: SlackStandIn, running: SlackRunning, bot: Assistant) -> None:
        for data, content_type in malformed_bodies(slack):
            unsigned = await slack.post_http(data, content_type, secret="not-the-secret")
            signed = await slack.post_http(data, content_type)
            assert (unsigned.status, signed.status) == (401, 400), (data, unsigned, signed)
        # Slack signs the UTF-8 text it sends, and slack_sdk's verifier reads the body as such: a body
        # that is not UTF-8 cannot carry Slack's signature, signed with the secret or not.
        for secret in ("not-the-secret", None):
            assert (await slack.post_http(NOT_UTF8, "application/json", secret=secret)).status == 401
        await settle(running, bot)
        assert not slack.posts()
        assert not tracebacks(caplog.records), tracebacks(caplog.records)

    with caplog.at_level(logging.DEBUG):
        run(engine, tmp_path, "http", body)


@pytest.mark.parametrize("mode", MODES)
def test_events_the_bot_does_not_handle_are_acknowledged_quietly(
        engine: Engine, tmp_path: Path, mode: str, caplog: pytest.LogCaptureFixture) -> None:
    async def body(slack: SlackStandIn, running: SlackRunning, bot: Assistant) -> None:
        for event in UNHANDLED_EVENTS:
            delivery = await slack.deliver_event(event)
            assert delivery.status == 200, (event["type"], delivery)
        await settle(running, bot)
        assert not slack.posts() and not slack.ephemerals()
        noisy = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert not noisy, noisy

    with caplog.at_level(logging.INFO):
        run(engine, tmp_path, mode, body)


def test_app_rate_limited_is_acknowledged_and_logged_as_a_warning(
        engine: Engine, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async def body(slack: SlackStandIn, running: SlackRunning, bot: Assistant) -> None:
        delivery = await slack.post_http(json.dumps(APP_RATE_LIMITED), "application/json")
        assert delivery.status == 200, delivery
        await settle(running, bot)
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert [r.name for r in warnings] == ["adapters.slack.listeners"], [r.getMessage() for r in warnings]
        assert "app_rate_limited" in warnings[0].getMessage() and TEAM in warnings[0].getMessage()

    with caplog.at_level(logging.INFO):
        run(engine, tmp_path, "http", body)


@pytest.mark.parametrize("mode", MODES)
def test_help_for_an_unknown_subcommand_is_shown_only_to_the_person(engine: Engine, tmp_path: Path,
                                                                    mode: str) -> None:
    async def body(slack: SlackStandIn, running: SlackRunning, bot: Assistant) -> None:
        delivery = await slack.slash(CHANNEL, BEN, "frobnicate")
        assert delivery.status == 200
        [shown] = await slack.wait_until(lambda: slack.ephemerals(CHANNEL), what="the help")
        assert shown["user"] == BEN and "I don't know the command “frobnicate”" in shown["text"]
        await settle(running, bot)
        assert not slack.posts(CHANNEL)

    run(engine, tmp_path, mode, body)
