"""The Slack adapter end to end: the real slack-bolt ``AsyncApp`` against the stand-in Slack.

Real components only: slack-bolt and slack_sdk talk over 127.0.0.1 to
``testkit/slack_api.py`` (the Web API, Socket Mode, signed HTTP
deliveries); the bot is ``bot.runtime.Assistant`` with the real engine on embedded
Chroma. Every scenario runs in Socket Mode and in HTTP mode. Each test runs
its own event loop with ``asyncio.run``. The stand-in refuses any message over
Slack's limits, and every scenario checks that nothing was refused.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from pydantic import SecretStr
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.app import SlackRunning, run_slack
from adapters.slack.outbox import Target
from adapters.slack.translate import ACTION_NODE, ACTION_VOTE_DOWN
from adapters.slack.web import People
from bot import replies
from bot.config import BotConfig, Config, RateLimitConfig
from bot.coordination.deliveries import LocalLedger
from bot.engine_calls import AsyncEngine
from bot.errors import BotError
from bot.neutral import (
    Attachment,
    CitationKind,
    CitationView,
    Question,
    Reply,
    ReplyAddress,
    ReplyKind,
    Upload,
)
from bot.runtime import Assistant
from raptor_engine.embedding import SentenceTransformerEmbedder
from raptor_engine.engine import Engine, EngineSettings
from raptor_engine.store import ChromaStore
from raptor_engine.types import ChannelKey, SourceKind
from testkit.slack_api import (
    BOT_USER,
    TEAM,
    SlackStandIn,
    app_running,
    lines_of,
    slack_config,
)
from tests.adapters.recording import counted, our_warnings, question_outcomes, recorded
from tests.conftest import SAMPLE, make_engine

MODES = ["socket", "http"]
ANA, BEN = "UANA", "UBEN"  # Ana is a workspace admin, Ben a member
CHANNEL = "C100"
ON_CALL = "What does the on-call engineer do?"
OVERVIEW = "What are the main points about on-call?"  # broad by its words: led by a summary
ACK_LIMIT_S = 3.0

Body = Callable[[SlackStandIn, SlackRunning, Assistant], Awaitable[None]]


def key(channel: str = CHANNEL) -> ChannelKey:
    return ChannelKey("slack", TEAM, channel)


def bot_config(tmp_path: Path) -> Config:
    # Limits off: a scenario asks more questions than a person may per minute.
    limits = RateLimitConfig(questions_per_user_per_minute=0, rebuilds_per_channel_per_hour=0)
    return Config(data_dir=tmp_path / "data", bot=BotConfig(rate_limits=limits))


def run(engine: Engine, tmp_path: Path, mode: str, body: Body, config: Config | None = None, **options: Any) -> None:
    """Runs ``body`` with a started bot (on ``config``, by default :func:`bot_config`), the
    stand-in, and the Slack app serving in ``mode``."""

    async def session() -> None:
        bot = Assistant(config or bot_config(tmp_path), AsyncEngine(engine))
        await bot.start(warm_up=False)
        try:
            async with SlackStandIn() as slack:
                slack.add_user(ANA, "Ana", admin=True)
                slack.add_user(BEN, "Ben")
                async with app_running(bot, slack, mode, **options) as running:
                    await body(slack, running, bot)
                    await settle(running, bot)
                assert not slack.rejected(), slack.rejected()
        finally:
            await bot.stop()

    asyncio.run(session())


async def settle(running: SlackRunning, bot: Assistant) -> None:
    """Until every delivered event (and any rebuild) is fully handled."""
    for _ in range(2):
        await asyncio.sleep(0.05)  # bolt starts a listener just after acknowledging
        await running.handling.wait_idle()
        await bot.scheduler.wait_idle()




def block_ids(post: dict[str, Any]) -> list[str]:
    return [str(b.get("block_id", "")) for b in post.get("blocks") or ()]


async def share_sample(slack: SlackStandIn, channel: str = CHANNEL) -> dict[str, Any]:
    message, _ = await slack.share_file(channel, ANA, "aurora-handbook.md", SAMPLE.read_bytes(),
                                        mimetype="text/markdown", also_file_shared=True)
    await slack.wait_until(lambda: slack.posts(channel, message["ts"]), what="the upload's note")
    return message


@pytest.fixture(scope="module")
def built_engine(embedder: SentenceTransformerEmbedder, tmp_path_factory: pytest.TempPathFactory) -> Engine:
    """An engine whose channel ``CBUILT`` holds the sample handbook with its summaries built."""
    engine = make_engine(ChromaStore.embedded(tmp_path_factory.mktemp("built") / "chroma"), embedder)
    engine.ingest_bytes(key("CBUILT"), SAMPLE.read_bytes(), "aurora-handbook.md", "https://x.test/f", "Ana", "F0")
    asyncio.run(engine.rebuild(key("CBUILT")))
    return engine


# -- questions ----------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_mentions_follow_ups_and_direct_messages(engine: Engine, tmp_path: Path, mode: str) -> None:
    async def body(slack: SlackStandIn, running: SlackRunning, bot: Assistant) -> None:
        events = recorded(bot)
        shared = await share_sample(slack)
        await settle(running, bot)
        # The message event and the file_shared event name the same file: one upload.
        notes = slack.posts(CHANNEL, shared["ts"])
        assert len(notes) == 1 and notes[0]["text"].startswith("Added “The Aurora Team Handbook”"), notes
        assert not slack.calls_of("files.info")
        [upload] = [e for e in events if type(e).__name__ == "Upload"]
        assert upload.link == shared["files"][0]["permalink"] and upload.external_id == shared["files"][0]["id"]

        # A mention is answered in a thread under it, once (Slack sends message + app_mention).
        asked, deliveries = await slack.user_says(CHANNEL, ANA, f"<@{BOT_USER}> {ON_CALL}")
        assert len(deliveries) == 2 and all(d.status == 200 and d.seconds < ACK_LIMIT_S for d in deliveries)
        await slack.wait_until(lambda: slack.posts(CHANNEL, asked["ts"]), what="the answer")
        await settle(running, bot)
        [answer] = slack.posts(CHANNEL, asked["ts"])
        ids = block_ids(answer)
        assert answer["blocks"][0]["type"] == "markdown"  # its block_id is not kept, as on Slack
        assert "raptor_source_1" in ids and ids[-1] == "raptor_feedback"
        assert "[1]" in answer["text"] and answer["unfurl_links"] is False
        # The work was shown: the reaction went on before the answer and came off after it.
        [added] = slack.calls_of("reactions.add", timestamp=asked["ts"])
        [removed] = slack.calls_of("reactions.remove", timestamp=asked["ts"])
        [posted] = [c for c in slack.calls_of("chat.postMessage") if c.params.get("thread_ts") == asked["ts"]]
        assert added.at < posted.at < removed.at and added.params["name"] == "hourglass_flowing_sand"
        assert not slack.reactions

        # A follow-up in that thread, without tagging the bot, is answered with the thread as context.
        await slack.user_says(CHANNEL, BEN, "And how quickly must a page be acknowledged?",
                                          thread_ts=asked["ts"])
        await slack.wait_until(lambda: len(slack.posts(CHANNEL, asked["ts"])) == 2, what="the follow-up's answer")
        question = [e for e in events if isinstance(e, Question)][-1]
        assert question.thread == asked["ts"] and question.text.startswith("And how quickly")
        assert question.context[0] == ON_CALL and "The on-call engineer" in question.context[1]
        assert question.person.name == "Ben" and not question.person.manages_channel

        # A thread where the bot never answered stays the people's.
        root, _ = await slack.user_says(CHANNEL, BEN, "Lunch at noon?")
        await slack.user_says(CHANNEL, ANA, "Yes, see you there.", thread_ts=root["ts"])
        await settle(running, bot)
        assert not slack.posts(CHANNEL, root["ts"])

        # A direct message is answered directly (its conversation is a channel of its own, empty here).
        await slack.user_says("DANA", ANA, ON_CALL, im=True)
        [direct] = await slack.wait_until(lambda: slack.posts("DANA"), what="the direct answer")
        assert "thread_ts" not in direct and direct["text"] == replies.NO_MATERIAL

    run(engine, tmp_path, mode, body)


@pytest.mark.parametrize("mode", MODES)
def test_a_question_where_there_is_no_material_says_what_to_add(
    engine: Engine, tmp_path: Path, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A mention, a direct message and ``/raptor ask`` in conversations holding no source get
    exactly ``NO_MATERIAL`` where their answer would go: not "could not find anything" (nothing
    was searched), not an error with a reference; counted as ``no_material``, never as a failure."""
    async def body(slack: SlackStandIn, running: SlackRunning, bot: Assistant) -> None:
        asked, _ = await slack.user_says(CHANNEL, ANA, f"<@{BOT_USER}> {ON_CALL}")
        [mentioned] = await slack.wait_until(lambda: slack.posts(CHANNEL, asked["ts"]), what="the mention's reply")
        await slack.user_says("DANA", ANA, ON_CALL, im=True)
        [direct] = await slack.wait_until(lambda: slack.posts("DANA"), what="the direct reply")
        count = len(slack.posts(CHANNEL))
        await slash(slack, BEN, f"ask {ON_CALL}")
        await new_post(slack, count, "the question's echo")
        echo_ts = next(m["ts"] for m in slack.messages[CHANNEL] if "raptor_question_0" in block_ids(m))
        [slashed] = await slack.wait_until(lambda: slack.posts(CHANNEL, echo_ts), what="the slash reply")
        await settle(running, bot)
        for reply in (mentioned, direct, slashed):
            assert reply["text"] == replies.NO_MATERIAL and block_ids(reply) == ["raptor_info_0"], reply
        assert "thread_ts" not in direct and not slack.ephemerals()
        assert question_outcomes(bot, "slack") == {"no_material": 3}
        assert counted(bot, "raptor_errors_total") == {}

    with caplog.at_level(logging.INFO):
        run(engine, tmp_path, mode, body)
    assert our_warnings(caplog.records) == []


