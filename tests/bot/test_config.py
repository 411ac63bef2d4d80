"""Configuration loading: the example file, unknown keys, environment references."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.config import Config, load_config
from bot.errors import ConfigError
from tests.conftest import REPO


def test_example_file_loads_and_states_the_defaults() -> None:
    assert load_config(REPO / "config.example.yaml") == Config()


def test_file_limits_reach_the_engine(tmp_path: Path) -> None:
    from bot.composition import engine_settings  # noqa: PLC0415 - only this test needs the engine side

    path = tmp_path / "c.yaml"
    path.write_text("files:\n  max_mb: 2\n  max_text_mb: 0.5\n")
    settings = engine_settings(load_config(path))
    assert (settings.max_file_bytes, settings.max_text_chars) == (2 * 1024 * 1024, 512 * 1024)


def test_the_channels_kept_indexed_reach_the_engine_and_are_at_least_one(tmp_path: Path) -> None:
    from bot.composition import engine_settings  # noqa: PLC0415 - only this test needs the engine side

    path = tmp_path / "c.yaml"
    path.write_text("retrieval:\n  indexed_channels: 500\n")
    assert engine_settings(load_config(path)).indexed_channels == 500
    path.write_text("retrieval:\n  indexed_channels: 0\n")
    with pytest.raises(ConfigError, match=r"retrieval\.indexed_channels"):
        load_config(path)


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


def test_a_channel_overrides_only_the_limits_it_names(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "bot:\n"
        "  rate_limits:\n"
        "    {questions_per_user_per_minute: 3, uploads_per_user_per_hour: 5, upload_mb_per_channel_per_day: 50}\n"
        "  limits: {max_sources_per_channel: 100}\n"
        "  channels:\n"
        "    slack/T1/C1:\n"
        "      rate_limits: {upload_mb_per_channel_per_day: 500}\n"
        "      limits: {max_stored_mb_per_channel: 20}\n"
    )
    bot = load_config(path).bot
    own = bot.rate_limits_for("slack/T1/C1")
    assert (own.uploads_per_user_per_hour, own.upload_mb_per_channel_per_day) == (5, 500)  # 5 inherited
    assert own.questions_per_user_per_minute == 3  # the global value, not the channel section's default of 10
    caps = bot.limits_for("slack/T1/C1")
    assert (caps.max_sources_per_channel, caps.max_stored_mb_per_channel) == (100, 20)
    assert bot.rate_limits_for("slack/T1/C2") == bot.rate_limits and bot.limits_for("slack/T1/C2") == bot.limits
    defaults = Config().bot
    assert defaults.rate_limits.uploads_per_user_per_hour == 30
    assert defaults.rate_limits.upload_mb_per_channel_per_day == 100
    assert defaults.limits.max_sources_per_channel == 0 and defaults.limits.max_stored_mb_per_channel == 0
    path.write_text("bot:\n  channels:\n    slack/T1/C1:\n      limits: {max_source: 3}\n")
    with pytest.raises(ConfigError, match=r"bot\.channels\.slack/T1/C1\.limits\.max_source: unknown key"):
        load_config(path)


SECRET = "xoxb-2042-s3cr3tVALUE"
BAD_FILES = {
    "a line that is no key": f"slack:\n  bot_token: {SECRET}\n  {SECRET}\n  mode: http\n",
    "an alias": f"slack:\n  bot_token: *{SECRET}\n",
    "a tag": f"slack:\n  bot_token: !!python/object:{SECRET} x\n",
    "a bad escape": f'slack:\n  bot_token: "{SECRET}\\q"\n',
    "an open quote": f"slack:\n  bot_token: '{SECRET}\n",
    "a tab": f"slack:\n  bot_token:\t{SECRET}\n",
    "a literal": f"slack:\n  mode: {SECRET}\n",
    "a number": f"chroma:\n  port: {SECRET}\n",
    "a boolean": f"retrieval:\n  hybrid: {SECRET}\n",
    "a list": f"discord:\n  guilds: {SECRET}\n",
    "a mapping": f"slack:\n  bot_token: {{a: {SECRET}}}\n",
    "a section": f"slack: {SECRET}\n",
    "a section's check": f"slack:\n  bot_token: {SECRET}\n",
    "a cron line": f"bot:\n  schedule:\n    cron: '61 {SECRET} * * *'\n",
    "a cron field": f"bot:\n  channels:\n    slack/T1/C1:\n      schedule:\n        cron: '1 2 3 4 {SECRET}'\n",
    "a date": f"slack:\n  bot_token: {SECRET}\nwhen: 2024-13-45\n",
}


@pytest.mark.parametrize("name", list(BAD_FILES))
def test_no_configuration_error_echoes_a_value(tmp_path: Path, name: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(BAD_FILES[name])
    with pytest.raises(ConfigError) as error:
        load_config(path)
    text = str(error.value)
    assert str(path) in text
    for fragment in (SECRET, "xoxb", "s3cr3t", "VALUE"):
        assert fragment not in text, text
    assert error.value.__cause__ is None and error.value.__suppress_context__  # a traceback would print it


def test_a_yaml_error_says_where_and_what(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(BAD_FILES["a line that is no key"])
    with pytest.raises(ConfigError, match=r"line 4, column 3: could not find expected ':'"):
        load_config(path)
    path.write_text("tree: [unclosed\n")
    with pytest.raises(ConfigError, match=r"expected ',' or '\]', but got '<stream end>'"):
        load_config(path)
    path.write_bytes(b"slack:\n  bot_token: \xff\n")
    with pytest.raises(ConfigError, match=r"not UTF-8 text \(byte 21"):
        load_config(path)


# -- one source of defaults: the configuration and the engine never disagree ----------


def test_the_default_configuration_gives_the_engines_default_settings() -> None:
    from bot.composition import engine_settings  # noqa: PLC0415 - the engine side is heavy
    from raptor_engine.engine import EngineSettings

    assert engine_settings(Config()) == EngineSettings()


def test_the_language_model_defaults_are_the_engines() -> None:
    from bot.composition import llm_settings  # noqa: PLC0415
    from raptor_engine.llm import LLMSettings

    config = Config.model_validate({"llm": {"base_url": "http://127.0.0.1:9/v1", "model": "m"}})
    assert llm_settings(config) == LLMSettings(base_url="http://127.0.0.1:9/v1", model="m")


def test_the_offline_answer_defaults_are_the_engines() -> None:
    from raptor_engine.answering import ExtractiveSettings

    assert Config().retrieval.summary_chars == ExtractiveSettings().summary_chars


@pytest.mark.parametrize("name", ["reduction_dim", "max_clusters", "local_neighbors", "max_cluster_tokens"])
def test_the_configuration_and_the_engine_accept_the_same_tree_settings(name: str) -> None:
    from bot.composition import engine_settings  # noqa: PLC0415
    from raptor_engine.clustering import ClusteringSettings

    field = Config.model_fields["tree"].annotation.model_fields[name]  # type: ignore[union-attr]
    lowest = next(m.ge for m in field.metadata if getattr(m, "ge", None) is not None)
    settings = engine_settings(Config.model_validate({"tree": {name: lowest}}))
    assert getattr(settings.clustering, name) == lowest
    with pytest.raises(ConfigError):
        load_config_text(f"tree:\n  {name}: {lowest - 1}\n")
    with pytest.raises(ValueError, match=name):  # and what it refuses, the engine refuses
        ClusteringSettings(**{name: lowest - 1})


def load_config_text(text: str) -> Config:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "c.yaml"
        path.write_text(text)
        return load_config(path)


@pytest.mark.parametrize(("text", "problem"), [
    ("answers:\n  judge: nli\n", "answers.judge 'nli' needs answers.nli_model"),
    ("answers:\n  nli_model: /models/nli\n", "answers.nli_model is used only with answers.judge: nli"),
    ("answers:\n  judge: model\n", "answers.judge asks the llm endpoint to judge, which needs llm.base_url"),
    ("answers:\n  judge: oracle\n", r"answers\.judge"),
])
def test_a_support_judge_needs_what_it_judges_with(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=problem):
        load_config(path)


def test_an_nli_model_directory_that_is_not_one_is_said_at_start(tmp_path: Path) -> None:
    from bot.composition import nli_judge

    with pytest.raises(ConfigError, match="is not a directory holding an NLI model"):
        nli_judge(str(tmp_path / "missing"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="answers.nli_model: cannot load the NLI model"):
        nli_judge(str(tmp_path / "empty"))
