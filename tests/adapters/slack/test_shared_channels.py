"""Channels shared with other organisations (Slack Connect), end to end (issue 28, point 5).

Real components, as in ``test_app.py``: slack-bolt and slack_sdk against the stand-in Slack
(``testkit/slack_api.py``), whose shared channel says ``is_ext_shared`` in
``conversations.info`` and whose events there carry ``is_ext_shared_channel: true``, as
Slack's do; its guest of another organisation has that organisation's ``team_id`` in
``users.info``, slash commands and clicks. By default the bot answers no question there
(one line says why) and stores nothing from it; with ``slack.shared_channels: allow`` it
serves the channel, but admin rights count only for the installing workspace's members,
and every channel is keyed by the installing workspace whatever team a payload names.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from adapters.slack.app import SlackRunning
from bot import replies
from bot.config import BotConfig, Config, RateLimitConfig
from bot.engine_calls import AsyncEngine
from bot.neutral import Command
from bot.runtime import Assistant
from raptor_engine.engine import Engine
from raptor_engine.types import ChannelKey
from testkit.slack_api import BOT_USER, TEAM, SlackStandIn, app_running, lines_of, slack_config
from tests.adapters.recording import question_outcomes, recorded
from tests.adapters.slack.test_app import settle
from tests.conftest import SAMPLE

MODES = ["socket", "http"]
ANA, BEN, EVE = "UANA", "UBEN", "UEVE"  # Ana: an admin here; Ben: a member; Eve: an owner of another organisation
SHARED, OWN = "C900", "C100"
OTHER_TEAM = "T999"
NOTE = "Deploys are frozen on Fridays after noon, so that nobody is paged over the weekend."

Body = Callable[[SlackStandIn, SlackRunning, Assistant], Awaitable[None]]


def key(channel: str) -> ChannelKey:
    return ChannelKey("slack", TEAM, channel)


def run(engine: Engine, tmp_path: Path, mode: str, body: Body, shared_channels: str = "refuse") -> None:
    """Runs ``body`` with a started bot, the stand-in (``C900`` shared with another
    organisation, Eve one of its owners) and the Slack app serving in ``mode``."""

    async def session() -> None:
        limits = RateLimitConfig(questions_per_user_per_minute=0, rebuilds_per_channel_per_hour=0)
        async with SlackStandIn() as slack:
            slack.add_user(ANA, "Ana", admin=True)
            slack.add_user(BEN, "Ben")
            slack.add_user(EVE, "Eve", admin=True, owner=True, team=OTHER_TEAM)
            slack.share_channel(SHARED, OTHER_TEAM)
            settings = slack_config(slack, mode).model_copy(update={"shared_channels": shared_channels})
            config = Config(data_dir=tmp_path / "data", bot=BotConfig(rate_limits=limits), slack=settings)
            bot = Assistant(config, AsyncEngine(engine))
            await bot.start(warm_up=False)
            try:
                async with app_running(bot, slack, mode, config=config.slack) as running:
                    await body(slack, running, bot)
                    await settle(running, bot)
                assert not slack.rejected(), slack.rejected()
            finally:
                await bot.stop()

    asyncio.run(session())


def responses_text(slack: SlackStandIn) -> str:
    """What the bot said privately: ephemeral messages and answers through ``response_url``."""
    return "\n".join([str(payload.get("text", "")) for _, payload, _ in slack.responses]
                     + [str(e.get("text", "")) for e in slack.ephemerals()])


@pytest.mark.parametrize("mode", MODES)
def test_a_shared_channel_is_refused_in_one_line_and_nothing_from_it_is_stored(
    engine: Engine, tmp_path: Path, mode: str
) -> None:
    async def body(slack: SlackStandIn, running: SlackRunning, bot: Assistant) -> None:
        asked, _ = await slack.user_says(SHARED, BEN, f"<@{BOT_USER}> What does the on-call engineer do?")
        [refusal] = await slack.wait_until(lambda: slack.posts(SHARED, asked["ts"]), what="the refusal")
        assert refusal["text"] == replies.SHARED_CHANNEL, refusal
        # A file, a pin, an edit of it and a slash command: nothing stored, the command told why.
        message, _ = await slack.share_file(SHARED, BEN, "handbook.md", SAMPLE.read_bytes(), mimetype="text/markdown",
                                            also_file_shared=True)
        note, _ = await slack.user_says(SHARED, BEN, NOTE)
        await slack.pin(SHARED, BEN, note["ts"])
        await slack.edit(SHARED, note["ts"], NOTE.replace("Fridays", "Thursdays"))
        await slack.slash(SHARED, EVE, "rebuild")
        await slack.wait_until(lambda: replies.SHARED_CHANNEL in responses_text(slack), what="the command's refusal")
        await settle(running, bot)
        assert bot.engine.channels() == []  # nothing of the shared channel was written (not even its collections)
        assert lines_of(slack.posts(SHARED)).count(replies.SHARED_CHANNEL) == 1  # said to the question only
        assert question_outcomes(bot, "slack") == {}  # no question reached the engine or the limits

        # The workspace's own channels are served as ever.
        own, _ = await slack.user_says(OWN, BEN, f"<@{BOT_USER}> What does the on-call engineer do?")
        [answer] = await slack.wait_until(lambda: slack.posts(OWN, own["ts"]), what="the answer")
        assert answer["text"] != replies.SHARED_CHANNEL

    run(engine, tmp_path, mode, body)


@pytest.mark.parametrize("mode", MODES)
def test_when_allowed_only_the_installing_workspaces_admins_manage_and_keys_are_its_own(
    engine: Engine, tmp_path: Path, mode: str
) -> None:
    async def body(slack: SlackStandIn, running: SlackRunning, bot: Assistant) -> None:
        events = recorded(bot)
        note, _ = await slack.user_says(SHARED, EVE, NOTE)  # Eve's message carries her team, T999
        await slack.pin(SHARED, EVE, note["ts"])
        await slack.wait_until(lambda: bot.engine.sources(key(SHARED)), what="the pin stored under the home team")
        # An owner of another organisation is no admin here: an admin-only command is refused.
        await slack.slash(SHARED, EVE, "rebuild")
        await slack.wait_until(lambda: replies.refusal_text("rebuild") in responses_text(slack), what="the refusal")
        await slack.slash(SHARED, ANA, "rebuild")
        await slack.wait_until(lambda: "Rebuilt" in lines_of(slack.posts(SHARED)) + responses_text(slack),
                               what="Ana's rebuild")
        commands = [e for e in events if isinstance(e, Command)]
        assert [c.person.manages_channel for c in commands] == [False, True]
        assert {e.channel for e in events} == {key(SHARED)}  # never T999's
        assert {k.workspace for k in bot.engine.channels()} == {TEAM}

    run(engine, tmp_path, mode, body, shared_channels="allow")


def test_the_shared_flag_is_looked_up_once_and_events_say_it_fresh(engine: Engine, tmp_path: Path) -> None:
    async def body(slack: SlackStandIn, running: SlackRunning, bot: Assistant) -> None:
        for _ in range(3):
            await slack.slash(OWN, BEN, "status")
        await slack.wait_until(lambda: responses_text(slack).count("\n") >= 2 or len(slack.posts(OWN)) >= 3,
                               what="three status replies")
        assert len(slack.calls_of("conversations.info", channel=OWN)) == 1  # remembered
        # An event says the channel is shared now (it became a Slack Connect channel): believed at once.
        slack.share_channel(OWN, OTHER_TEAM)
        asked, _ = await slack.user_says(OWN, BEN, f"<@{BOT_USER}> Who is on call?")
        [refusal] = await slack.wait_until(lambda: slack.posts(OWN, asked["ts"]), what="the refusal")
        assert refusal["text"] == replies.SHARED_CHANNEL
        assert len(slack.calls_of("conversations.info", channel=OWN)) == 1

    run(engine, tmp_path, "socket", body)
