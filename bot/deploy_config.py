"""The configuration of a deployment of many processes: coordination through Redis and
the observability endpoints. Separate from :mod:`bot.config` so that file keeps to what
one bot does; :class:`bot.config.Config` embeds both sections."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

REDIS_SCHEMES = ("redis://", "rediss://", "unix://")
SHORTEST_SECRET = 32  # characters of coordination.secret: `openssl rand -hex 32` gives 64
# A rebuild reply older than this when a front-end reads it is dropped, not posted: after an
# outage a channel gets no burst of stale progress and results. Five minutes outlasts a
# Redis failover or a rolling restart of the front-ends, which delay replies by seconds.
REPLY_MAX_AGE_S = 300.0


class CoordinationConfig(BaseModel):
    """Several processes sharing one Redis (or Valkey) server. Empty ``redis_url``: one
    process does everything, as on the embedded defaults (nothing here is used then).

    ``secret`` keys the HMAC that signs what the bot's processes hand one another through
    the server (rebuild requests, and the replies the front-ends post): whoever can write to
    the server but does not hold it cannot make a front-end post. Required with ``redis_url``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    redis_url: SecretStr = SecretStr("")  # may carry a password: never logged
    secret: SecretStr = SecretStr("")  # shared by the bot's processes only; never logged
    namespace: str = Field(default="raptor", min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    event_ttl_s: int = Field(default=3600, ge=60, le=7 * 24 * 3600)  # how long an event id is remembered
    lease_s: float = Field(default=30.0, ge=2, le=3600)  # a rebuild's lease on its channel; renewed at a third
    # A worker's build that reports no progress for this long stops renewing its lease (it is stuck).
    stall_s: float = Field(default=900.0, ge=10, le=7 * 24 * 3600)
    sweep_every_s: float = Field(default=10.0, ge=0.5, le=3600)  # how often lost rebuild requests are looked for
    job_timeout_s: int = Field(default=4 * 3600, ge=60, le=7 * 24 * 3600)  # the queue library's limit per build
    connect_timeout_s: float = Field(default=2.0, gt=0, le=60)
    reply_max_age_s: float = Field(default=REPLY_MAX_AGE_S, ge=5, le=7 * 24 * 3600)  # older replies are dropped
    # A front-end's place among the front-ends: which Discord events it answers while Redis is
    # down (see bot.coordination.deliveries). Each its own index; all the same count.
    front_end_index: int = Field(default=0, ge=0, le=1023)
    front_ends: int = Field(default=1, ge=1, le=1024)

    @field_validator("redis_url")
    @classmethod
    def _known_scheme(cls, url: SecretStr) -> SecretStr:
        value = url.get_secret_value()
        if value and not value.startswith(REDIS_SCHEMES):
            raise ValueError("redis_url must start with redis://, rediss:// or unix://")
        return url

    @model_validator(mode="after")
    def _processes_share_a_secret(self) -> CoordinationConfig:
        secret = self.secret.get_secret_value()
        if self.enabled and not secret:
            raise ValueError("several processes need coordination.secret (the same on every front-end and "
                             "worker, from the environment: secret: ${COORDINATION_SECRET})")
        if secret and len(secret) < SHORTEST_SECRET:
            raise ValueError(f"coordination.secret must be at least {SHORTEST_SECRET} characters "
                             "(such as the output of `openssl rand -hex 32`)")
        return self

    @model_validator(mode="after")
    def _index_among_front_ends(self) -> CoordinationConfig:
        if self.front_end_index >= self.front_ends:
            raise ValueError(f"front_end_index counts from 0: {self.front_end_index} is not one of "
                             f"{self.front_ends} front-end(s) (front_ends)")
        return self

    @property
    def enabled(self) -> bool:
        return bool(self.redis_url.get_secret_value())


class ObservabilityConfig(BaseModel):
    """Prometheus metrics, ``/healthz`` and ``/readyz`` on ``port`` (0: not served), and the log format."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str = "127.0.0.1"
    port: int = Field(default=0, ge=0, le=65535)
    log_format: Literal["text", "json"] = "text"
