"""Deletions on Slack are followed: the real slack-bolt app against the stand-in Slack, with
the events Slack sends (``file_deleted``, ``message_deleted``, channels archived, deleted or
left), and the text checked gone from retrieval and from every collection of the store."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from adapters.slack.app import SlackRunning
from bot.config import BotConfig, Config, RateLimitConfig, RetentionConfig
from bot.engine_calls import AsyncEngine
from bot.retention import NOTE
from bot.runtime import Assistant
from raptor_engine.engine import Engine
from raptor_engine.types import ChannelKey
from testkit.slack_api import BOT_USER, TEAM, SlackStandIn, app_running
from tests.conftest import SAMPLE, traces

ANA, BEN = "UANA", "UBEN"
CHANNEL = "C100"
KEPT = "Deploys are frozen on Fridays after noon."
SECRET = "The staging password rotates every Tuesday at nine."
HANDBOOK_WORDS = "acknowledge a page within ten minutes"  # a sentence of the sample handbook

Body = Callable[[SlackStandIn, SlackRunning, Assistant], Awaitable[None]]


def key(channel: str = CHANNEL) -> ChannelKey:
    return ChannelKey("slack", TEAM, channel)


def run(engine: Engine, tmp_path: Path, body: Body, days: float = 7.0, mode: str = "socket") -> None:
    """Runs ``body`` with a started bot (``removed_channel_days`` = ``days``), the stand-in and the app."""
    limits = RateLimitConfig(questions_per_user_per_minute=0, rebuilds_per_channel_per_hour=0)
    config = Config(data_dir=tmp_path / "data",
                    bot=BotConfig(rate_limits=limits, retention=RetentionConfig(removed_channel_days=days)))

    async def session() -> None:
        bot = Assistant(config, AsyncEngine(engine))
        await bot.start(warm_up=False)
        try:
            async with SlackStandIn() as slack:
                slack.add_user(ANA, "Ana", admin=True)
                slack.add_user(BEN, "Ben")
                async with app_running(bot, slack, mode) as running:
                    await body(slack, running, bot)
                    await settle(running, bot)
                assert not slack.rejected(), slack.rejected()
        finally:
            await bot.stop()

    asyncio.run(session())


async def settle(running: SlackRunning, bot: Assistant) -> None:
    for _ in range(2):
        await asyncio.sleep(0.05)
        await running.handling.wait_idle()
        await bot.scheduler.wait_idle()


async def pin_message(slack: SlackStandIn, running: SlackRunning, bot: Assistant, text: str,
                      channel: str = CHANNEL) -> str:
    """Ben says ``text``, Ana pins it; returns its ts once it is a source."""
    message, _ = await slack.user_says(channel, BEN, text)
    await slack.pin(channel, ANA, message["ts"])
    await slack.wait_until(lambda: slack.posts(channel, message["ts"]), what="the pin's note")
    await settle(running, bot)
    return str(message["ts"])


async def ask(slack: SlackStandIn, running: SlackRunning, bot: Assistant, question: str) -> str:
    asked, _ = await slack.user_says(CHANNEL, ANA, f"<@{BOT_USER}> {question}")
    [posted] = await slack.wait_until(lambda: slack.posts(CHANNEL, asked["ts"]), what="the answer")
    await settle(running, bot)
    return str(posted["text"])


def retrieved(engine: Engine, question: str) -> str:
    """Everything retrieval gives for ``question`` in the channel, as one lower-cased text."""
    return " ".join(hit.node.text for hit in engine.retrieve(key(), question)).lower()


@pytest.mark.parametrize("channel_ids", [None, [CHANNEL]], ids=["documented-example", "with-channel-ids"])
def test_a_deleted_file_is_forgotten_everywhere(engine: Engine, tmp_path: Path, channel_ids: list[str] | None) -> None:
    async def body(slack: SlackStandIn, running: SlackRunning, bot: Assistant) -> None:
        await pin_message(slack, running, bot, KEPT)  # stays: the channel lives on
        message, meta = await slack.share_file(CHANNEL, ANA, "aurora-handbook.md", SAMPLE.read_bytes(),
                                               mimetype="text/markdown")
        await slack.wait_until(lambda: slack.posts(CHANNEL, message["ts"]), what="the upload's note")
        await settle(running, bot)
        answer = await ask(slack, running, bot, "What must the on-call engineer acknowledge?")
        assert HANDBOOK_WORDS in answer.lower() and engine.answers(key()), answer  # kept, quoting the file
        assert HANDBOOK_WORDS in retrieved(engine, "How fast must a page be acknowledged?")

        await slack.delete_file(meta["id"], channel_ids)
        await slack.wait_until(lambda: len(engine.sources(key())) == 1, what="the file forgotten")
        await settle(running, bot)
        assert HANDBOOK_WORDS not in retrieved(engine, "How fast must a page be acknowledged?")
        assert not engine.answers(key())  # the answer quoting it went with it
        assert not traces(engine.store, [HANDBOOK_WORDS]), traces(engine.store, [HANDBOOK_WORDS])
        assert "fridays" in retrieved(engine, "When are deploys frozen?")  # the rest stays

    run(engine, tmp_path, body)


@pytest.mark.parametrize("mode", ["socket", "http"])
def test_a_deleted_pinned_message_is_forgotten_everywhere(engine: Engine, tmp_path: Path, mode: str) -> None:
    async def body(slack: SlackStandIn, running: SlackRunning, bot: Assistant) -> None:
        await pin_message(slack, running, bot, KEPT)
        secret_ts = await pin_message(slack, running, bot, SECRET)
        await ask(slack, running, bot, "When does the staging password rotate?")
        assert "tuesday" in retrieved(engine, "When does the staging password rotate?")

        await slack.delete_message(CHANNEL, secret_ts)
        await slack.wait_until(lambda: len(engine.sources(key())) == 1, what="the message forgotten")
        await settle(running, bot)
        assert "tuesday" not in retrieved(engine, "When does the staging password rotate?")
        assert not traces(engine.store, ["staging password"]), traces(engine.store, ["staging password"])
        assert [s.external_id for s in engine.sources(key())] != [f"{CHANNEL}:{secret_ts}"]

    run(engine, tmp_path, body, mode=mode)


@pytest.mark.parametrize("kind", ["channel_archive", "channel_deleted", "group_archive", "group_deleted",
                                  "channel_left", "group_left", "member_left_channel"])
def test_a_channel_gone_is_forgotten_at_once_with_no_retention(engine: Engine, tmp_path: Path, kind: str) -> None:
    async def body(slack: SlackStandIn, running: SlackRunning, bot: Assistant) -> None:
        await pin_message(slack, running, bot, SECRET)
        await pin_message(slack, running, bot, KEPT, channel="C200")  # another channel: left alone
        await slack.channel_event("member_left_channel", CHANNEL, ANA, member=BEN)  # someone else leaving: nothing
        await settle(running, bot)
        assert engine.sources(key())

        await slack.channel_event(kind, CHANNEL, ANA)
        await slack.wait_until(lambda: key() not in engine.channels(), what="the channel forgotten")
        assert not traces(engine.store, ["staging password"]), traces(engine.store, ["staging password"])
        assert engine.sources(key("C200")) and bot.scheduler.job(key("C200")) is not None  # type: ignore[attr-defined]

    run(engine, tmp_path, body, days=0)


def test_an_archived_channel_is_unscheduled_kept_until_its_time_and_brought_back_by_unarchiving(
    engine: Engine, tmp_path: Path
) -> None:
    async def archive_and_come_back(slack: SlackStandIn, running: SlackRunning, bot: Assistant) -> None:
        await pin_message(slack, running, bot, SECRET)
        assert bot.scheduler.job(key()) is not None  # type: ignore[attr-defined]
        await slack.channel_event("channel_archive", CHANNEL, ANA)
        await slack.wait_until(lambda: NOTE in engine.notes(key()), what="the pending forget")
        await settle(running, bot)
        assert bot.scheduler.job(key()) is None  # type: ignore[attr-defined]
        assert "tuesday" in retrieved(engine, "When does the staging password rotate?")  # kept for now

        await slack.channel_event("channel_unarchive", CHANNEL, ANA)
        await slack.wait_until(lambda: NOTE not in engine.notes(key()) and bot.scheduler.job(key()),  # type: ignore[attr-defined]
                               what="the forget called off and the channel scheduled again")

        await slack.channel_event("channel_archive", CHANNEL, ANA)  # archived again, for good
        await slack.wait_until(lambda: NOTE in engine.notes(key()), what="the pending forget")

    run(engine, tmp_path, archive_and_come_back)

    # A restart before the time: the channel is still not scheduled, and its material kept.
    async def restarted(slack: SlackStandIn, running: SlackRunning, bot: Assistant) -> None:
        assert bot.scheduler.job(key()) is None  # type: ignore[attr-defined]
        assert "tuesday" in retrieved(engine, "When does the staging password rotate?")
        engine.set_note(key(), NOTE, "2000-01-01T00:00:00+00:00")  # as if seven days had passed

    run(engine, tmp_path, restarted)

    # The schedule's pass (at start, then hourly) carries the forget out.
    async def after_its_time(slack: SlackStandIn, running: SlackRunning, bot: Assistant) -> None:
        await slack.wait_until(lambda: key() not in engine.channels(), what="the channel forgotten")
        assert not traces(engine.store, ["staging password"]), traces(engine.store, ["staging password"])

    run(engine, tmp_path, after_its_time)


def test_an_edit_that_removes_text_removes_it_from_excerpts_summaries_and_kept_answers(
    engine: Engine, tmp_path: Path
) -> None:
    async def body(slack: SlackStandIn, running: SlackRunning, bot: Assistant) -> None:
        await pin_message(slack, running, bot, "The canteen opens at eight and closes at three.", channel="C200")
        note_ts = await pin_message(slack, running, bot, f"{KEPT} {SECRET}")
        await slack.slash(CHANNEL, ANA, "rebuild")
        await slack.wait_until(lambda: any(p["text"].startswith("Rebuilt") for p in slack.posts(CHANNEL)),
                               what="the rebuild")
        await settle(running, bot)
        answer = await ask(slack, running, bot, "When does the staging password rotate?")
        assert "tuesday" in answer.lower() and any("Tuesday" in a.text for a in engine.answers(key())), answer
        assert traces(engine.store, ["staging password"])

        await slack.edit(CHANNEL, note_ts, KEPT)  # the password sentence is edited away
        await slack.wait_until(lambda: len(slack.posts(CHANNEL, note_ts)) >= 2, what="the edit's note")
        await settle(running, bot)
        assert "tuesday" not in retrieved(engine, "When does the staging password rotate?")
        assert not [a.text for a in engine.answers(key()) if "Tuesday" in a.text]
        # Nowhere in the store: no excerpt, summary (tree or cache) or kept answer holds it any more.
        assert not traces(engine.store, ["staging password"]), traces(engine.store, ["staging password"])
        assert "fridays" in retrieved(engine, "When are deploys frozen?")

    run(engine, tmp_path, body)


def test_a_deleted_reply_leaves_the_pinned_thread_it_was_part_of(engine: Engine, tmp_path: Path) -> None:
    async def body(slack: SlackStandIn, running: SlackRunning, bot: Assistant) -> None:
        root, _ = await slack.user_says(CHANNEL, ANA, "How do we roll back a release?")
        await slack.user_says(CHANNEL, BEN, "Run the rollback job from the release page.", thread_ts=root["ts"])
        secret, _ = await slack.user_says(CHANNEL, BEN, SECRET, thread_ts=root["ts"])
        await slack.pin(CHANNEL, ANA, root["ts"])
        await slack.wait_until(lambda: slack.posts(CHANNEL, root["ts"]), what="the thread pin's note")
        await settle(running, bot)
        assert "tuesday" in retrieved(engine, "When does the staging password rotate?")

        await slack.delete_message(CHANNEL, secret["ts"])
        await slack.wait_until(lambda: not traces(engine.store, ["staging password"]), what="the reply forgotten")
        await settle(running, bot)
        [thread] = engine.sources(key())
        assert "rollback job" in engine.store.channel(key()).source_text(thread.id)
        assert "tuesday" not in retrieved(engine, "When does the staging password rotate?")

    run(engine, tmp_path, body)
