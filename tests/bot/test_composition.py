"""The composition root's life cycle (``bot.composition.serve``): one started bot handed to
every adapter, stopped once, when the first adapter ends or fails, before the others close.

The adapters here are platform stand-ins that follow ``adapters.protocol.Adapter``; the
bot, its engine and its embedded store are real."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from bot.cli import build_parser
from bot.composition import chosen_adapters, serve
from bot.config import Config
from bot.errors import BotError
from bot.runtime import Assistant


class StandIn:
    """A platform that records what it was given and ends as told: ``quit``, ``fail`` or ``wait``."""

    def __init__(self, name: str, how: str, events: list[str]) -> None:
        self.name = name
        self.ends_on_its_own = how == "quit"
        self._how = how
        self._events = events
        self.bots: list[Assistant] = []

    async def serve(self, bot: Assistant) -> None:
        self.bots.append(bot)
        assert bot.scheduler.started  # handed a started bot
        await asyncio.sleep(0.05)  # every adapter has started before any ends
        if self._how == "quit":
            self._events.append(f"{self.name} quit")
            return
        if self._how == "fail":
            raise BotError(f"{self.name} refused the token")
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            # The bot is stopped before the adapters are cancelled: its scheduler has no jobs then.
            self._events.append(f"{self.name} cancelled, bot stopped={not bot.scheduler.started}")
            raise


def config_for(tmp_path: Path) -> Config:
    return Config.model_validate({"data_dir": str(tmp_path / "data")})


def test_a_quitting_adapter_stops_the_bot_before_the_others_are_cancelled(tmp_path: Path) -> None:
    events: list[str] = []
    said: list[str] = []
    console = StandIn("the console", "quit", events)
    platform = StandIn("Elsewhere", "wait", events)
    asyncio.run(serve(config_for(tmp_path), [console, platform], said.append))
    assert events == ["the console quit", "Elsewhere cancelled, bot stopped=True"]
    [bot] = console.bots
    assert platform.bots == [bot]  # one bot, handed to both
    assert said[0] == "Serving the console and Elsewhere; stop with Ctrl-C or SIGTERM."
    assert said[-1] == "Bye."


def test_a_failing_adapter_is_raised_after_the_bot_stopped(tmp_path: Path) -> None:
    events: list[str] = []
    said: list[str] = []
    failing, waiting = StandIn("Slackish", "fail", events), StandIn("Discordish", "wait", events)
    with pytest.raises(BotError, match="Slackish refused the token"):
        asyncio.run(serve(config_for(tmp_path), [failing, waiting], said.append))
    assert events == ["Discordish cancelled, bot stopped=True"]
    assert said[-1] == "Bye."


def test_the_console_alone_is_greeted_as_starting(tmp_path: Path) -> None:
    said: list[str] = []
    asyncio.run(serve(config_for(tmp_path), [StandIn("the console", "quit", [])], said.append))
    assert said == ["Starting (loading the embedding model)…", "Bye."]


def test_without_platform_tokens_the_console_serves(tmp_path: Path) -> None:
    import io

    [adapter] = chosen_adapters(config_for(tmp_path), io.StringIO(""), print)
    assert adapter.name == "the console" and adapter.ends_on_its_own


def test_configured_platforms_are_chosen_and_not_the_console(tmp_path: Path) -> None:
    import io

    config = Config.model_validate({"data_dir": str(tmp_path), "slack": {"bot_token": "xoxb-1", "app_token": "xapp-1"},
                                    "discord": {"token": "discord-token"}})
    adapters = chosen_adapters(config, io.StringIO(""), print)
    assert [a.name for a in adapters] == ["Slack", "Discord"]
    assert not any(a.ends_on_its_own for a in adapters)


@pytest.mark.parametrize("argv", [[], ["serve"], ["serve", "--channel", "x"]])
def test_serve_is_the_default_command(argv: list[str]) -> None:
    args = build_parser().parse_args(argv)
    assert args.command in (None, "serve")  # None: main() turns it into serve


def test_the_old_chat_alias_of_serve_is_gone() -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["chat"])
