"""A hung Chroma server wedges nothing (issue 28, point 2), against a real ``chroma run``.

The server is stopped with SIGSTOP, not killed: it keeps its port, the kernel still takes
connections, and nothing answers, as with a hung server or one whose packets are dropped
silently. Before, a question then waited for ever, each ``/readyz`` left one more thread stuck
in the executor every engine call shared, and the Slack adapter's event slots filled up.

Real components only: the real slack-bolt app in HTTP mode against the stand-in Slack
(``testkit/slack_api.py``), the bot (``bot.runtime.Assistant``) with the real engine on a
real ``chroma run`` opened as the composition root opens it (``chroma.timeout_s`` short, so
the test is quick), its engine calls on the composition's bounded pool, and the process's
real ``/readyz`` (``bot.observability``) served on the same event loop as the bot, as a
front-end serves it.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from adapters.slack.app import SlackRunning
from bot.composition import open_store
from bot.config import BotConfig, ChromaConfig, Config, RateLimitConfig
from bot.engine_calls import ENGINE_THREADS, AsyncEngine, engine_threads
from bot.observability.endpoints import HealthServer
from bot.observability.probes import add_probes
from bot.runtime import Assistant
from raptor_engine.embedding import SentenceTransformerEmbedder
from raptor_engine.types import ChannelKey
from testkit.cluster import ChromaServer
from testkit.slack_api import BOT_USER, TEAM, Delivery, SlackStandIn, app_running
from tests.conftest import SAMPLE, make_engine

TIMEOUT_S = 1.0  # chroma.timeout_s of the test's bot
PROBE_TIMEOUT_S = 2.0  # the health server's own bound on a readiness probe
ACK_LIMIT_S = 3.0  # Slack's: an event not acknowledged by then is sent again
# How long a question may take to get the store's error: the deadline, plus the adapter's own
# calls around it (the person looked up, the hourglass reaction) on a loaded two-core machine.
ERROR_WITHIN_S = TIMEOUT_S + 2.5
CROWD = 20  # questions asked while the server hangs: more than the adapter works on at once (16)
CHANNEL = "C100"
ANA, BEN = "UANA", "UBEN"
ON_CALL = "What does the on-call engineer do?"


@pytest.fixture
def chroma(tmp_path: Path) -> Iterator[ChromaServer]:
    """A ``chroma run`` of this test's own; continued and stopped at teardown whatever happened."""
    server = ChromaServer(tmp_path / "chroma-server")
    try:
        server.start()
        yield server
    finally:
        server.stop()  # sends SIGCONT first: a paused server would not end


def bot_config(tmp_path: Path, chroma: ChromaServer) -> Config:
    host, port = chroma.address
    limits = RateLimitConfig(questions_per_user_per_minute=0, rebuilds_per_channel_per_hour=0)
    return Config(data_dir=tmp_path / "data", chroma=ChromaConfig(host=host, port=port, timeout_s=TIMEOUT_S),
                  bot=BotConfig(rate_limits=limits))


async def readyz(url: str) -> tuple[int, dict[str, object], float]:
    """``GET /readyz``: its status, its body and how long it took."""
    started = time.monotonic()
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, await response.json(), time.monotonic() - started


async def mention(slack: SlackStandIn, user: str, text: str) -> tuple[dict[str, object], list[Delivery]]:
    return await slack.user_says(CHANNEL, user, f"<@{BOT_USER}> {text}")


def acknowledged_in_time(deliveries: list[Delivery]) -> bool:
    return all(d.status == 200 and d.seconds < ACK_LIMIT_S for d in deliveries)


