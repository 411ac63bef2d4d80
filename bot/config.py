"""The bot's configuration: YAML plus ``${ENV}`` references, validated with pydantic.

Every section rejects unknown keys, so a misspelt key is an error at start-up
naming its path, not a silently ignored setting. Secrets are referenced as
``${NAME}`` and read from the environment; they are never logged.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml
from pydantic import Field, SecretStr, ValidationError, model_validator

from bot.answer_config import AnswersConfig
from bot.config_section import Section as _Section
from bot.deploy_config import CoordinationConfig, ObservabilityConfig
from bot.errors import ConfigError
from bot.platform_config import (
    ConsoleConfig as ConsoleConfig,
    DiscordConfig as DiscordConfig,
    SlackConfig as SlackConfig,
)
from raptor_engine import ChannelKey, defaults

_ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


_SectionT = TypeVar("_SectionT", bound=_Section)
MB = 1024 * 1024


def _ranged(default: int, bounds: tuple[int, int]) -> Any:
    """A field defaulting to the engine's ``default``, within the engine's inclusive ``bounds``."""
    return Field(default=default, ge=bounds[0], le=bounds[1])


class ChromaConfig(_Section):
    """Where the tree lives: embedded under ``data_dir`` unless a server ``host`` is set.

    A secured server or hosted Chroma takes a ``token`` (sent as ``Authorization:
    Bearer``, or as ``X-Chroma-Token`` with ``token_header``) or a ``username`` and
    ``password`` (HTTP basic), and the ``tenant`` and ``database`` to work in; all of
    these need ``host`` (embedded Chroma has no authentication). Each request to a server is
    given up after ``timeout_s`` (the store's error then says it did not answer in time)."""

    host: str | None = None
    port: int = Field(default=8000, ge=1, le=65535)
    ssl: bool = False
    token: SecretStr = SecretStr("")
    token_header: Literal["Authorization", "X-Chroma-Token"] = "Authorization"
    username: str = ""
    password: SecretStr = SecretStr("")
    tenant: str = Field(default="default_tenant", min_length=1)
    database: str = Field(default="default_database", min_length=1)
    timeout_s: float = Field(default=defaults.STORE_TIMEOUT_S, gt=0, le=600)

    @model_validator(mode="after")
    def _one_way_to_sign_in(self) -> ChromaConfig:
        token, password = bool(self.token.get_secret_value()), bool(self.password.get_secret_value())
        if token and (self.username or password):
            raise ValueError("set token, or username and password, not both")
        if bool(self.username) != password:
            raise ValueError("username and password go together (HTTP basic)")
        if ":" in self.username:
            raise ValueError("username cannot contain ':' (HTTP basic)")
        server_only = token or password or (self.tenant, self.database) != ("default_tenant", "default_database")
        if server_only and not self.host:
            raise ValueError("token, username, password, tenant and database need host (a Chroma server)")
        return self


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
    max_concurrency: int = Field(default=defaults.LLM_MAX_CONCURRENCY, ge=1, le=256)
    timeout_s: float = Field(default=defaults.LLM_TIMEOUT_S, gt=0, le=3600)
    max_retries: int = Field(default=defaults.LLM_MAX_RETRIES, ge=0, le=20)
    summary_tokens: int = Field(default=defaults.LLM_SUMMARY_TOKENS, ge=16, le=4000)
    answer_tokens: int = Field(default=defaults.LLM_ANSWER_TOKENS, ge=16, le=8000)
    context_tokens: int = Field(default=defaults.LLM_CONTEXT_TOKENS, ge=200, le=1_000_000)
    # Ceilings per rebuild, checked before each batch of summaries is asked for; 0 = none.
    max_calls_per_rebuild: int = Field(default=defaults.MAX_CALLS_PER_REBUILD, ge=0)
    max_tokens_per_rebuild: int = Field(default=defaults.MAX_TOKENS_PER_REBUILD, ge=0)

    @model_validator(mode="after")
    def _model_named(self) -> LLMConfig:
        if self.base_url and not self.model:
            raise ValueError("model must be set when base_url is")
        return self


class ChunkingConfig(_Section):
    tokens: int = Field(default=defaults.CHUNK_TOKENS, ge=defaults.CHUNK_TOKENS_RANGE[0],
                        le=defaults.CHUNK_TOKENS_RANGE[1])


class FilesConfig(_Section):
    """Upload limits: ``max_mb`` of file, ``max_text_mb`` of text extracted from it
    (a small file can unpack into far more text; past the limit it is refused), and
    whether a file uploaded again under the same name (new content) replaces the earlier
    one (``replace_same_name``; off by default: two files may share a name by chance)."""

    max_mb: float = Field(default=defaults.MAX_FILE_BYTES / MB, gt=0, le=1024)
    max_text_mb: float = Field(default=defaults.MAX_TEXT_CHARS / MB, gt=0, le=1024)
    replace_same_name: bool = False


class TreeConfig(_Section):
    """Clustering and summarising; defaults are the paper's."""

    reduction_dim: int = _ranged(defaults.REDUCTION_DIM, defaults.REDUCTION_DIM_RANGE)
    max_clusters: int = _ranged(defaults.MAX_CLUSTERS, defaults.MAX_CLUSTERS_RANGE)
    membership_threshold: float = Field(default=defaults.MEMBERSHIP_THRESHOLD, gt=0, lt=1)
    local_neighbors: int = _ranged(defaults.LOCAL_NEIGHBORS, defaults.LOCAL_NEIGHBORS_RANGE)
    max_cluster_tokens: int = Field(default=defaults.MAX_CLUSTER_TOKENS, ge=defaults.MAX_CLUSTER_TOKENS_MIN)
    summary_tokens: int = _ranged(defaults.SUMMARY_TOKENS, defaults.SUMMARY_TOKENS_RANGE)
    max_concurrency: int = _ranged(defaults.MAX_CONCURRENCY, defaults.MAX_CONCURRENCY_RANGE)
    seed: int = defaults.SEED


class RetrievalConfig(_Section):
    mode: Literal["collapsed", "traversal", "leaves"] = "collapsed"
    budget: int = _ranged(defaults.BUDGET, defaults.BUDGET_RANGE)
    top_k: int = _ranged(defaults.TOP_K, defaults.TOP_K_RANGE)
    per_layer: int = _ranged(defaults.PER_LAYER, defaults.PER_LAYER_RANGE)
    hybrid: bool = True
    # Offline answers: the summary leading an answer to a broad question is cut to this many characters.
    summary_chars: int = _ranged(defaults.SUMMARY_CHARS, defaults.SUMMARY_CHARS_RANGE)
    # Channels whose search indexes a process keeps in memory, least recently asked out.
    indexed_channels: int = _ranged(defaults.INDEXED_CHANNELS, defaults.INDEXED_CHANNELS_RANGE)


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
    """Settings of one channel, keyed ``platform/workspace/channel`` under ``bot.channels``.
    In ``rate_limits`` and ``limits``, the keys given replace the global ones; the rest are inherited."""

    schedule: ScheduleConfig | None = None
    admins: list[str] = []
    rate_limits: RateLimitConfig | None = None
    limits: LimitsConfig | None = None


class RateLimitConfig(_Section):
    """Sliding windows; 0 turns a limit off. Uploads count files and pins alike."""

    questions_per_user_per_minute: int = Field(default=10, ge=0, le=10_000)
    rebuilds_per_channel_per_hour: int = Field(default=6, ge=0, le=10_000)
    uploads_per_user_per_hour: int = Field(default=30, ge=0, le=10_000)
    # Bytes of uploaded files and pinned text a channel takes in per 24 hours.
    upload_mb_per_channel_per_day: float = Field(default=100.0, ge=0, le=1_000_000)


class ModelBudgetConfig(_Section):
    """A ceiling on a workspace's language-model use per UTC day (answers and rebuilds
    together); 0 = no ceiling, the default: what a day of model use may cost differs by
    orders of magnitude between deployments, and the per-person and per-rebuild limits
    already stop a runaway."""

    calls_per_workspace_per_day: int = Field(default=0, ge=0, le=100_000_000)
    tokens_per_workspace_per_day: int = Field(default=0, ge=0, le=100_000_000_000)

    @property
    def enabled(self) -> bool:
        return bool(self.calls_per_workspace_per_day or self.tokens_per_workspace_per_day)


class LimitsConfig(_Section):
    """Caps on what one channel holds, checked before a source is added; 0 = no cap.
    Stored size counts the characters of the sources' text. ``kept_answers_per_channel``:
    the answers kept for votes and node buttons; older ones go (a vote on one is refused)."""

    max_sources_per_channel: int = Field(default=0, ge=0, le=10_000_000)
    max_stored_mb_per_channel: float = Field(default=0.0, ge=0, le=1_000_000)
    kept_answers_per_channel: int = Field(default=1000, ge=1, le=10_000_000)


class RetentionConfig(_Section):
    """``removed_channel_days``: how long a channel the bot can no longer serve is kept (0: forgotten at once)."""
    removed_channel_days: float = Field(default=7.0, ge=0, le=3650)


class BotConfig(_Section):
    """What every platform shares: who may manage a channel, schedules, limits."""

    admins: list[str] = []
    unpin_removes_source: bool = True
    progress_every_s: float = Field(default=10.0, ge=0.5, le=3600)
    schedule: ScheduleConfig = ScheduleConfig()
    channels: dict[str, ChannelConfig] = {}
    rate_limits: RateLimitConfig = RateLimitConfig()
    limits: LimitsConfig = LimitsConfig()
    retention: RetentionConfig = RetentionConfig()
    model_budget: ModelBudgetConfig = ModelBudgetConfig()

    @model_validator(mode="after")
    def _channel_keys_have_three_parts(self) -> BotConfig:
        for name in self.channels:
            try:
                ChannelKey.parse(name)
            except ValueError as exc:
                raise ValueError(f"channels: {exc}") from exc
        return self

    def rate_limits_for(self, channel: str) -> RateLimitConfig:
        """The rate limits of ``channel`` (``platform/workspace/channel``): ``rate_limits``
        with the keys set in ``channels[channel].rate_limits`` in their place."""
        own = self.channels.get(channel)
        return _overlay(self.rate_limits, own.rate_limits if own is not None else None)

    def limits_for(self, channel: str) -> LimitsConfig:
        """The caps of ``channel``: ``limits`` with the keys set in ``channels[channel].limits`` in their place."""
        own = self.channels.get(channel)
        return _overlay(self.limits, own.limits if own is not None else None)


def _overlay(base: _SectionT, own: _SectionT | None) -> _SectionT:
    """``base`` with the keys ``own`` was given explicitly (its defaults do not count)."""
    if own is None:
        return base
    return base.model_copy(update={name: getattr(own, name) for name in own.model_fields_set})


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
    answers: AnswersConfig = AnswersConfig()
    llm: LLMConfig = LLMConfig()
    bot: BotConfig = BotConfig()
    console: ConsoleConfig = ConsoleConfig()
    slack: SlackConfig = SlackConfig()
    discord: DiscordConfig = DiscordConfig()
    coordination: CoordinationConfig = CoordinationConfig()
    observability: ObservabilityConfig = ObservabilityConfig()

    @model_validator(mode="after")
    def _processes_share_a_chroma_server(self) -> Config:
        if self.coordination.enabled and not self.chroma.host:
            raise ValueError("coordination.redis_url runs several processes, which need a Chroma server "
                             "(chroma.host): an embedded data directory belongs to one process")
        return self

    @model_validator(mode="after")
    def _model_judge_has_an_endpoint(self) -> Config:
        if self.answers.judge == "model" and not self.llm.base_url:
            raise ValueError("answers.judge asks the llm endpoint to judge, which needs llm.base_url")
        return self

    @model_validator(mode="after")
    def _api_embedder_has_an_endpoint(self) -> Config:
        if self.embedder.provider == "api" and not (self.llm.base_url and self.embedder.model):
            raise ValueError("embedder.provider 'api' needs llm.base_url and embedder.model")
        return self


def load_config(path: Path | None, environ: dict[str, str] | None = None) -> Config:
    """Reads, expands and validates a configuration file; no file means all defaults.

    Raises ``ConfigError`` naming the file and the key path (or, for a YAML syntax
    error, the line and column) of the first problems, and the kind of problem. Its
    text never echoes a value from the file: a value may be a secret written inline.
    The original exception is not chained either, since a traceback would print it.
    """
    if path is None:
        return Config()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read the configuration {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path} is not UTF-8 text (byte {exc.start + 1} cannot be decoded)") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {_yaml_problem(exc)}") from None
    except ValueError:  # a scalar YAML resolves but cannot build, e.g. the date 2024-13-45
        raise ConfigError(f"{path} is not valid YAML: a value cannot be read (such as an impossible date)") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of keys to values")
    expanded = _expand(raw, os.environ if environ is None else environ, ())
    try:
        return Config.model_validate(expanded)
    except ValidationError as exc:
        raise ConfigError(f"{path}: {_describe(exc)}") from None


