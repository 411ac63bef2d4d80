"""The status line while a question is worked on (issue 30, point 2), end to end against the
stand-in: ``assistant.threads.setStatus`` with the stage, within 1 s of the question's
delivery, in the assistant container and in channel threads; cleared with an empty status
(docs.slack.dev, assistant.threads.setStatus: "Sending an empty string in the status field
will also clear the status indicator") after the last reply, on every path, errors included.
Slack also clears it when the app replies; the explicit clearing covers the paths whose
reply Slack refused. Payload shapes: see ``test_assistant_container``."""

from __future__ import annotations

from pathlib import Path

from adapters.slack.app import SlackRunning
from bot import replies
from bot.neutral import Stage
from bot.runtime import Assistant
from raptor_engine.engine import Engine
from testkit.slack_api import BOT_USER, SlackStandIn
from tests.adapters.slack.test_app import ANA, CHANNEL, ON_CALL, run, settle
from tests.adapters.slack.test_assistant_container import BUILT, built_engine  # noqa: F401 (a fixture)

STATUS_WITHIN_S = 1.0


def test_the_container_shows_each_stage_and_clears_the_line_after_the_answer(
        built_engine: Engine, tmp_path: Path) -> None:  # noqa: F811
    async def body(slack: SlackStandIn, running: SlackRunning, bot: Assistant) -> None:
        slack.join(BUILT, ANA)
        dm, thread, _ = await slack.open_assistant(ANA, viewing=BUILT)
        _, [delivery] = await slack.ask_assistant(ANA, dm, thread, ON_CALL)
        await slack.wait_until(lambda: slack.posts(dm, thread), what="the answer")
        await settle(running, bot)
        lines = slack.statuses(dm, thread)
        assert [text for text, _ in lines] == [replies.stage_text(Stage.READING),
                                                replies.stage_text(Stage.SEARCHING, "cbuilt"), ""]
        assert lines[1][0] == "Searching #cbuilt…"
        assert lines[0][1] - delivery.sent_at < STATUS_WITHIN_S
        [answer] = slack.calls_of("chat.postMessage", channel=dm, thread_ts=thread)
        assert lines[1][1] < answer.at < lines[2][1]

    run(built_engine, tmp_path, "socket", body)


def test_a_failed_reply_still_clears_the_line(built_engine: Engine, tmp_path: Path) -> None:  # noqa: F811
    async def body(slack: SlackStandIn, running: SlackRunning, bot: Assistant) -> None:
        slack.join(BUILT, ANA)
        dm, thread, _ = await slack.open_assistant(ANA, viewing=BUILT)
        slack.fail("chat.postMessage", "fatal_error", times=5)  # the answer and the note of its failure
        await slack.ask_assistant(ANA, dm, thread, ON_CALL)
        await slack.wait_until(lambda: [t for t, _ in slack.statuses(dm, thread)][-1:] == [""], what="the clearing")
        await settle(running, bot)
        assert not slack.posts(dm, thread)
        slack.calls = [c for c in slack.calls if c.error != "fatal_error"]  # the refusals were the point

    run(built_engine, tmp_path, "socket", body)


def test_channel_threads_show_the_stage_where_slack_allows_it(engine: Engine, tmp_path: Path) -> None:
    async def body(slack: SlackStandIn, running: SlackRunning, bot: Assistant) -> None:
        asked, deliveries = await slack.user_says(CHANNEL, ANA, f"<@{BOT_USER}> {ON_CALL}")
        await slack.wait_until(lambda: slack.posts(CHANNEL, asked["ts"]), what="the answer")
        await settle(running, bot)
        lines = slack.statuses(CHANNEL, asked["ts"])
        assert [text for text, _ in lines] == [replies.stage_text(Stage.READING),
                                                replies.stage_text(Stage.SEARCHING), ""]
        assert lines[0][1] - deliveries[0].sent_at < STATUS_WITHIN_S

        # Where Slack refuses a status in channels, it is tried once, and the answer goes on.
        slack.statuses_in_channels = False
        for _ in range(2):
            asked, _ = await slack.user_says(CHANNEL, ANA, f"<@{BOT_USER}> {ON_CALL}")
            await slack.wait_until(lambda: slack.posts(CHANNEL, asked["ts"]), what="the answer")
            await settle(running, bot)
        refused = [c for c in slack.rejected() if c.method == "assistant.threads.setStatus"]
        assert len(refused) == 1 and refused[0].error == "channel_type_not_supported"
        slack.calls = [c for c in slack.calls if c not in refused]

    run(engine, tmp_path, "socket", body)
