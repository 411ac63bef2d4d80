"""The bot's configuration: YAML plus ``${ENV}`` references, validated with pydantic.

Every section rejects unknown keys, so a misspelt key is an error at start-up
naming its path, not a silently ignored setting. Secrets are referenced as
``${NAME}`` and read from the environment; they are never logged.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, model_validator

from bot.errors import ConfigError

_ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ChromaConfig(_Section):
    """Where the tree lives: embedded under ``data_dir`` unless a server ``host`` is set."""

    host: str | None = None
    port: int = Field(default=8000, ge=1, le=65535)
    ssl: bool = False


class EmbedderConfig(_Section):
    """Who embeds: a local sentence-transformers model (a path or cached name; empty means
    the packaged all-MiniLM-L6-v2), or the ``llm`` endpoint's ``/v1/embeddings`` with ``model``."""

    provider: Literal["sentence-transformers", "api"] = "sentence-transformers"
    model: str = ""
    batch_size: int = Field(default=32, ge=1, le=1024)


class LLMConfig(_Section):
    """An OpenAI-compatible endpoint (OpenAI, vLLM, llama.cpp server, Ollama).

    With ``base_url`` set, the model writes the summaries and the answers;
    unset, the offline extractive defaults do.
    """

    base_url: str | None = None
    model: str = ""
    api_key: SecretStr = SecretStr("")
    max_concurrency: int = Field(default=8, ge=1, le=256)
    timeout_s: float = Field(default=60.0, gt=0, le=3600)
    max_retries: int = Field(default=4, ge=0, le=20)
    summary_tokens: int = Field(default=130, ge=16, le=4000)
    answer_tokens: int = Field(default=500, ge=16, le=8000)
    context_tokens: int = Field(default=3500, ge=200, le=1_000_000)
    # Ceilings per rebuild, checked before each batch of summaries is asked for; 0 = none.
    max_calls_per_rebuild: int = Field(default=5000, ge=0)
    max_tokens_per_rebuild: int = Field(default=0, ge=0)

    @model_validator(mode="after")
    def _model_named(self) -> LLMConfig:
        if self.base_url and not self.model:
            raise ValueError("model must be set when base_url is")
        return self


class ChunkingConfig(_Section):
    tokens: int = Field(default=100, ge=16, le=512)


class FilesConfig(_Section):
    max_mb: float = Field(default=20.0, gt=0, le=1024)


class TreeConfig(_Section):
    """Clustering and summarising; defaults are the paper's."""

    reduction_dim: int = Field(default=10, ge=2, le=100)
    max_clusters: int = Field(default=50, ge=2, le=500)
    membership_threshold: float = Field(default=0.1, gt=0, lt=1)
    local_neighbors: int = Field(default=10, ge=2, le=200)
    max_cluster_tokens: int = Field(default=3500, ge=200)
    summary_tokens: int = Field(default=130, ge=20, le=2000)
    max_concurrency: int = Field(default=8, ge=1, le=256)
    seed: int = 224


class RetrievalConfig(_Section):
    mode: Literal["collapsed", "traversal", "leaves"] = "collapsed"
    budget: int = Field(default=2000, ge=50, le=100_000)
    top_k: int = Field(default=40, ge=1, le=1000)
    per_layer: int = Field(default=5, ge=1, le=100)
    hybrid: bool = True


class ScheduleConfig(_Section):
    """When a channel whose sources changed is rebuilt: every ``every_minutes``, or on a
    five-field ``cron`` line (server time); ``cron`` set replaces the interval."""

    every_minutes: float = Field(default=60.0, gt=0, le=60 * 24 * 31)
    cron: str | None = None
    enabled: bool = True

    @model_validator(mode="after")
    def _cron_is_valid(self) -> ScheduleConfig:
        if self.cron is not None:
            from apscheduler.triggers.cron import CronTrigger  # only to validate the line

            try:
                CronTrigger.from_crontab(self.cron)
            except ValueError as exc:
                raise ValueError(f"not a five-field cron line ({exc})") from None
        return self


class ChannelConfig(_Section):
    """Settings of one channel, keyed ``platform/workspace/channel`` under ``bot.channels``."""

    schedule: ScheduleConfig | None = None
    admins: list[str] = []