def _expand(value: Any, environ: Mapping[str, str], where: tuple[str, ...]) -> Any:
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


_QUOTED = re.compile(r"'([^']*)'")
_DOUBLE_QUOTED = re.compile(r'"[^"]*"')
_HIDDEN = "'…'"
_SHORTEST_HIDDEN = 4  # shorter strings are words of the messages themselves ("api", "dm") more often than secrets


def _yaml_problem(error: yaml.YAMLError) -> str:
    """Where and what kind of YAML error: ``line 3, column 5: could not find expected ':'
    (while scanning a simple key)``. PyYAML's own text quotes the offending line, so it is
    not used; quoted fragments of its messages (an alias name, a tag) are hidden too,
    keeping only a lone character and token kinds such as ``'<stream end>'``."""
    if isinstance(error, yaml.MarkedYAMLError):
        parts = [_hide_quoted(error.problem or "a syntax error")]
        if error.context:
            parts.append(f"({_hide_quoted(error.context)})")
        mark = error.problem_mark or error.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        return where + " ".join(parts)
    if isinstance(error, yaml.reader.ReaderError):
        return f"character {error.position + 1}: a character YAML does not accept ({error.reason})"
    return f"a {type(error).__name__}"


def _hide_quoted(text: str) -> str:
    def hide(found: re.Match[str]) -> str:
        inner = found.group(1)
        keep = len(inner) <= 2 or (inner.startswith("<") and inner.endswith(">"))
        return found.group(0) if keep else _HIDDEN

    return _QUOTED.sub(hide, text)