def test_a_paused_chroma_server_wedges_nothing(
    embedder: SentenceTransformerEmbedder, chroma: ChromaServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = bot_config(tmp_path, chroma)
    engine = make_engine(open_store(config), embedder, threads=engine_threads())
    engine.ingest_bytes(ChannelKey("slack", TEAM, CHANNEL), SAMPLE.read_bytes(), "aurora-handbook.md",
                        "https://x.test/f", "Ana", "F0")

    async def body(slack: SlackStandIn, running: SlackRunning, ready_url: str) -> None:
        asked, deliveries = await mention(slack, ANA, ON_CALL)
        [answer] = await slack.wait_until(lambda: slack.posts(CHANNEL, str(asked["ts"])), what="the answer")
        assert "[1]" in answer["text"]
        assert (await readyz(ready_url))[0] == 200

        chroma.pause()
        asked, deliveries = await mention(slack, ANA, ON_CALL)
        asked_at = min(d.sent_at for d in deliveries)
        assert acknowledged_in_time(deliveries), deliveries
        # A crowd of questions meanwhile, and a message for nobody: each acknowledged in time.
        crowd = await asyncio.gather(*(mention(slack, BEN, f"Question {n} about on-call?") for n in range(CROWD)))
        _, chatter = await slack.user_says(CHANNEL, BEN, "Lunch at noon?")
        assert all(acknowledged_in_time(sent) for _, sent in crowd) and acknowledged_in_time(chatter)

        # The question gets the store's error, with a reference, within the deadline.
        [error] = await slack.wait_until(lambda: slack.posts(CHANNEL, str(asked["ts"])), timeout=10,
                                         what="the store's error")
        answered_after = next(c.at for c in slack.calls_of("chat.postMessage")
                              if c.params.get("thread_ts") == asked["ts"]) - asked_at
        assert answered_after < ERROR_WITHIN_S, answered_after
        assert "did not answer in time" in error["text"], error["text"]
        reference = re.search(r"reference (\w+)", error["text"]).group(1)  # type: ignore[union-attr]
        assert any(reference in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)

        # /readyz says not ready, promptly, however often it is asked; its probes never stack.
        for _ in range(2):
            asking = asyncio.gather(*(readyz(ready_url) for _ in range(5)))
            await asyncio.sleep(TIMEOUT_S / 3)  # while the five wait on the hung server
            assert len([t for t in threading.enumerate() if t.name == "probe-chroma"]) == 1
            for status, checks, took in await asking:
                assert status == 503 and checks["checks"] in ({"chroma": "timeout"}, {"chroma": "failing"}), checks
                assert took < PROBE_TIMEOUT_S + 1.0

        # The event slots do not stay full: every one of the crowd hears the store's error.
        await slack.wait_until(lambda: all(slack.posts(CHANNEL, str(m["ts"])) for m, _ in crowd), timeout=30,
                               what="the crowd's errors")
        assert all("reference" in slack.posts(CHANNEL, str(m["ts"]))[0]["text"] for m, _ in crowd)
        assert len([t for t in threading.enumerate() if t.name.startswith("engine")]) <= ENGINE_THREADS

        # Continued, the server answers again, and so does the bot.
        chroma.resume()
        asked, _ = await mention(slack, ANA, ON_CALL)
        [answer] = await slack.wait_until(lambda: slack.posts(CHANNEL, str(asked["ts"])), timeout=20,
                                          what="the answer after SIGCONT")
        assert "[1]" in answer["text"], answer["text"]
        deadline = time.monotonic() + TIMEOUT_S + PROBE_TIMEOUT_S + 5
        while (await readyz(ready_url))[0] != 200:
            assert time.monotonic() < deadline, "/readyz stayed unready after SIGCONT"
            await asyncio.sleep(0.2)

    async def session() -> None:
        bot = Assistant(config, AsyncEngine(engine))
        await bot.start(warm_up=False)
        health = HealthServer(bot.metrics, probe_timeout=PROBE_TIMEOUT_S)
        add_probes(health, config, engine, None)
        port = await health.start("127.0.0.1", 0)
        try:
            async with SlackStandIn() as slack:
                slack.add_user(ANA, "Ana", admin=True)
                slack.add_user(BEN, "Ben")
                async with app_running(bot, slack, "http") as running:
                    await body(slack, running, f"http://127.0.0.1:{port}/readyz")
                    await running.handling.wait_idle()
                assert not slack.rejected(), slack.rejected()
        finally:
            await health.stop()
            await bot.stop()

    with caplog.at_level(logging.INFO):
        asyncio.run(session())
