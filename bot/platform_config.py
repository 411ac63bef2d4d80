"""The chat platforms' sections of the configuration (the console, Slack, Discord); kept apart
from :mod:`bot.config`, which embeds them, so that file keeps to what every bot sets."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, SecretStr, StringConstraints, model_validator

from bot.config_section import Section as _Section


class ConsoleConfig(_Section):
    """The terminal channel, used when no Slack or Discord token is configured."""

    workspace: str = "local"
    channel: str = "general"
    user: str = "you"
    sample: bool = True
    pictures_dir: Path | None = None


class SlackConfig(_Section):
    """The Slack app. Set ``bot_token`` to run on Slack; Socket Mode needs ``app_token``
    (no public URL), HTTP mode needs ``signing_secret`` (several replicas behind a balancer)."""

    bot_token: SecretStr = SecretStr("")
    app_token: SecretStr = SecretStr("")
    signing_secret: SecretStr = SecretStr("")
    mode: Literal["socket", "http"] = "socket"
    api_base_url: str = "https://slack.com/api/"
    http_host: str = "0.0.0.0"
    http_port: int = Field(default=3000, ge=1, le=65535)
    http_path: str = "/slack/events"
    command: str = "/raptor"
    # Socket Mode watchdog (adapters/slack/watchdog.py): every this many seconds auth.test is
    # called, and a socket on which Slack has sent nothing (not even its own pings) for this long
    # is replaced; 0 = off. Keep it above Slack's ping spacing (bolt-js waits 30 s for one).
    socket_watchdog_s: float = Field(default=60.0, ge=0, le=3600)
    # Channels shared with other organisations (Slack Connect): "refuse" answers no question
    # there (one line says why) and stores nothing from them; "allow" serves them like any other.
    shared_channels: Literal["refuse", "allow"] = "refuse"
    # "internal": the app is installed by a company in its own workspace, and may keep an index of
    # that workspace's files and messages. "distributed": the app is offered to other workspaces,
    # which Slack's API terms do not let keep such an index: files shared and messages pinned are
    # refused (one line says why), and questions are still answered.
    distribution: Literal["internal", "distributed"] = "internal"

    @property
    def enabled(self) -> bool:
        return bool(self.bot_token.get_secret_value())

    @model_validator(mode="after")
    def _mode_has_its_secret(self) -> SlackConfig:
        if self.enabled and self.mode == "socket" and not self.app_token.get_secret_value():
            raise ValueError("Socket Mode needs app_token (an xapp- token); or set mode: http")
        if self.enabled and self.mode == "http" and not self.signing_secret.get_secret_value():
            raise ValueError("HTTP mode needs signing_secret to verify Slack's requests")
        return self


def _id_as_text(value: object) -> object:
    """An id written unquoted in YAML arrives as a number: taken as its digits."""
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


DiscordId = Annotated[str, BeforeValidator(_id_as_text), StringConstraints(pattern=r"^[0-9]+$")]
"""A Discord snowflake (a channel's id), quoted or not."""


class DiscordConfig(_Section):
    """The Discord bot. Set ``token`` to run on Discord. Empty ``guilds``/``channels`` allow
    all; ``library_channels`` are channels whose every attachment is ingested; ``forums`` are
    forum channels served as help desks (each new post answered, every message in a post a
    question; see :mod:`bot.forum_handling`)."""

    token: SecretStr = SecretStr("")
    api_base_url: str | None = None  # None: Discord's; stand-ins and proxies set another
    gateway_url: str | None = None
    guilds: list[str] = []
    channels: list[str] = []
    library_channels: list[str] = []
    forums: list[DiscordId] = []
    reply_in_thread: bool = False
    command: str = "raptor"
    # An answer that fits (4,000 characters with its sources) is one Components v2 message;
    # false, or when Discord refuses it, answers are embeds as before.
    components_v2: bool = True
    # discord.py reconnects when the gateway has sent nothing (heartbeat ACKs included) for this
    # long. Discord ACKs a heartbeat every ~41 s, so below that an idle guild would look dead.
    heartbeat_timeout_s: float = Field(default=60.0, gt=0, le=600)

    @property
    def enabled(self) -> bool:
        return bool(self.token.get_secret_value())

    @model_validator(mode="after")
    def _forums_are_allowed(self) -> DiscordConfig:
        """A forum left out of a ``channels`` list would be served nowhere: said at start-up."""
        outside = [forum for forum in self.forums if self.channels and forum not in self.channels]
        if outside:
            raise ValueError(f"discord.forums {outside} must also be listed in discord.channels (or leave it empty)")
        return self
