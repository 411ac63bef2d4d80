"""``python -m bot`` as a real process serving Discord (its stand-in on 127.0.0.1) when a token
is configured, and stopping cleanly on SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from bot.replies import NO_MATERIAL
from tests.adapters.discord_bot.conftest import make_world_fake
from tests.conftest import REPO

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO), "DISCORD_TEST_TOKEN": "fake-token"}


def test_python_m_bot_serves_discord_and_stops_on_sigterm(tmp_path: Path) -> None:
    async def scenario() -> tuple[int, str, list[str]]:
        fake, guild, _, people = make_world_fake()
        await fake.start()
        config = tmp_path / "config.yaml"
        config.write_text(
            f"data_dir: {tmp_path / 'data'}\n"
            "discord:\n  token: ${DISCORD_TEST_TOKEN}\n"
            f"  api_base_url: {fake.base_url}\n  gateway_url: {fake.gateway_url}\n"
        )
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot", "--config", str(config), cwd=REPO, env=ENV,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )
        try:
            await fake.wait_identified(timeout=120)  # loading the model takes a while
            await fake.wait_for(lambda: fake.calls_to("PUT", "/commands"), timeout=30)
            general = fake.channel_id(guild, "general")
            alice = people["alice"]
            await fake.post(general, alice["user"], "What happens when the on-call engineer cannot be reached?",
                            alice, mention_bot=True)
            await fake.wait_for(lambda: fake.bot_messages(general), timeout=60)
            replies = [str(m.get("content", "")) + str(m.get("embeds", "")) for m in fake.bot_messages(general)]
        finally:
            process.send_signal(signal.SIGTERM)
            output, _ = await asyncio.wait_for(process.communicate(), timeout=60)
            await fake.stop()
        return process.returncode or 0, output.decode(), replies

    code, output, replies = asyncio.run(scenario())
    assert code == 0, output
    assert "Serving Discord" in output and "Traceback" not in output
    # The channel has no material yet: the bot says so (not an error, not silence).
    assert any(NO_MATERIAL in reply for reply in replies), replies


def test_python_m_bot_serves_slack_in_socket_mode(tmp_path: Path) -> None:
    from testkit.slack_api import APP_TOKEN, BOT_TOKEN, BOT_USER, SlackStandIn

    async def scenario() -> tuple[int, str, list[dict[str, object]]]:
        async with SlackStandIn() as slack:
            slack.add_user("U1", "ann")
            config = tmp_path / "config.yaml"
            config.write_text(
                f"data_dir: {tmp_path / 'data'}\n"
                f"slack:\n  bot_token: {BOT_TOKEN}\n  app_token: {APP_TOKEN}\n  api_base_url: {slack.base_url}\n"
            )
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "bot", "--config", str(config), cwd=REPO, env=ENV,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            )
            try:
                await slack.wait_connected(timeout=120)  # loading the model takes a while
                message, _ = await slack.user_says("C1", "U1", f"<@{BOT_USER}> who is on call?")
                await slack.wait_until(lambda: slack.posts("C1", thread_ts=message["ts"]), timeout=60)
                posts = slack.posts("C1", thread_ts=message["ts"])
            finally:
                process.send_signal(signal.SIGTERM)
                output, _ = await asyncio.wait_for(process.communicate(), timeout=60)
        return process.returncode or 0, output.decode(), posts

    code, output, posts = asyncio.run(scenario())
    assert code == 0, output
    assert "Serving Slack" in output and "Traceback" not in output
    # Answered in the thread: the channel has no material yet, and the bot says so.
    assert any(NO_MATERIAL in str(post.get("text", "")) + str(post.get("blocks", "")) for post in posts), posts
