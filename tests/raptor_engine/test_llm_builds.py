"""Rebuilds whose summaries come from a language model: accounting, the spending ceiling,
cache hits, the incremental targets and embedding-model mismatches, all counted at the
stand-in OpenAI-compatible server on 127.0.0.1 (reached by the real ``openai`` client)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from raptor_engine.answering import ExtractiveAnswerer
from raptor_engine.engine import Engine, EngineSettings
from raptor_engine.errors import ChannelError, SpendingLimitReached
from raptor_engine.llm import LLMClient, LLMSettings, LLMSummarizer, OpenAIEmbedder
from raptor_engine.metering import SpendingLimits
from raptor_engine.store import ChromaStore
from raptor_engine.types import BuildReport, ChannelKey, Document
from testkit.openai_stub import OpenAIStub
from tests.conftest import SAMPLE, quality_articles

MakeEngine = Callable[..., Engine]
GARDEN = ("Tomatoes are planted in May after the last frost. The community garden opens at seven. "
          "Watering happens in the evening, and the compost is turned every Sunday by volunteers. ") * 6


@pytest.fixture
def llm_engine(stub: OpenAIStub, store: ChromaStore, embedder: Any) -> Iterator[MakeEngine]:
    """Engines whose summaries come from the stub; local embeddings unless ``api_embedder``."""
    clients: list[LLMClient] = []

    def make(spending: SpendingLimits = SpendingLimits(), api_embedder: str = "", concurrency: int = 8) -> Engine:
        settings = LLMSettings(base_url=stub.base_url, model="stub-model", max_retries=1, backoff_base_s=0.01,
                               max_concurrency=concurrency)
        client = LLMClient(settings)
        clients.append(client)
        counter = embedder.token_counter()
        chosen = OpenAIEmbedder(client, api_embedder) if api_embedder else embedder
        return Engine(store, chosen, counter, LLMSummarizer(client, counter, settings), ExtractiveAnswerer(chosen),
                      EngineSettings(spending=spending, max_concurrency=concurrency))

    yield make
    for client in clients:
        client.close()


def chat_calls(stub: OpenAIStub) -> list[dict[str, Any]]:
    return [r.body for r in stub.requests if r.path.endswith("/chat/completions")]


def build(engine: Engine, key: ChannelKey) -> BuildReport:
    return asyncio.run(engine.rebuild(key))


def test_the_build_report_counts_what_the_server_served(stub: OpenAIStub, llm_engine: MakeEngine,
                                                       channel: ChannelKey) -> None:
    engine = llm_engine()
    engine.ingest_file(channel, SAMPLE)
    report = build(engine, channel)
    served = chat_calls(stub)
    assert report.model_calls == len(served) == report.summaries_made > 0
    # The stub counts a word as a token; the report must carry the server's own counts.
    words = sum(len(" ".join(m["content"] for m in body["messages"]).split()) for body in served)
    assert report.prompt_tokens == words
    assert report.completion_tokens > 0 and report.model_seconds > 0


def test_concurrent_builds_on_one_client_are_counted_apart(stub: OpenAIStub, llm_engine: MakeEngine,
                                                          channel: ChannelKey) -> None:
    engine = llm_engine()
    other = ChannelKey(channel.platform, channel.workspace, channel.channel + "-garden")
    engine.ingest_file(channel, SAMPLE)
    engine.ingest(other, Document(GARDEN, "garden"))

    async def both() -> list[BuildReport]:
        return list(await asyncio.gather(engine.rebuild(channel), engine.rebuild(other)))

    first, second = asyncio.run(both())
    assert first.model_calls == first.summaries_made and second.model_calls == second.summaries_made
    assert first.model_calls + second.model_calls == len(chat_calls(stub))


def test_nothing_changed_means_no_calls(stub: OpenAIStub, llm_engine: MakeEngine, channel: ChannelKey) -> None:
    engine = llm_engine()
    engine.ingest_file(channel, SAMPLE)
    build(engine, channel)
    before = len(stub.requests)
    again = build(engine, channel)
    assert len(stub.requests) == before and again.model_calls == 0 and again.summaries_made == 0


def test_a_call_ceiling_stops_the_build_before_spending_past_it(stub: OpenAIStub, llm_engine: MakeEngine,
                                                               channel: ChannelKey) -> None:
    engine = llm_engine()
    engine.ingest_file(channel, SAMPLE)
    first = build(engine, channel)
    engine.ingest(channel, Document(GARDEN, "garden"))
    capped = llm_engine(SpendingLimits(max_calls=1))
    before = len(chat_calls(stub))
    with pytest.raises(SpendingLimitReached) as caught:
        build(capped, channel)
    message = str(caught.value)
    assert "ceiling of 1 language-model calls" in message and "previous tree still answers" in message
    assert len(chat_calls(stub)) - before <= 1  # never past the ceiling
    assert engine.stats(channel).version == first.version  # still served
    assert asyncio.run(engine.answer(channel, "Who can roll back a deployment?")).found
    finished = build(engine, channel)  # without the ceiling, the summaries already paid for are reused
    assert finished.summaries_reused > 0


def test_a_token_ceiling_refuses_before_the_first_call(stub: OpenAIStub, llm_engine: MakeEngine,
                                                      channel: ChannelKey) -> None:
    capped = llm_engine(SpendingLimits(max_tokens=50))
    capped.ingest_file(channel, SAMPLE)
    with pytest.raises(SpendingLimitReached, match="ceiling of 50 language-model tokens"):
        build(capped, channel)
    assert chat_calls(stub) == []


def test_a_channel_queried_with_another_embedding_model_is_caught(stub: OpenAIStub, llm_engine: MakeEngine,
                                                                 channel: ChannelKey) -> None:
    built_with = llm_engine(api_embedder="embed-a")
    built_with.ingest_file(channel, SAMPLE)
    build(built_with, channel)
    assert built_with.retrieve(channel, "on-call")
    switched = llm_engine(api_embedder="embed-b")
    with pytest.raises(ChannelError, match="'api:embed-a'.*'api:embed-b'.*rebuild the channel"):
        switched.retrieve(channel, "on-call")
    local = llm_engine()
    with pytest.raises(ChannelError, match="rebuild the channel"):
        local.retrieve(channel, "on-call")
    build(switched, channel)  # a rebuild re-embeds with the configured model, and queries work again
    assert switched.retrieve(channel, "on-call")


@pytest.mark.slow
def test_incremental_targets_counted_at_the_server(stub: OpenAIStub, llm_engine: MakeEngine,
                                                   channel: ChannelKey) -> None:
    """The issue's targets on the 15 dev articles: no change → 0 calls; adding one article to
    a channel of the other 14 → at most 20 % of the calls of a full build of 15."""
    articles = quality_articles()
    assert len(articles) == 15
    engine = llm_engine()
    full_channel = ChannelKey(channel.platform, channel.workspace, channel.channel + "-full")
    for index, article in enumerate(articles):
        engine.ingest(full_channel, Document(article, f"article {index}"))
    start = len(chat_calls(stub))
    full = build(engine, full_channel)
    full_calls = len(chat_calls(stub)) - start
    assert full_calls == full.model_calls > 0

    start = len(chat_calls(stub))
    assert build(engine, full_channel).model_calls == 0
    assert len(chat_calls(stub)) == start

    for index, article in enumerate(articles[:14]):
        engine.ingest(channel, Document(article, f"article {index}"))
    build(engine, channel)
    engine.ingest(channel, Document(articles[14], "article 14"))
    start = len(chat_calls(stub))
    grown = build(engine, channel)
    added_calls = len(chat_calls(stub)) - start
    assert added_calls == grown.model_calls
    assert added_calls <= 0.2 * full_calls, f"{added_calls} calls to add one article, {full_calls} for all 15"
