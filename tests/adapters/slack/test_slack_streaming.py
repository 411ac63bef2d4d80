"""Streamed answers on Slack: the real slack-bolt app, the real engine, a language model that streams.

Real components only: slack-bolt and slack_sdk talk to ``testkit/slack_api.py``
(which knows ``chat.startStream``/``appendStream``/``stopStream`` and ``chat.update``,
and can refuse streaming or rate-limit updates with HTTP 200 ``ok: false,
"ratelimited"`` as Slack does); the engine answers through the real ``openai``
client from ``testkit/openai_stub.py``, which streams at 30 tokens a second. The
finished message must be exactly the non-streamed answer as the adapter renders it.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from adapters.slack.app import SlackRunning
from adapters.slack.blocks import render_reply
from adapters.slack.sending import STREAM_EVERY_S, UPDATE_EVERY_S
from bot import replies
from bot.config import BotConfig, Config, LLMConfig, RateLimitConfig
from bot.engine_calls import AsyncEngine
from bot.neutral import Stage
from bot.runtime import Assistant
from raptor_engine.embedding import SentenceTransformerEmbedder
from raptor_engine.engine import Engine
from raptor_engine.llm import LLMAnswerer, LLMClient, LLMSettings
from raptor_engine.store import ChromaStore
from raptor_engine.summarizing import ExtractiveSummarizer
from raptor_engine.types import ChannelKey
from testkit.openai_stub import Behaviour, OpenAIStub, running_stub
from testkit.slack_api import BOT_USER, TEAM, ApiCall, SlackStandIn, app_running, as_slack_keeps
from tests.conftest import SAMPLE

ANA = "UANA"
CHANNEL = "C100"
QUESTION = "What does the on-call engineer do?"
# About 60 tokens at 30 a second: two seconds of writing, citations to renumber and one to drop.
ANSWER = ("The on-call engineer carries the pager for a week [2] and watches the alerts channel [1]. "
          "They are the first responder for incidents and hand over in a fifteen-minute meeting [99]. "
          "If a page is not acknowledged within ten minutes, it escalates to the secondary [1][2].\n\n"
          "Every page is also printed on paper and filed by the finance department.")  # supported by nothing
FIRST_WORDS_S = 1.5

Body = Callable[[SlackStandIn, SlackRunning, Assistant, OpenAIStub], Awaitable[None]]


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    with running_stub(answer_text=ANSWER, tokens_per_s=30.0) as server:
        yield server


def key() -> ChannelKey:
    return ChannelKey("slack", TEAM, CHANNEL)


def run(stub: OpenAIStub, embedder: SentenceTransformerEmbedder, tmp_path: Path, body: Body) -> None:
    """Runs ``body`` with a bot answering through the stub, the Slack stand-in and the app (Socket Mode)."""
    settings = LLMSettings(base_url=stub.base_url, model="stub-model", timeout_s=5.0, max_retries=1,
                           backoff_base_s=0.01)
    limits = RateLimitConfig(questions_per_user_per_minute=0)
    config = Config(data_dir=tmp_path / "data", bot=BotConfig(rate_limits=limits),
                    llm=LLMConfig(base_url=stub.base_url, model="stub-model"))

    async def session(client: LLMClient) -> None:
        counter = embedder.token_counter()
        engine = Engine(ChromaStore.embedded(tmp_path / "chroma"), embedder, counter, ExtractiveSummarizer(counter),
                        LLMAnswerer(client, settings))
        engine.ingest_bytes(key(), SAMPLE.read_bytes(), "aurora-handbook.md", "https://x.test/f", "Ana", "F0")
        bot = Assistant(config, AsyncEngine(engine))
        await bot.start(warm_up=False)
        try:
            async with SlackStandIn() as slack:
                slack.add_user(ANA, "Ana", admin=True)
                async with app_running(bot, slack, "socket") as running:
                    await body(slack, running, bot, stub)
                    await running.handling.wait_idle()
        finally:
            await bot.stop()

    with LLMClient(settings) as client:
        asyncio.run(session(client))


async def ask(slack: SlackStandIn) -> tuple[dict[str, Any], float]:
    """Ana asks the bot in the channel; the question's message and when it was sent (perf_counter)."""
    sent = time.perf_counter()
    asked, _ = await slack.user_says(CHANNEL, ANA, f"<@{BOT_USER}> {QUESTION}")
    return asked, sent


async def expected_messages(bot: Assistant, thread: str) -> list[dict[str, Any]]:
    """The answer as the non-streamed path renders it (same model reply, the kept answer's id)."""
    answer = await bot.engine.answer(key(), QUESTION)
    [kept] = bot.engine.answers(key())
    return [m.payload() for m in render_reply(replies.answer_reply(answer, thread=thread, answer_id=kept.answer_id))]