def test_no_warning_at_start_when_the_token_is_also_in_the_environment(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """``SLACK_BOT_TOKEN`` is the usual way to pass the token; bolt then warns that it is unused
    beside the adapter's client, which already carries the configured token."""
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-from-the-environment")

    async def body(slack: SlackStandIn, running: SlackRunning, bot: Assistant) -> None:
        await share_sample(slack)
        await settle(running, bot)

    with caplog.at_level(logging.INFO):
        run(engine, tmp_path, "socket", body)
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize("mode", MODES)
def test_a_retried_event_is_answered_once(engine: Engine, tmp_path: Path, mode: str) -> None:
    async def body(slack: SlackStandIn, running: SlackRunning, bot: Assistant) -> None:
        await share_sample(slack)
        asked = slack.say(CHANNEL, ANA, f"<@{BOT_USER}> {ON_CALL}")
        mention = slack.events_for(asked)[1]
        callback = slack.event_callback(mention)
        first = await slack.deliver_callback(callback)
        retries = [await slack.deliver_callback(callback, retry=n) for n in (1, 2, 3)]
        assert all(d.status == 200 for d in (first, *retries))
        await slack.wait_until(lambda: slack.posts(CHANNEL, asked["ts"]), what="the answer")
        await settle(running, bot)
        assert len(slack.posts(CHANNEL, asked["ts"])) == 1
        assert len(slack.calls_of("reactions.add", timestamp=asked["ts"])) == 1

    run(engine, tmp_path, mode, body)


def test_two_replicas_sharing_a_ledger_answer_each_event_once(engine: Engine, tmp_path: Path) -> None:
    """Two front-ends behind a load balancer (HTTP mode), one delivery ledger: Slack's retry
    of an event reaching the other replica, and a shared file's two events reaching one each,
    are handled once."""

    async def session() -> None:
        ledger = LocalLedger()
        bots = [Assistant(bot_config(tmp_path / name), AsyncEngine(engine), deliveries=ledger) for name in ("one", "two")]
        for bot in bots:
            await bot.start(warm_up=False)
        try:
            async with SlackStandIn() as slack:
                slack.add_user(ANA, "Ana", admin=True)
                async with app_running(bots[0], slack, "http") as one, app_running(bots[1], slack, "http") as two:
                    events = [recorded(bot) for bot in bots]

                    async def settle_both() -> None:
                        await settle(one, bots[0])
                        await settle(two, bots[1])

                    # A shared file: its message reaches the first replica, its file_shared event the second.
                    meta = slack.add_file(ANA, "aurora-handbook.md", SAMPLE.read_bytes(), "text/markdown")
                    shared = slack.say(CHANNEL, ANA, "")
                    shared.update({"subtype": "file_share", "files": [meta], "upload": False, "display_as_bot": False})
                    slack.app_url = one.url
                    assert (await slack.deliver_event(dict(shared))).status == 200
                    slack.app_url = two.url
                    notice = {"type": "file_shared", "channel_id": CHANNEL, "file_id": meta["id"], "user_id": ANA,
                              "file": {"id": meta["id"]}, "event_ts": slack.next_ts()}
                    assert (await slack.deliver_event(notice)).status == 200
                    await slack.wait_until(lambda: slack.posts(CHANNEL, shared["ts"]), what="the upload's note")
                    await settle_both()
                    assert len(slack.posts(CHANNEL, shared["ts"])) == 1
                    assert [len([e for e in found if isinstance(e, Upload)]) for found in events] == [1, 0]

                    # A mention: delivered to the first replica, Slack's retry of it to the second.
                    asked = slack.say(CHANNEL, ANA, f"<@{BOT_USER}> {ON_CALL}")
                    callback = slack.event_callback(slack.events_for(asked)[1])
                    slack.app_url = one.url
                    first = await slack.deliver_callback(callback)
                    slack.app_url = two.url
                    retry = await slack.deliver_callback(callback, retry=1)
                    assert first.status == retry.status == 200
                    await slack.wait_until(lambda: slack.posts(CHANNEL, asked["ts"]), what="the answer")
                    await settle_both()
                    assert len(slack.posts(CHANNEL, asked["ts"])) == 1
                    assert [len([e for e in found if isinstance(e, Question)]) for found in events] == [1, 0]
                assert not slack.rejected(), slack.rejected()
        finally:
            for bot in bots:
                await bot.stop()

    asyncio.run(session())


@pytest.mark.parametrize("mode", MODES)
def test_the_courier_posts_to_the_channel_and_thread_named(engine: Engine, tmp_path: Path, mode: str) -> None:
    """What a worker process produced (a rebuild's progress and result) is posted through the
    courier the app registered once serving, as replies to events are."""

    async def body(slack: SlackStandIn, running: SlackRunning, bot: Assistant) -> None:
        courier = bot.couriers["slack"]
        asked = slack.say(CHANNEL, ANA, f"<@{BOT_USER}> rebuild")
        await courier(ReplyAddress(key(), asked["ts"]))(Reply(ReplyKind.PROGRESS, "Summarising layer 1 of 3"))
        await courier(ReplyAddress(key("C200")))(Reply(ReplyKind.INFO, "The tree is rebuilt: 3 layers."))
        # No person to show it to: a private reply goes to the conversation like any other.
        await courier(ReplyAddress(key("C200")))(Reply(ReplyKind.INFO, "Only for you.", private=True))
        [progress] = slack.posts(CHANNEL, asked["ts"])
        assert "Summarising layer 1 of 3" in progress["text"]
        done, private = slack.posts("C200")
        assert "thread_ts" not in done and "The tree is rebuilt: 3 layers." in done["text"]
        assert "Only for you." in private["text"] and not slack.ephemerals()
        assert len(slack.posts()) == 3

    run(engine, tmp_path, mode, body)


# -- sources --------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_pins_threads_and_unpins_feed_the_sources(engine: Engine, tmp_path: Path, mode: str) -> None:
    async def body(slack: SlackStandIn, running: SlackRunning, bot: Assistant) -> None:
        note, _ = await slack.user_says(CHANNEL, BEN, "Deploys are frozen on Fridays after noon &amp; on holidays.")
        await slack.pin(CHANNEL, ANA, note["ts"])
        [added] = await slack.wait_until(lambda: slack.posts(CHANNEL, note["ts"]), what="the pin's note")
        assert added["text"].startswith("Added “Ben: Deploys are frozen on Fridays after noon &amp;")

        root, _ = await slack.user_says(CHANNEL, ANA, "How do we roll back a release?")
        await slack.user_says(CHANNEL, BEN, "Run the rollback job from the release page.", thread_ts=root["ts"])
        await slack.pin(CHANNEL, ANA, root["ts"])
        await slack.wait_until(lambda: slack.posts(CHANNEL, root["ts"]), what="the thread pin's note")
        await settle(running, bot)

        sources = {s.external_id: s for s in engine.sources(key())}
        message = sources[f"{CHANNEL}:{note['ts']}"]
        assert message.kind is SourceKind.MESSAGE and message.link == slack.permalink_of(CHANNEL, note["ts"])
        thread = sources[f"{CHANNEL}:{root['ts']}"]
        assert thread.kind is SourceKind.THREAD and thread.title.startswith("Thread by Ana: How do we roll back")
        assert "rollback job" in engine.store.channel(key()).source_text(thread.id)

        # A file announced only by file_shared: its details come from files.info.
        meta = slack.add_file(BEN, "runbook.txt", b"The runbook says: restart the queue worker first.")
        await slack.deliver_event({"type": "file_shared", "channel_id": CHANNEL, "file_id": meta["id"],
                                   "user_id": BEN, "file": {"id": meta["id"]}, "event_ts": slack.next_ts()})
        await slack.wait_until(lambda: "Added “runbook" in lines_of(slack.posts(CHANNEL)), what="the file note")
        assert slack.calls_of("files.info", file=meta["id"])

        await slack.unpin(CHANNEL, ANA, note["ts"])
        await slack.wait_until(lambda: len(slack.posts(CHANNEL, note["ts"])) == 2, what="the unpin's note")
        assert slack.posts(CHANNEL, note["ts"])[1]["text"].startswith("Removed “Ben: Deploys")
        await settle(running, bot)
        assert f"{CHANNEL}:{note['ts']}" not in {s.external_id for s in engine.sources(key())}

    run(engine, tmp_path, mode, body)


@pytest.mark.parametrize("mode", ["http"])  # how the event came does not matter to what an edit does
def test_an_edited_pinned_message_changes_what_the_bot_answers(engine: Engine, tmp_path: Path, mode: str) -> None:
    question = "When are deploys frozen?"

    async def answer(slack: SlackStandIn, running: SlackRunning, bot: Assistant) -> tuple[str, str]:
        """The answer's text, and the thread it went to."""
        asked, _ = await slack.user_says(CHANNEL, ANA, f"<@{BOT_USER}> {question}")
        [posted] = await slack.wait_until(lambda: slack.posts(CHANNEL, asked["ts"]), what="the answer")
        await settle(running, bot)
        return str(posted["text"]), str(asked["ts"])

    async def body(slack: SlackStandIn, running: SlackRunning, bot: Assistant) -> None:
        note, _ = await slack.user_says(CHANNEL, BEN, "Deploys are frozen on Fridays after noon.")
        other, _ = await slack.user_says(CHANNEL, BEN, "Lunch is at one.")
        await slack.pin(CHANNEL, ANA, note["ts"])
        await slack.wait_until(lambda: slack.posts(CHANNEL, note["ts"]), what="the pin's note")
        await settle(running, bot)
        before, answered_in = await answer(slack, running, bot)
        assert "Fridays" in before, before

        await slack.edit(CHANNEL, other["ts"], "Lunch is at two.")  # no source: nothing said, nothing stored
        await slack.edit(CHANNEL, note["ts"], "Deploys are frozen on Thursdays after noon, from now on.")
        [_, updated] = await slack.wait_until(lambda: slack.posts(CHANNEL, note["ts"])[1:] and
                                              slack.posts(CHANNEL, note["ts"]), what="the edit's note")
        assert updated["text"].startswith("Updated “Ben: Deploys are frozen on Thursdays"), updated["text"]
        [_, told] = await slack.wait_until(lambda: slack.posts(CHANNEL, answered_in)[1:] and
                                           slack.posts(CHANNEL, answered_in), what="the answer's note")
        assert "This answer cites material that changed after it was given" in told["text"], told  # in its thread
        await settle(running, bot)
        sources = [s for s in engine.sources(key()) if s.external_id == f"{CHANNEL}:{note['ts']}"]
        assert len(sources) == 1, sources  # the earlier text is gone, not kept beside the new one
        assert "Ana" in sources[0].added_by  # still credited to who pinned it
        assert sources[0].link == slack.permalink_of(CHANNEL, note["ts"])
        assert not slack.posts(CHANNEL, other["ts"])
        assert len(engine.sources(key())) == 1
        after, _ = await answer(slack, running, bot)
        assert "Thursdays" in after and "Fridays" not in after, after

    run(engine, tmp_path, mode, body)


@pytest.mark.parametrize("mode", ["socket"])
def test_a_pinned_thread_picks_up_replies_added_after_the_pin(engine: Engine, tmp_path: Path, mode: str) -> None:
    async def body(slack: SlackStandIn, running: SlackRunning, bot: Assistant) -> None:
        root, _ = await slack.user_says(CHANNEL, ANA, "How do we roll back a release?")
        await slack.user_says(CHANNEL, BEN, "Run the rollback job from the release page.", thread_ts=root["ts"])
        await slack.pin(CHANNEL, ANA, root["ts"])
        await slack.wait_until(lambda: slack.posts(CHANNEL, root["ts"]), what="the thread pin's note")
        await settle(running, bot)
        other, _ = await slack.user_says(CHANNEL, BEN, "Is the canteen open today?")
        await slack.user_says(CHANNEL, ANA, "Yes, until three.", thread_ts=other["ts"])  # no source: left alone

        await slack.user_says(CHANNEL, ANA, "Then tell the release channel within ten minutes.", thread_ts=root["ts"])

        def thread_text() -> str:
            sources = engine.sources(key())
            return engine.store.channel(key()).source_text(sources[0].id) if len(sources) == 1 else ""

        await slack.wait_until(lambda: "within ten minutes" in thread_text(), what="the thread's update")
        await settle(running, bot)
        [thread] = engine.sources(key())
        assert "rollback job" in thread_text()
        # Quietly: the bot said nothing in the thread but the pin's note.
        assert [p["text"].split(" ", 1)[0] for p in slack.posts(CHANNEL, root["ts"])] == ["Added"]

        # A reply edited later changes the thread too: the source takes the new wording.
        rollback = next(m for m in slack.thread(CHANNEL, root["ts"]) if "rollback job" in m.get("text", ""))
        await slack.edit(CHANNEL, rollback["ts"], "Run the rollback job from the deploy dashboard.")
        await slack.wait_until(lambda: "deploy dashboard" in thread_text(), what="the edited reply in the source")
        assert "release page" not in thread_text()
        assert thread.link == slack.permalink_of(CHANNEL, root["ts"]) and "Ana" in thread.added_by
        assert not [p for p in slack.posts(CHANNEL, other["ts"]) if p["user"] == BOT_USER]

    run(engine, tmp_path, mode, body)


@pytest.mark.parametrize("mode", MODES)
def test_a_download_refused_for_the_token_is_reported(
    engine: Engine, tmp_path: Path, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def body(slack: SlackStandIn, running: SlackRunning, bot: Assistant) -> None:
        slack.download_token = "xoxb-of-another-app"  # our token is wrong for downloads: Slack's sign-in page
        shared, _ = await slack.share_file(CHANNEL, ANA, "notes.md", b"# Notes\nSome notes.", mimetype="text/markdown")
        [note] = await slack.wait_until(lambda: slack.posts(CHANNEL, shared["ts"]), what="the failure note")
        assert "I could not download “notes.md”" in note["text"] and "files:read" in note["text"]
        reference = re.search(r"reference (\w+)", note["text"]).group(1)  # type: ignore[union-attr]
        assert any(reference in r.getMessage() and "notes.md" in r.getMessage() for r in caplog.records)
        await settle(running, bot)
        assert engine.sources(key()) == []
        assert not slack.reactions  # the working reaction came off

    with caplog.at_level(logging.INFO):
        run(engine, tmp_path, mode, body)


@pytest.mark.parametrize("mode", ["socket"])  # the download does not depend on how the event came
def test_an_oversized_file_is_refused_with_its_true_size(
    store: ChromaStore, embedder: SentenceTransformerEmbedder, tmp_path: Path, mode: str
) -> None:
    # The download stops one byte past the limit; the size in the refusal is Slack's.
    engine = make_engine(store, embedder, EngineSettings(max_file_bytes=1000))

    async def body(slack: SlackStandIn, running: SlackRunning, bot: Assistant) -> None:
        shared, _ = await slack.share_file(CHANNEL, ANA, "big.txt", b"x" * 5000)
        [note] = await slack.wait_until(lambda: slack.posts(CHANNEL, shared["ts"]), what="the refusal")
        assert "the file is 4.9 KB, over the limit of 1000 bytes" in note["text"]
        await settle(running, bot)
        assert engine.sources(key()) == []

    run(engine, tmp_path, mode, body)


@pytest.mark.parametrize("mode", ["socket"])  # the download does not depend on how the event came
def test_the_token_goes_only_to_slack_and_a_direct_messages_files_stay_in_it(
    engine: Engine, tmp_path: Path, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def body(slack: SlackStandIn, running: SlackRunning, bot: Assistant) -> None:
        # Another loopback port plays a host outside Slack, recording whatever reaches it.
        seen: list[dict[str, str]] = []

        async def elsewhere(request: web.Request) -> web.Response:
            seen.append(dict(request.headers))
            return web.Response(body=b"The on-call engineer carries the pager.", content_type="text/plain")

        server = web.Application()
        server.router.add_get("/{path:.*}", elsewhere)
        runner = web.AppRunner(server, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        try:
            outside = f"http://127.0.0.1:{runner.addresses[0][1]}"
            shared, _ = await slack.share_file(CHANNEL, ANA, "notes.txt", b"unused", url_root=outside)
            [note] = await slack.wait_until(lambda: slack.posts(CHANNEL, shared["ts"]), what="the refusal note")
        finally:
            await runner.cleanup()
        assert "I could not download “notes.txt”" in note["text"] and "does not point to Slack" in note["text"]
        assert seen == []  # no request at all, so no token
        await settle(running, bot)
        assert engine.sources(key()) == []
        assert any("points outside Slack" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)
        assert slack.bot_token not in caplog.text

        # A file shared in a direct conversation is a source of that conversation only.
        shared, _ = await slack.share_file("DANA", ANA, "notes.md", SAMPLE.read_bytes(), mimetype="text/markdown",
                                           im=True)
        await slack.wait_until(lambda: slack.posts("DANA"), what="the upload's note")
        await settle(running, bot)
        assert [s.external_id for s in engine.sources(key("DANA"))] == [shared["files"][0]["id"]]
        assert engine.sources(key()) == []

    with caplog.at_level(logging.INFO):
        run(engine, tmp_path, mode, body)


# -- slash commands and buttons ---------------------------------------------------------------


async def slash(slack: SlackStandIn, user: str, text: str, channel: str = CHANNEL) -> None:
    delivery = await slack.slash(channel, user, text)
    assert delivery.status == 200 and delivery.seconds < ACK_LIMIT_S


async def new_post(slack: SlackStandIn, before: int, what: str, channel: str = CHANNEL) -> dict[str, Any]:
    posts = await slack.wait_until(lambda: slack.posts(channel)[before:], what=what)
    return posts[0]


@pytest.mark.parametrize("mode", MODES)
def test_slash_commands(engine: Engine, tmp_path: Path, mode: str) -> None:
    async def body(slack: SlackStandIn, running: SlackRunning, bot: Assistant) -> None:
        note, _ = await slack.user_says(CHANNEL, BEN, "Deploys are frozen on Fridays after noon.")
        await slack.pin(CHANNEL, ANA, note["ts"])
        other, _ = await slack.user_says(CHANNEL, BEN, "Incidents are reviewed every Tuesday by the whole team.")
        await slack.pin(CHANNEL, ANA, other["ts"])
        await slack.wait_until(lambda: slack.posts(CHANNEL, other["ts"]), what="the pins' notes")
        await settle(running, bot)

        count = len(slack.posts(CHANNEL))
        await slash(slack, BEN, "help")
        assert "Commands:" in (await new_post(slack, count, "help"))["text"]

        count = len(slack.posts(CHANNEL))
        await slash(slack, BEN, "status")
        assert "No tree built yet; 2 sources" in (await new_post(slack, count, "status"))["text"]

        count = len(slack.posts(CHANNEL))
        await slash(slack, BEN, "sources")
        listing = (await new_post(slack, count, "sources"))["text"]
        assert "2 sources:" in listing and "Ben: Deploys are frozen" in listing

        # ask: the question is shown in the channel, the answer goes in a thread under it.
        count = len(slack.posts(CHANNEL))
        await slash(slack, BEN, "ask When are deploys frozen?")
        echo = await new_post(slack, count, "the question's echo")
        assert block_ids(echo) == ["raptor_asked", "raptor_question_0"] and "thread_ts" not in echo
        echo_ts = next(m["ts"] for m in slack.messages[CHANNEL] if "raptor_question_0" in block_ids(m))
        [answer] = await slack.wait_until(lambda: slack.posts(CHANNEL, echo_ts), what="the slash answer")
        assert "Fridays" in answer["text"] and "raptor_feedback" in block_ids(answer)

        # rebuild is for admins: Ben is told privately, Ana's starts and reports.
        await slash(slack, BEN, "rebuild")
        [refusal] = await slack.wait_until(lambda: slack.ephemerals(CHANNEL), what="the refusal")
        assert refusal["user"] == BEN and "Only this channel's admins" in refusal["text"]
        count = len(slack.posts(CHANNEL))
        await slash(slack, ANA, "rebuild")
        assert (await new_post(slack, count, "rebuild started"))["text"].startswith("Rebuild started")
        await settle(running, bot)
        assert "Rebuilt" in lines_of(slack.posts(CHANNEL)[count:])

        # tree: the outline as text, the picture uploaded (files_upload_v2, three steps).
        count = len(slack.posts(CHANNEL))
        await slash(slack, BEN, "tree")
        outline = await new_post(slack, count, "tree")
        assert "tree v1" in outline["text"]
        [picture] = await slack.wait_until(lambda: [u for u in slack.uploads.values() if u.channel], what="upload")
        assert picture.data.startswith(b"\x89PNG") and picture.channel == CHANNEL and picture.filename.endswith(".png")
        assert slack.calls_of("files.getUploadURLExternal") and slack.calls_of("files.completeUploadExternal")

        node_id = engine.top_nodes(key(), 1)[0].id
        count = len(slack.posts(CHANNEL))
        await slash(slack, BEN, f"node {node_id}")
        assert node_id in (await new_post(slack, count, "node"))["text"]

        source = engine.sources(key())[0]
        count = len(slack.posts(CHANNEL))
        await slash(slack, ANA, f"forget {source.id[:10]}")
        assert (await new_post(slack, count, "forget"))["text"].startswith("Forgot")

        # An unknown subcommand's help is Ben's only: tests/adapters/slack/test_deliveries.py.

    run(engine, tmp_path, mode, body)


@pytest.mark.parametrize("mode", MODES)
def test_summary_buttons_and_votes(built_engine: Engine, tmp_path: Path, mode: str) -> None:
    channel = "CBUILT"

    async def body(slack: SlackStandIn, running: SlackRunning, bot: Assistant) -> None:
        asked, _ = await slack.user_says(channel, ANA, f"<@{BOT_USER}> {OVERVIEW}")
        [answer] = await slack.wait_until(lambda: slack.posts(channel, asked["ts"]), what="the answer")
        buttons = [b["accessory"] for b in answer["blocks"] if b.get("accessory", {}).get("action_id") == ACTION_NODE]
        assert buttons, answer["blocks"]
        assert any("summary, layer" in b["text"]["text"] for b in answer["blocks"] if "accessory" in b)
        # The answer as Slack keeps it (with its ts), which is what a click carries.
        posted = next(m for m in slack.messages[channel] if m.get("thread_ts") == asked["ts"])

        node_id = buttons[0]["value"]
        delivery = await slack.click(channel, BEN, posted, ACTION_NODE, node_id)
        assert delivery.status == 200 and delivery.seconds < ACK_LIMIT_S
        await slack.wait_until(lambda: len(slack.posts(channel, asked["ts"])) == 2, what="the node")
        shown = slack.posts(channel, asked["ts"])[1]["text"]
        assert re.match(rf"Summary \(layer \d+\) {node_id} ", shown) and "Summarises (" in shown, shown

        # Votes on Slack's native 👍/👎 (tests/adapters/slack/test_native_feedback.py); the bot's
        # own buttons on answers posted before it still count (the value is the answer id).
        [feedback] = [b for b in answer["blocks"] if b["type"] == "context_actions"]
        answer_id = feedback["elements"][0]["positive_button"]["value"].removeprefix("up:")
        await slack.click_feedback(channel, BEN, posted, up=True)
        await slack.click(channel, ANA, posted, ACTION_VOTE_DOWN, answer_id)
        await slack.wait_until(lambda: slack.ephemerals(channel) and slack.opened_views(), what="thanks and the form")
        await settle(running, bot)
        # 👍 is thanked; 👎 opens the feedback form instead (tests/adapters/slack/test_feedback_form.py).
        [thanks] = slack.ephemerals(channel)
        assert thanks["thread_ts"] == asked["ts"] and "Thanks, your 👍" in thanks["text"]
        [record] = [r for r in built_engine.answers(key(channel)) if r.answer_id == answer_id]
        assert record.votes == {BEN: 1, ANA: -1} and record.question == OVERVIEW

    run(built_engine, tmp_path, mode, body)


# -- limits, failures, malformed payloads --------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_long_answers_are_split_within_the_limits_and_private_pictures_sent_directly(engine: Engine, tmp_path: Path,
                                                                      mode: str) -> None:
    text = "\n\n".join("Escalations & <rollbacks> belong to the on-call engineer. " * 14 for _ in range(70))
    citations = tuple(CitationView(n, CitationKind.SUMMARY, 1, f"s1.{n}", "T&" * 120, "https://x.test/d",
                                   "Q<" * 400) for n in range(1, 66))
    reply = Reply(ReplyKind.ANSWER, text, citations, answer_id="a1", thread="1700000000.000001")

    async def body(slack: SlackStandIn, running: SlackRunning, bot: Assistant) -> None:
        await running.handling.outbox.deliver(Target(CHANNEL, ANA), reply)
        posts = slack.posts(CHANNEL)
        assert len(posts) >= 3 and all(p["thread_ts"] == reply.thread for p in posts)
        assert sum(len(p["blocks"]) for p in posts) > 50
        assert sum(1 for p in posts for b in p["blocks"] if b["type"] == "context_actions") == 1

        # A private reply is ephemeral; files cannot be, so its picture goes to a direct conversation.
        picture = Attachment("tree.png", b"\x89PNG fake", "image/png")
        await running.handling.outbox.deliver(Target(CHANNEL, BEN), Reply(ReplyKind.INFO, "Yours only.",
                                                                        attachments=(picture,), private=True))
        [private] = slack.ephemerals(CHANNEL)
        assert private["user"] == BEN and private["text"] == "Yours only."
        [upload] = [u for u in slack.uploads.values() if u.channel]
        assert (upload.channel, upload.data) == (f"D{BEN}", picture.data)
        assert len(slack.posts(CHANNEL)) == len(posts)

    run(engine, tmp_path, mode, body)


def test_the_stand_in_refuses_what_slack_refuses() -> None:
    async def session() -> None:
        async with SlackStandIn() as slack:
            client = AsyncWebClient(token=slack.bot_token, base_url=slack.base_url)
            section = {"type": "section", "text": {"type": "mrkdwn", "text": "x"}}
            cases = [
                ({"text": "x", "blocks": [section] * 51}, "invalid_blocks"),
                ({"text": "x" * 40_001}, "msg_too_long"),
                ({"text": "x", "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": "y" * 3001}}]},
                 "invalid_blocks"),
                ({"text": "x", "blocks": [{**section, "block_id": "a"}, {**section, "block_id": "a"}]},
                 "invalid_blocks"),
            ]
            for arguments, error in cases:
                with pytest.raises(SlackApiError) as refused:
                    await client.chat_postMessage(channel=CHANNEL, **arguments)
                assert refused.value.response["error"] == error
            assert (await client.chat_postMessage(channel=CHANNEL, text="x", blocks=[section] * 50))["ok"]

    asyncio.run(session())


