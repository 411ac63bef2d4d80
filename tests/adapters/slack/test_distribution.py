"""``slack.distribution: distributed`` (issue 30, point 4): an app offered to other workspaces
keeps nothing from Slack (Slack's API terms let only an app a company installs for itself keep
an index of its workspace's messages). Files shared and messages pinned are refused with the
one line that says why; questions are still answered. Against the stand-in, with the real
slack-bolt and engine; the file share and pin events as in ``test_app``."""

from __future__ import annotations

from pathlib import Path

from adapters.slack.app import SlackRunning
from bot import replies
from bot.config import SlackConfig
from bot.runtime import Assistant
from raptor_engine.engine import Engine
from testkit.slack_api import BOT_USER, SlackStandIn
from tests.adapters.slack.test_app import ANA, CHANNEL, ON_CALL, bot_config, key, run, settle
from tests.conftest import SAMPLE


def test_a_distributed_app_refuses_files_and_pins_and_still_answers(engine: Engine, tmp_path: Path) -> None:
    async def body(slack: SlackStandIn, running: SlackRunning, bot: Assistant) -> None:
        shared, _ = await slack.share_file(CHANNEL, ANA, "aurora-handbook.md", SAMPLE.read_bytes(),
                                           mimetype="text/markdown")
        [note] = await slack.wait_until(lambda: slack.posts(CHANNEL, shared["ts"]), what="the refusal")
        assert note["text"] == replies.DISTRIBUTED_REFUSAL
        pinned = slack.say(CHANNEL, ANA, "The on-call engineer answers pages within 5 minutes.")
        await slack.pin(CHANNEL, ANA, pinned["ts"])
        await slack.wait_until(lambda: replies.DISTRIBUTED_REFUSAL in
                               [p["text"] for p in slack.posts(CHANNEL)][1:], what="the pin's refusal")
        await settle(running, bot)
        assert await bot.sources(key()) == []
        asked, _ = await slack.user_says(CHANNEL, ANA, f"<@{BOT_USER}> {ON_CALL}")
        [answer] = await slack.wait_until(lambda: slack.posts(CHANNEL, asked["ts"]), what="the answer")
        assert answer["text"] == replies.NO_MATERIAL

    config = bot_config(tmp_path).model_copy(update={"slack": SlackConfig(distribution="distributed")})
    run(engine, tmp_path, "socket", body, config=config)


def test_the_default_is_an_internal_app() -> None:
    assert SlackConfig().distribution == "internal"