def streamed_text(calls: list[ApiCall]) -> str:
    return "".join(str(c.params.get("markdown_text") or "") for c in calls)


def gaps(calls: list[ApiCall]) -> list[float]:
    return [b.at - a.at for a, b in zip(calls, calls[1:], strict=False)]


def test_an_answer_streams_natively_in_its_thread(stub: OpenAIStub, embedder: SentenceTransformerEmbedder,
                                                   tmp_path: Path) -> None:
    async def body(slack: SlackStandIn, running: SlackRunning, bot: Assistant, stub: OpenAIStub) -> None:
        asked, sent = await ask(slack)
        await slack.wait_until(lambda: slack.calls_of("chat.update"), what="the finished answer", timeout=20)
        await running.handling.wait_idle()

        [start] = slack.calls_of("chat.startStream")
        appends = slack.calls_of("chat.appendStream")
        [stop] = slack.calls_of("chat.stopStream")
        [update] = slack.calls_of("chat.update")
        assert start.params["thread_ts"] == asked["ts"]
        assert (start.params["recipient_team_id"], start.params["recipient_user_id"]) == (TEAM, ANA)
        # The first words come within the target; the text grows while the model writes, paced.
        assert start.at - sent < FIRST_WORDS_S, start.at - sent
        assert len(appends) >= 1 and start.at < appends[0].at and appends[-1].at < stop.at < update.at
        assert all(gap >= STREAM_EVERY_S - 0.05 for gap in gaps([start, *appends])), gaps([start, *appends])
        # What was streamed is the answer's text, citations already renumbered, [99] gone (a
        # sentence marked unsupported ends the stream where the marked text no longer continues it) ...
        answer = await bot.engine.answer(key(), QUESTION)
        assert answer.text.startswith(streamed_text([start, *appends, stop]))
        assert "[99]" not in answer.text and "[3]" not in answer.text
        # ... and the finished message is the non-streamed answer, rendered exactly, in place,
        # the sentence no passage supports marked in its markdown block and its fallback text.
        [expected] = await expected_messages(bot, asked["ts"])
        shown = slack.shown(CHANNEL, start.params and update.params["ts"])
        assert shown is not None and shown["ts"] == update.params["ts"]
        assert (shown["text"], shown["blocks"]) == (expected["text"], as_slack_keeps(expected["blocks"]))
        [markdown] = [b["text"] for b in shown["blocks"] if b["type"] == "markdown"]
        for text in (markdown, shown["text"]):
            assert "filed by the finance department. ⚠" in text, text
        warning = [b for b in shown["blocks"] if b.get("block_id", "").startswith("raptor_warning")]
        assert warning and replies.UNSUPPORTED_NOTE in json.dumps(warning, ensure_ascii=False)
        assert not slack.posts(CHANNEL, asked["ts"])  # no second message
        assert not slack.rejected(), slack.rejected()

    run(stub, embedder, tmp_path, body)


def test_refused_streaming_falls_back_to_paced_edits_and_ratelimits_lose_nothing(
        stub: OpenAIStub, embedder: SentenceTransformerEmbedder, tmp_path: Path) -> None:
    async def body(slack: SlackStandIn, running: SlackRunning, bot: Assistant, stub: OpenAIStub) -> None:
        slack.streaming_refusal = "unknown_method"
        slack.update_limit = (1, 2.5)  # Slack's "ratelimited", sooner than the adapter's own pace expects
        asked, sent = await ask(slack)
        await slack.wait_until(lambda: any(c.params.get("blocks") for c in slack.calls_of("chat.update")),
                               what="the finished answer", timeout=30)
        await running.handling.wait_idle()

        [draft] = slack.posts(CHANNEL, asked["ts"])
        assert "blocks" not in draft and ANSWER.startswith(draft["text"])  # the first words, as a plain message
        [posted] = [c for c in slack.calls_of("chat.postMessage") if c.params.get("thread_ts") == asked["ts"]]
        assert posted.at - sent < FIRST_WORDS_S, posted.at - sent
        updates = [c for c in slack.calls if c.method == "chat.update"]
        limited = [c for c in updates if c.error == "ratelimited"]
        assert limited, "the stand-in never rate-limited an update: the test proves nothing"
        accepted = [c for c in updates if c.ok]
        # The draft's edits are paced well under Slack's limit (a refused one counts: it was a request);
        # the finished answer goes at once, and after a "ratelimited" is tried again after the delay.
        edits = [c for c in updates if not c.params.get("blocks")]
        finals = [c for c in updates if c.params.get("blocks")]
        assert edits and all(gap >= UPDATE_EVERY_S - 0.05 for gap in gaps([posted, *edits])), gaps([posted, *edits])
        assert finals[-1] is accepted[-1] and all(gap >= 1.0 for gap in gaps(finals)), gaps(finals)
        # The last accepted update is the finished answer, complete: nothing lost to "ratelimited".
        [expected] = await expected_messages(bot, asked["ts"])
        shown = slack.shown(CHANNEL, accepted[-1].params["ts"])
        assert shown is not None and (shown["text"], shown["blocks"]) == (expected["text"], as_slack_keeps(expected["blocks"]))
        assert {c.method for c in slack.rejected()} <= {"chat.startStream", "chat.update"}

    run(stub, embedder, tmp_path, body)