def _describe(error: ValidationError) -> str:
    """The first few validation problems as ``key.path: message``. Values are never
    echoed (they may be secrets): pydantic's own messages name what was expected, and
    any string of the offending input that a message (ours included) repeats is hidden."""
    problems = []
    for item in error.errors(include_url=False)[:5]:
        path = ".".join(str(part) for part in item["loc"]) or "(top level)"
        message = "unknown key" if item["type"] == "extra_forbidden" else _hide_values(item["msg"], item.get("input"))
        problems.append(f"{path}: {message}")
    return "; ".join(problems)


def _hide_values(message: str, given: Any) -> str:
    """``message`` with every string value in ``given`` (a value, or a whole section),
    every word of one (a validator may quote one field of a value) and anything in
    double quotes replaced by ``'…'``, longest first so that no part of one survives.
    Keys are not values: they are the path the message names anyway."""
    for text in sorted(_strings(given), key=len, reverse=True):
        message = message.replace(repr(text), _HIDDEN).replace(text, _HIDDEN)
    # Libraries behind our validators (APScheduler's cron parser) double-quote a piece of the value.
    return _DOUBLE_QUOTED.sub(_HIDDEN, message)


def _strings(given: Any) -> set[str]:
    if isinstance(given, dict):
        return {s for v in given.values() for s in _strings(v)}
    if isinstance(given, list | tuple | set | frozenset):
        return {s for v in given for s in _strings(v)}
    if not isinstance(given, str):
        return set()
    return {text for text in (given, *given.split()) if len(text) >= _SHORTEST_HIDDEN}