@pytest.mark.parametrize("mode", MODES)
def test_slack_refusing_a_reply_is_reported_with_a_reference(
    engine: Engine, tmp_path: Path, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def body(slack: SlackStandIn, running: SlackRunning, bot: Assistant) -> None:
        slack.fail("chat.postMessage", "ratelimited")
        asked, _ = await slack.user_says(CHANNEL, ANA, f"<@{BOT_USER}> {ON_CALL}")
        [note] = await slack.wait_until(lambda: slack.ephemerals(CHANNEL), what="the failure note")
        assert note["user"] == ANA and note["thread_ts"] == asked["ts"]
        assert "I could not post my reply here (Slack said: ratelimited)" in note["text"]
        reference = re.search(r"reference (\w+)", note["text"]).group(1)  # type: ignore[union-attr]
        assert any(reference in r.getMessage() and "ratelimited" in r.getMessage() for r in caplog.records)

        # In a channel the bot is not in, nothing can be posted: the slash command's response_url still works.
        slack.not_member.add("CNOTIN")
        await slash(slack, BEN, "ask anything?", channel="CNOTIN")
        [(_, said, _)] = await slack.wait_until(lambda: slack.responses, what="the response_url note")
        assert said["response_type"] == "ephemeral" and "invite me" in said["text"] and "reference" in said["text"]
        await settle(running, bot)
        for call in slack.rejected():  # expected refusals: Slack's limits were never the reason
            assert call.error in ("ratelimited", "not_in_channel"), call
        slack.calls = [c for c in slack.calls if c.ok]

    with caplog.at_level(logging.INFO):
        run(engine, tmp_path, mode, body)


@pytest.mark.parametrize("mode", MODES)
def test_malformed_payloads_do_not_bring_the_app_down(
    engine: Engine, tmp_path: Path, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def body(slack: SlackStandIn, running: SlackRunning, bot: Assistant) -> None:
        broken: list[Any] = [
            {"type": "app_mention"},  # no channel, user or ts
            {"type": "message", "subtype": "file_share", "files": "nope", "channel": CHANNEL, "user": BEN, "ts": "1.1"},
            {"type": "pin_added", "item": None},
            {"type": "file_shared", "file_id": "FNOPE", "channel_id": CHANNEL, "user_id": BEN},  # files.info fails
        ]
        for event in broken:
            await slack.deliver_event(event)
        # bolt itself fails on this one (500, so no socket acknowledgement): it is not answered, nothing breaks.
        junk = await slack.deliver_callback({"type": "event_callback", "event_id": "EvBAD", "event": "not an object"},
                                            ack_timeout=1.0)
        assert junk.status in (0, 500)
        if mode == "socket":
            await slack.deliver_raw_socket("this is not JSON")
        else:
            await slack.post_http("{not json", "application/json")  # signed, but not JSON
        await settle(running, bot)
        # The file Slack could not describe is reported, under a reference.
        [failed] = [c for c in slack.rejected()]
        assert (failed.method, failed.error) == ("files.info", "file_not_found")
        assert "I could not finish that (Slack said: file_not_found)" in lines_of(slack.posts(CHANNEL))
        slack.calls.remove(failed)
        asked, _ = await slack.user_says(CHANNEL, ANA, f"<@{BOT_USER}> still there?")
        await slack.wait_until(lambda: slack.posts(CHANNEL, asked["ts"]), what="an answer after the junk")
        assert not [r for r in caplog.records if "background task failed" in r.getMessage()]

    with caplog.at_level(logging.INFO):
        run(engine, tmp_path, mode, body)


def test_http_mode_refuses_bad_and_stale_signatures(engine: Engine, tmp_path: Path) -> None:
    async def body(slack: SlackStandIn, running: SlackRunning, bot: Assistant) -> None:
        asked = slack.say(CHANNEL, ANA, f"<@{BOT_USER}> {ON_CALL}")
        payload = json.dumps(slack.event_callback(slack.events_for(asked)[1]))
        bad = await slack.post_http(payload, "application/json", secret="not-the-secret")
        stale = await slack.post_http(payload, "application/json", timestamp=str(int(time.time()) - 6 * 60))
        command = await slack.post_http("command=%2Fraptor&text=help&team_id=T111&channel_id=C100&user_id=UANA",
                                        "application/x-www-form-urlencoded", secret="wrong")
        assert (bad.status, stale.status, command.status) == (401, 401, 401)
        await settle(running, bot)
        assert not slack.posts() and not slack.calls_of("reactions.add")

        challenge = await slack.post_http(json.dumps({"type": "url_verification", "challenge": "c-42",
                                                      "token": "x"}), "application/json")
        assert challenge.status == 200 and "c-42" in challenge.body
        good = await slack.post_http(payload, "application/json")
        assert good.status == 200
        await slack.wait_until(lambda: slack.posts(CHANNEL, asked["ts"]), what="the answer to a signed request")

    run(engine, tmp_path, "http", body)


# -- start-up, stop, people ---------------------------------------------------------------------------


@pytest.mark.parametrize(("mode", "wrong"), [("socket", "bot_token"), ("socket", "app_token"), ("http", "bot_token")])
def test_refused_tokens_stop_the_start_with_a_clear_error(engine: Engine, tmp_path: Path, mode: str,
                                                          wrong: str) -> None:
    async def session() -> None:
        bot = Assistant(bot_config(tmp_path), AsyncEngine(engine))
        async with SlackStandIn() as slack:
            value = SecretStr("xoxb-wrong" if wrong == "bot_token" else "xapp-wrong")
            config = slack_config(slack, mode).model_copy(update={wrong: value})
            with pytest.raises(BotError, match=f"slack.{wrong}"):
                await asyncio.wait_for(run_slack(bot, config), 10)

    asyncio.run(session())


def test_people_are_looked_up_and_cached_briefly() -> None:
    async def session() -> None:
        async with SlackStandIn() as slack:
            slack.add_user(ANA, "Ana", admin=True)
            slack.add_user(BEN, "Ben", owner=True)
            now = [0.0]
            people = People(AsyncWebClient(token=slack.bot_token, base_url=slack.base_url), TEAM, ttl_s=60,
                            clock=lambda: now[0])
            ana = await people.get(ANA)
            assert (ana.name, ana.manages_channel) == ("Ana", True)
            assert (await people.get(BEN)).manages_channel  # owners manage too
            await people.get(ANA)
            assert len(slack.calls_of("users.info", user=ANA)) == 1
            now[0] = 61.0
            await people.get(ANA)
            assert len(slack.calls_of("users.info", user=ANA)) == 2
            unknown = await people.get("UGHOST")  # users.info fails: known by id, manages nothing
            assert (unknown.id, unknown.manages_channel) == ("UGHOST", False)

    asyncio.run(session())


@pytest.mark.parametrize(("drain_s", "answered"), [(10.0, True), (0.2, False)])
def test_stopping_lets_work_in_hand_finish_for_a_while(engine: Engine, tmp_path: Path, drain_s: float,
                                                        answered: bool) -> None:
    async def session() -> None:
        bot = Assistant(bot_config(tmp_path), AsyncEngine(engine))
        await bot.start(warm_up=False)
        try:
            async with SlackStandIn() as slack:
                slack.latency["users.info"] = 0.6  # a slow Slack: the event is still in hand at the stop
                async with app_running(bot, slack, "socket", drain_timeout_s=drain_s):
                    asked, _ = await slack.user_says(CHANNEL, ANA, f"<@{BOT_USER}> {ON_CALL}")
                    stopping = time.monotonic()
                assert time.monotonic() - stopping < 3.0
                assert bool(slack.posts(CHANNEL, asked["ts"])) is answered
                assert not slack.reactions  # never left behind
        finally:
            await bot.stop()

    asyncio.run(session())
