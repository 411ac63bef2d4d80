"""A workspace's daily ceiling of model calls, end to end on Slack (issue 28, point 7).

Real components: slack-bolt against the stand-in Slack, the engine answering through the
OpenAI-compatible stub (``testkit/openai_stub.py``) over 127.0.0.1. With a ceiling of one
model call a day, the first question is answered by the model and counted; the next, in
another channel of the same workspace, is refused with a clear reply and reaches no model.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.config import BotConfig, Config, LLMConfig, ModelBudgetConfig, RateLimitConfig
from bot.engine_calls import AsyncEngine
from bot.runtime import Assistant
from raptor_engine import ChromaStore, Engine, ExtractiveSummarizer, LLMAnswerer, LLMClient, LLMSettings
from raptor_engine.embedding import SentenceTransformerEmbedder
from raptor_engine.types import ChannelKey
from testkit.openai_stub import OpenAIStub, running_stub
from testkit.slack_api import BOT_USER, TEAM, SlackStandIn, app_running
from tests.conftest import SAMPLE

ANA = "UANA"
QUESTION = "What does the on-call engineer do?"
ANSWER = "The on-call engineer carries the pager for a week [1]."


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    with running_stub(answer_text=ANSWER) as server:
        yield server


def chat_requests(stub: OpenAIStub) -> int:
    return len([r for r in stub.requests if r.path.endswith("/chat/completions")])


def test_the_daily_model_ceiling_holds_across_a_workspaces_channels(
    stub: OpenAIStub, embedder: SentenceTransformerEmbedder, tmp_path: Path
) -> None:
    settings = LLMSettings(base_url=stub.base_url, model="stub-model", timeout_s=5.0, max_retries=0)
    budget = ModelBudgetConfig(calls_per_workspace_per_day=1)
    config = Config(data_dir=tmp_path / "data", llm=LLMConfig(base_url=stub.base_url, model="stub-model"),
                    bot=BotConfig(rate_limits=RateLimitConfig(questions_per_user_per_minute=0), model_budget=budget))

    async def session(client: LLMClient) -> None:
        counter = embedder.token_counter()
        engine = Engine(ChromaStore.embedded(tmp_path / "chroma"), embedder, counter, ExtractiveSummarizer(counter),
                        LLMAnswerer(client, settings))
        for channel in ("C100", "C200"):
            engine.ingest_bytes(ChannelKey("slack", TEAM, channel), SAMPLE.read_bytes(), "handbook.md", "", "Ana", "F")
        bot = Assistant(config, AsyncEngine(engine))
        await bot.start(warm_up=False)
        try:
            async with SlackStandIn() as slack:
                slack.add_user(ANA, "Ana", admin=True)
                async with app_running(bot, slack, "socket") as running:
                    first, _ = await slack.user_says("C100", ANA, f"<@{BOT_USER}> {QUESTION}")
                    # The answer streams in its thread (chat.startStream ... chat.update).
                    await slack.wait_until(lambda: slack.calls_of("chat.update", channel="C100"), what="the answer",
                                           timeout=20)
                    await running.handling.wait_idle()
                    assert chat_requests(stub) == 1
                    second, _ = await slack.user_says("C200", ANA, f"<@{BOT_USER}> {QUESTION}")
                    [refusal] = await slack.wait_until(lambda: slack.posts("C200", second["ts"]), what="the refusal")
                    await running.handling.wait_idle()
                    assert refusal["text"].startswith("This workspace has used its 1 language-model call for today "
                                                      "(UTC), the most allowed"), refusal["text"]
                    assert "after midnight UTC" in refusal["text"]
                    assert chat_requests(stub) == 1  # the refused question reached no model
        finally:
            await bot.stop()

    with LLMClient(settings) as client:
        asyncio.run(session(client))
