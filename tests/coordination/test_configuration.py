"""Configuration of several processes: what is refused, and what the worker says without it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from bot.config import Config, load_config
from bot.deploy_config import CoordinationConfig
from bot.errors import ConfigError
from tests.coordination.conftest import coordination_config


def test_several_processes_need_a_chroma_server() -> None:
    with pytest.raises(ValidationError, match="chroma.host"):
        Config(coordination=coordination_config("redis://127.0.0.1:6379/0"))


@pytest.mark.parametrize("url", ["http://127.0.0.1:6379", "127.0.0.1:6379", "valkey://x"])
def test_only_redis_urls_are_taken(url: str) -> None:
    with pytest.raises(ValidationError, match="redis://"):
        CoordinationConfig(redis_url=url)  # type: ignore[arg-type]


def test_the_redis_password_and_the_secret_stay_out_of_the_configuration_repr(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("chroma: {host: 127.0.0.1}\ncoordination: {redis_url: 'redis://:${REDIS_PASSWORD}@h:6379/0', "
                    "secret: '${COORDINATION_SECRET}'}\n")
    secret = "signing-secret-4b1d" * 2
    config = load_config(path, {"REDIS_PASSWORD": "hunter2-secret", "COORDINATION_SECRET": secret})
    assert config.coordination.enabled and config.coordination.secret.get_secret_value() == secret
    for shown in (repr(config), str(config.model_dump())):
        assert "hunter2-secret" not in shown and secret not in shown


@pytest.mark.parametrize(("secret", "problem"), [("", "need coordination.secret"),
                                                  ("short-secret-77a1", "at least 32 characters")])
def test_several_processes_need_a_long_shared_secret(tmp_path: Path, secret: str, problem: str) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("chroma: {host: 127.0.0.1}\ncoordination: {redis_url: 'redis://h:6379/0', "
                    "secret: '${COORDINATION_SECRET}'}\n")
    with pytest.raises(ConfigError, match=problem) as refused:
        load_config(path, {"COORDINATION_SECRET": secret})
    assert "coordination" in str(refused.value)
    assert not secret or secret not in str(refused.value)


def test_a_worker_without_coordination_says_what_to_set(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "bot", "--data-dir", str(tmp_path), "worker"],
                            capture_output=True, text=True, timeout=120,
                            env={**os.environ, "HF_HUB_OFFLINE": "1", "RAPTOR_CONFIG": ""})
    assert result.returncode == 1
    assert "coordination.redis_url" in result.stderr and "Traceback" not in result.stderr


def test_a_front_ends_index_is_one_of_the_front_ends(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("chroma: {host: 127.0.0.1}\ncoordination: {redis_url: 'redis://h:6379/0', "
                    "secret: '${COORDINATION_SECRET}', front_end_index: '${REPLICA}', front_ends: 2}\n")
    secret = "signing-secret-4b1d" * 2
    assert load_config(path, {"COORDINATION_SECRET": secret, "REPLICA": "1"}).coordination.front_end_index == 1
    with pytest.raises(ConfigError, match="front_end_index counts from 0"):
        load_config(path, {"COORDINATION_SECRET": secret, "REPLICA": "2"})