class RateLimitConfig(_Section):
    """0 turns a limit off."""

    questions_per_user_per_minute: int = Field(default=10, ge=0, le=10_000)
    rebuilds_per_channel_per_hour: int = Field(default=6, ge=0, le=10_000)


class BotConfig(_Section):
    """What every platform shares: who may manage a channel, schedules, limits."""

    admins: list[str] = []
    unpin_removes_source: bool = True
    progress_every_s: float = Field(default=10.0, ge=0.5, le=3600)
    schedule: ScheduleConfig = ScheduleConfig()
    channels: dict[str, ChannelConfig] = {}
    rate_limits: RateLimitConfig = RateLimitConfig()

    @model_validator(mode="after")
    def _channel_keys_have_three_parts(self) -> BotConfig:
        for name in self.channels:
            parts = name.split("/")
            if len(parts) != 3 or not all(parts):
                raise ValueError(f"channels: {name!r} is not platform/workspace/channel")
        return self


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


class DiscordConfig(_Section):
    """The Discord bot. Set ``token`` to run on Discord. Empty ``guilds``/``channels`` allow
    all; ``library_channels`` are channels whose every attachment is ingested."""

    token: SecretStr = SecretStr("")
    api_base_url: str | None = None  # None: Discord's; stand-ins and proxies set another
    gateway_url: str | None = None
    guilds: list[str] = []
    channels: list[str] = []
    library_channels: list[str] = []
    reply_in_thread: bool = False
    command: str = "raptor"

    @property
    def enabled(self) -> bool:
        return bool(self.token.get_secret_value())


class Config(_Section):
    """The whole configuration; see ``config.example.yaml`` for every key documented."""

    data_dir: Path = Path("data")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "WARNING"
    chroma: ChromaConfig = ChromaConfig()
    embedder: EmbedderConfig = EmbedderConfig()
    chunking: ChunkingConfig = ChunkingConfig()
    files: FilesConfig = FilesConfig()
    tree: TreeConfig = TreeConfig()
    retrieval: RetrievalConfig = RetrievalConfig()
    llm: LLMConfig = LLMConfig()
    bot: BotConfig = BotConfig()
    console: ConsoleConfig = ConsoleConfig()
    slack: SlackConfig = SlackConfig()
    discord: DiscordConfig = DiscordConfig()

    @model_validator(mode="after")
    def _api_embedder_has_an_endpoint(self) -> Config:
        if self.embedder.provider == "api" and not (self.llm.base_url and self.embedder.model):
            raise ValueError("embedder.provider 'api' needs llm.base_url and embedder.model")
        return self


def load_config(path: Path | None, environ: dict[str, str] | None = None) -> Config:
    """Reads, expands and validates a configuration file; no file means all defaults.

    Raises ``ConfigError`` naming the file and the key path of the first problems.
    """
    if path is None:
        return Config()
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read the configuration {path}: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from exc
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of keys to values")
    expanded = _expand(raw, os.environ if environ is None else environ, ())
    try:
        return Config.model_validate(expanded)
    except ValidationError as exc:
        raise ConfigError(f"{path}: {_describe(exc)}") from None


def _expand(value: Any, environ: dict[str, str] | os._Environ[str], where: tuple[str, ...]) -> Any:
    """Replaces ``${NAME}`` in every string by the environment's value; a missing name is an error."""
    if isinstance(value, dict):
        return {k: _expand(v, environ, (*where, str(k))) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v, environ, (*where, str(i))) for i, v in enumerate(value)]
    if isinstance(value, str):

        def lookup(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in environ:
                raise ConfigError(f"{'.'.join(where)}: the environment variable {name} is not set")
            return environ[name]

        return _ENV_REFERENCE.sub(lookup, value)
    return value


def _describe(error: ValidationError) -> str:
    """The first few validation problems as ``key.path: message`` (values are not echoed: they may be secrets)."""
    problems = []
    for item in error.errors()[:5]:
        path = ".".join(str(part) for part in item["loc"]) or "(top level)"
        message = "unknown key" if item["type"] == "extra_forbidden" else item["msg"]
        problems.append(f"{path}: {message}")
    return "; ".join(problems)
