"""Configuration loading: the example file, unknown keys, environment references."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.config import Config, load_config
from bot.errors import ConfigError
from tests.conftest import REPO


def test_example_file_loads_and_states_the_defaults() -> None:
    assert load_config(REPO / "config.example.yaml") == Config()


def test_unknown_key_is_named_with_its_path(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("tree:\n  summary_tokens: 100\n  max_clusterz: 3\n")
    with pytest.raises(ConfigError, match=r"tree\.max_clusterz: unknown key"):
        load_config(path)


def test_invalid_value_is_named_without_echoing_it(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("chroma:\n  port: hunter2\n")
    with pytest.raises(ConfigError, match=r"chroma\.port") as error:
        load_config(path)
    assert "hunter2" not in str(error.value)


def test_environment_references_expand(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("chroma:\n  host: ${CHROMA_HOST}\n")
    assert load_config(path, {"CHROMA_HOST": "db.internal"}).chroma.host == "db.internal"
    with pytest.raises(ConfigError, match="CHROMA_HOST is not set"):
        load_config(path, {})


def test_unreadable_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("tree: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
    listed = tmp_path / "list.yaml"
    listed.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(listed)
