"""Limits that hold across a workspace's channels and across replicas, against a real Valkey
(issue 28, point 7): a person's question allowance, and a workspace's daily model budget,
which starts again at UTC midnight."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from bot import replies
from bot.config import BotConfig, Config, ModelBudgetConfig, RateLimitConfig
from bot.coordination.link import RedisLink
from bot.coordination.shared_limits import shared_limiters
from bot.engine_calls import AsyncEngine
from bot.handler import ChatHandler
from bot.model_budget import LocalSpending, ModelBudget, SharedSpending
from bot.neutral import ChannelKey, Person, Question, Reply
from bot.rebuilds.in_process import RebuildScheduler
from raptor_engine import ModelUsage
from raptor_engine.engine import Engine
from testkit.valkey import ValkeyProcess
from tests.coordination.conftest import coordination_config

ANA = Person("U1", "Ana")
GENERAL, RANDOM = ChannelKey("slack", "T1", "C1"), ChannelKey("slack", "T1", "C2")
ELSEWHERE = ChannelKey("slack", "T2", "C1")
BEFORE_MIDNIGHT = datetime(2025, 3, 1, 23, 59, tzinfo=UTC)


def link_to(url: str) -> RedisLink:
    return RedisLink(coordination_config(url))


def test_a_persons_question_allowance_holds_across_channels_and_replicas(redis_url: str, engine: Engine) -> None:
    config = Config(bot=BotConfig(rate_limits=RateLimitConfig(questions_per_user_per_minute=1)))
    calls = AsyncEngine(engine)

    def replica() -> ChatHandler:
        return ChatHandler(calls, config, RebuildScheduler(calls, config.bot), limiters=shared_limiters(link_to(redis_url)))

    async def ask(handler: ChatHandler, key: ChannelKey) -> str:
        said: list[Reply] = []

        async def send(reply: Reply) -> None:
            said.append(reply)

        await handler.handle(Question(key, ANA, "Who is on call?"), send)
        return said[0].text

    async def run() -> list[str]:
        one, two = replica(), replica()
        return [await ask(one, GENERAL), await ask(two, RANDOM), await ask(two, ELSEWHERE)]

    first, other_channel, other_workspace = asyncio.run(run())
    assert first == replies.NO_MATERIAL  # counted, then answered as well as an empty channel can be
    assert other_channel.startswith("You have asked 1 question in the last minute")
    assert other_workspace == replies.NO_MATERIAL  # another workspace's allowance is its own


def test_the_daily_model_budget_is_shared_and_starts_again_at_utc_midnight(redis_url: str) -> None:
    now = [BEFORE_MIDNIGHT]
    config = ModelBudgetConfig(calls_per_workspace_per_day=3, tokens_per_workspace_per_day=1000)

    def replica() -> ModelBudget:
        return ModelBudget(config, SharedSpending(link_to(redis_url)), now=lambda: now[0])

    async def run() -> list[str]:
        one, two = replica(), replica()
        seen = [await two.reached(GENERAL)]
        await one.record(GENERAL, ModelUsage(calls=2, prompt_tokens=100, completion_tokens=50))
        seen.append(await two.reached(RANDOM))  # the same workspace, another channel, another process
        await two.record(RANDOM, ModelUsage(calls=1, prompt_tokens=10))
        seen += [await one.reached(GENERAL), await one.reached(ELSEWHERE)]
        await one.record(ELSEWHERE, ModelUsage(calls=1, prompt_tokens=1200))
        seen.append(await two.reached(ELSEWHERE))
        now[0] = BEFORE_MIDNIGHT + timedelta(minutes=2)  # a new UTC day
        seen += [await one.reached(GENERAL), await two.reached(ELSEWHERE)]
        return seen

    assert asyncio.run(run()) == ["", "", "calls", "", "tokens", "", ""]
    ttl = link_to(redis_url).blocking.ttl(link_to(redis_url).key("model-budget", "slack/T1", "2025-03-01"))
    assert ttl > 0  # each day's counts expire on their own


def test_the_refusal_says_which_ceiling_and_when_it_ends() -> None:
    budget = ModelBudget(ModelBudgetConfig(tokens_per_workspace_per_day=5000), LocalSpending(),
                         now=lambda: BEFORE_MIDNIGHT)
    assert budget.refusal("tokens") == ("This workspace has used its 5,000 language-model tokens for today (UTC), "
                                        "the most allowed; I can answer again after midnight UTC, in 60 seconds.")


def test_the_budget_counts_in_this_process_while_valkey_is_down(own_valkey: ValkeyProcess) -> None:
    config = ModelBudgetConfig(calls_per_workspace_per_day=1)

    async def run() -> list[str]:
        budget = ModelBudget(config, SharedSpending(link_to(own_valkey.url)), now=lambda: BEFORE_MIDNIGHT)
        own_valkey.stop()
        before = await budget.reached(GENERAL)
        await budget.record(GENERAL, ModelUsage(calls=1))
        return [before, await budget.reached(GENERAL)]

    assert asyncio.run(run()) == ["", "calls"]
