"""Streaming benchmark: how soon a language model's answer starts to show, against when it is whole.

The bot runs as in production (the Assistant with its handler, the engine on embedded
Chroma with the packaged model, the sample handbook ingested) and answers through the real
``openai`` client from the OpenAI stand-in (``testkit/openai_stub.py``), which streams at
``--tokens-per-s`` (30 by default) an answer of about 150 tokens. Each question is a
person's mention of the bot, timed from the moment the stand-in sends it:

* **first words** — Slack: the ``chat.startStream`` call (native streaming) or the first
  ``chat.postMessage`` of the draft (streaming refused: edits by ``chat.update``);
  Discord: the reply carrying the first words;
* **whole** — the edit that puts the finished answer, citations rendered, in place.

Platforms: Slack with native streaming, Slack with streaming refused (the fallback), and
Discord, each through its real client against its stand-in on 127.0.0.1.

Target: the first words within 1.5 s of the question, on every platform.

Run: ``python -m bench.streaming [--questions N] [--tokens-per-s R] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager, suppress
from functools import partial
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from bench.common import heading, latency_summary, load_embedder, start_run, table, verdict, write_json
from bot.config import BotConfig, Config, DiscordConfig, LLMConfig, RateLimitConfig
from bot.engine_calls import AsyncEngine
from bot.runtime import Assistant
from bot.samples import SAMPLE_DOCUMENT
from raptor_engine import ChannelKey, Engine
from raptor_engine.embedding import SentenceTransformerEmbedder
from raptor_engine.llm import LLMAnswerer, LLMClient, LLMSettings
from raptor_engine.store import ChromaStore
from raptor_engine.summarizing import ExtractiveSummarizer
from testkit.discord_api import FakeDiscord, member_payload, snowflake, user_payload
from testkit.openai_stub import OpenAIStub, running_stub
from testkit.slack_api import BOT_USER, TEAM, SlackStandIn, app_running

TARGET_FIRST_WORDS_S = 1.5
ANSWER_TIMEOUT_S = 60.0
QUESTIONS = (
    "What does the on-call engineer do?",
    "What happens when the on-call engineer cannot be reached?",
    "How long is the handoff meeting?",
    "Who approves a production deploy?",
    "When are deploys frozen?",
)
ANSWER = (
    "The on-call engineer carries the pager for one week at a time and watches the alerts channel, "
    "acting as the first responder for every incident that is raised during that week [1]. "
    "A page has to be acknowledged within ten minutes; when it is not, it escalates automatically to the "
    "secondary on-call engineer, and after a further ten minutes to the engineering manager [2]. "
    "The handoff between two on-call engineers happens in a fifteen-minute meeting at the start of the week, "
    "where open incidents, noisy alerts and planned maintenance are walked through together [1][3]. "
    "Deploys to production need the approval of a second engineer and are frozen on Fridays after noon [2]."
)

Timing = tuple[float, float]  # seconds to the first words, to the whole answer


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.streaming", description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=5, help="questions per platform (default 5)")
    parser.add_argument("--tokens-per-s", type=float, default=30.0, help="the stand-in model's pace (default 30)")
    parser.add_argument("--json", type=Path, default=None, metavar="FILE", help="also write the figures as JSON")
    return parser


def llm_engine(directory: Path, embedder: SentenceTransformerEmbedder, client: LLMClient) -> Engine:
    counter = embedder.token_counter()
    return Engine(ChromaStore.embedded(directory / "chroma"), embedder, counter, ExtractiveSummarizer(counter),
                  LLMAnswerer(client, client.settings))


def bot_config(directory: Path, stub: OpenAIStub, **platform: Any) -> Config:
    limits = RateLimitConfig(questions_per_user_per_minute=0)
    return Config(data_dir=directory, bot=BotConfig(rate_limits=limits), llm=LLMConfig(base_url=stub.base_url,
                                                                                       model="stub-model"), **platform)


@asynccontextmanager
async def started(config: Config, engine: Engine) -> AsyncIterator[Assistant]:
    bot = Assistant(config, AsyncEngine(engine))
    await bot.start(warm_up=False)
    try:
        yield bot
    finally:
        await bot.stop()


# -- Slack ------------------------------------------------------------------------------------


async def slack_run(engine: Engine, directory: Path, stub: OpenAIStub, questions: Sequence[str],
                    refuse_streaming: bool) -> list[Timing]:
    engine.ingest_bytes(ChannelKey("slack", TEAM, "C100"), SAMPLE_DOCUMENT.read_bytes(), "aurora-handbook.md",
                        "", "bench")
    timings = []
    async with started(bot_config(directory, stub), engine) as bot, SlackStandIn() as slack:
        slack.add_user("UASK", "Asker")
        slack.streaming_refusal = "unknown_method" if refuse_streaming else ""
        async with app_running(bot, slack, "socket") as running:
            for question in questions:
                start = len(slack.calls)
                sent = time.perf_counter()
                asked, _ = await slack.user_says("C100", "UASK", f"<@{BOT_USER}> {question}")

                def calls(method: str, start: int = start) -> list[Any]:
                    return [c for c in slack.calls[start:] if c.method == method and c.ok]

                def whole() -> Any:
                    return next((c for c in calls("chat.update") if c.params.get("blocks")), None)

                finished = await slack.wait_until(whole, ANSWER_TIMEOUT_S, "the finished answer")
                firsts = calls("chat.startStream") + [c for c in calls("chat.postMessage")
                                                      if c.params.get("thread_ts") == asked["ts"]]
                timings.append((min(c.at for c in firsts) - sent, finished.at - sent))
                await running.handling.wait_idle()
    return timings


# -- Discord ---------------------------------------------------------------------------------


async def discord_run(engine: Engine, directory: Path, stub: OpenAIStub, questions: Sequence[str]) -> list[Timing]:
    from adapters.discord_bot.client import DiscordClient, run_discord
    from adapters.discord_bot.translate import Place

    fake = FakeDiscord()
    asker = member_payload(user_payload(snowflake(), "Asker"))
    guild = fake.add_guild("Bench Guild", ["general"], [asker])
    channel = fake.channel_id(guild, "general")
    engine.ingest_bytes(Place(int(guild["id"]), int(channel)).key, SAMPLE_DOCUMENT.read_bytes(),
                        "aurora-handbook.md", "", "bench")
    await fake.start()
    discord = DiscordConfig(token=SecretStr("bench-token"), api_base_url=fake.api_base_url,
                            gateway_url=fake.gateway_url)
    timings = []
    try:
        async with started(bot_config(directory, stub, discord=discord), engine) as bot:
            clients: list[DiscordClient] = []
            task = asyncio.create_task(run_discord(bot, discord, guild_ready_timeout=0.05, on_client=clients.append))
            try:
                while not clients:
                    await asyncio.sleep(0.01)
                await asyncio.wait_for(clients[0].wait_until_ready(), 30)
                for question in questions:
                    start = len(fake.calls)
                    sent = time.perf_counter()
                    await fake.post(channel, asker["user"], question, asker, mention_bot=True)
                    finished = await fake.wait_for(partial(_finished_edit, fake, channel, start), ANSWER_TIMEOUT_S)
                    [first] = fake.calls_to("POST", rf"^/channels/{channel}/messages$", start)
                    timings.append((first.at - sent, finished.at - sent))
            finally:
                task.cancel()
                with suppress(asyncio.CancelledError):
                    await task
    finally:
        await fake.stop()
    return timings


def _finished_edit(fake: FakeDiscord, channel: str, start: int) -> Any:
    """The edit (since call ``start``) that put a finished answer, with its buttons, in place."""
    edits = fake.calls_to("PATCH", rf"^/channels/{channel}/messages/\d+$", start)
    return next((c for c in edits if c.status == 200 and (c.body or {}).get("components")), None)


# -- the run ---------------------------------------------------------------------------------


def measure(args: argparse.Namespace) -> dict[str, list[Timing]]:
    embedder = load_embedder()
    questions = [QUESTIONS[i % len(QUESTIONS)] for i in range(args.questions)]
    runs: dict[str, Callable[[Engine, Path, OpenAIStub], Any]] = {
        "slack (native streaming)": lambda e, d, s: slack_run(e, d, s, questions, refuse_streaming=False),
        "slack (streaming refused: edits)": lambda e, d, s: slack_run(e, d, s, questions, refuse_streaming=True),
        "discord (edits)": lambda e, d, s: discord_run(e, d, s, questions),
    }
    results: dict[str, list[Timing]] = {}
    with running_stub() as stub:
        stub.answer_text, stub.tokens_per_s = ANSWER, args.tokens_per_s
        settings = LLMSettings(base_url=stub.base_url, model="stub-model")
        for name, run in runs.items():
            with tempfile.TemporaryDirectory(prefix="bench-streaming-") as directory, LLMClient(settings) as client:
                results[name] = asyncio.run(run(llm_engine(Path(directory), embedder, client), Path(directory), stub))
    return results


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    machine = start_run()
    print(f"stand-in model: {args.tokens_per_s:g} tokens/s, an answer of ~150 tokens; {args.questions} question(s) "
          "per platform")
    results = measure(args)
    rows, figures, passed = [], {}, True
    for name, timings in results.items():
        first = latency_summary([t[0] for t in timings])
        whole = latency_summary([t[1] for t in timings])
        ok = first["max_ms"] <= TARGET_FIRST_WORDS_S * 1000
        passed &= ok
        rows.append([name, len(timings), first["p50_ms"], first["max_ms"], whole["p50_ms"], whole["max_ms"],
                     verdict(ok)])
        figures[name] = {"first_words": first, "whole": whole}
    print(heading("time from the question (ms)"))
    print(table(["platform", "n", "first p50", "first max", "whole p50", "whole max",
                 f"first ≤ {TARGET_FIRST_WORDS_S:g} s"], rows))
    write_json(args.json, {"machine": machine, "tokens_per_s": args.tokens_per_s, "results": figures,
                           "passed": passed})
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