def test_a_stream_broken_midway_ends_in_a_clear_message(stub: OpenAIStub, embedder: SentenceTransformerEmbedder,
                                                         tmp_path: Path) -> None:
    async def body(slack: SlackStandIn, running: SlackRunning, bot: Assistant, stub: OpenAIStub) -> None:
        stub.script(Behaviour.broken(after_tokens=40))
        asked, _ = await ask(slack)
        await slack.wait_until(lambda: slack.calls_of("chat.update"), what="the end of the answer", timeout=20)
        await running.handling.wait_idle()

        [start] = slack.calls_of("chat.startStream")
        assert len(streamed_text([start, *slack.calls_of("chat.appendStream")])) > 20  # words were shown
        shown = slack.shown(CHANNEL, start.params and slack.calls_of("chat.update")[0].params["ts"])
        assert shown is not None
        assert "broke off" in shown["text"] and "carries the pager" not in shown["text"], shown["text"]
        assert not slack.posts(CHANNEL, asked["ts"])  # said in the draft's place, not beside it

    run(stub, embedder, tmp_path, body)


def test_a_question_where_there_is_no_material_streams_nothing_and_says_what_to_add(
        stub: OpenAIStub, embedder: SentenceTransformerEmbedder, tmp_path: Path) -> None:
    """With a model that streams, a mention and ``/raptor ask`` in a channel holding no source
    get ``NO_MATERIAL``, as a plain message: no stream or draft is started, the model is not asked."""
    async def body(slack: SlackStandIn, running: SlackRunning, bot: Assistant, stub: OpenAIStub) -> None:
        empty = "C200"
        asked, _ = await slack.user_says(empty, ANA, f"<@{BOT_USER}> {QUESTION}")
        [mentioned] = await slack.wait_until(lambda: slack.posts(empty, asked["ts"]), what="the mention's reply")
        delivery = await slack.slash(empty, ANA, f"ask {QUESTION}")
        assert delivery.status == 200
        await slack.wait_until(lambda: len(slack.posts(empty)) == 3, what="the slash question's echo and reply")
        await running.handling.wait_idle()
        [slashed] = [p for p in slack.posts(empty) if p.get("thread_ts") not in (None, asked["ts"])]
        for reply in (mentioned, slashed):
            assert reply["text"] == replies.NO_MATERIAL, reply
        assert not [c for c in slack.calls if c.method.startswith(("chat.startStream", "chat.appendStream",
                                                                   "chat.stopStream", "chat.update"))]
        assert stub.requests == []  # nothing was searched, so the model had nothing to answer from
        assert not slack.rejected(), slack.rejected()

    run(stub, embedder, tmp_path, body)


def test_the_status_line_says_writing_while_the_model_writes_and_is_cleared_after(
        stub: OpenAIStub, embedder: SentenceTransformerEmbedder, tmp_path: Path) -> None:
    """Issue 30, point 2: a streamed answer's stages in the question's thread, the last one
    "Writing…" while the model's answer streams, then the line cleared."""
    async def body(slack: SlackStandIn, running: SlackRunning, bot: Assistant, stub: OpenAIStub) -> None:
        asked, _ = await ask(slack)
        await slack.wait_until(lambda: slack.calls_of("chat.update"), what="the finished answer", timeout=20)
        await running.handling.wait_idle()
        lines = slack.statuses(CHANNEL, asked["ts"])
        assert [text for text, _ in lines] == [replies.stage_text(Stage.READING), replies.stage_text(Stage.SEARCHING),
                                                replies.stage_text(Stage.WRITING), ""]
        assert replies.stage_text(Stage.WRITING) == "Writing…"
        [start] = slack.calls_of("chat.startStream")
        [stop] = slack.calls_of("chat.stopStream")
        assert lines[2][1] <= start.at and stop.at <= lines[3][1]

    run(stub, embedder, tmp_path, body)
