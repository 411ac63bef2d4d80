"""`python -m bot --config` with an ``llm:`` section: summaries, answers and embeddings
from an OpenAI-compatible endpoint (the stand-in server on 127.0.0.1, reached by the real
openai client)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from bot.cli import main
from testkit.openai_stub import OpenAIStub
from tests.conftest import SAMPLE


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), stdin=io.StringIO(), stdout=out), out.getvalue()


def write_config(tmp_path: Path, stub: OpenAIStub, embedder: str = "") -> Path:
    config = tmp_path / "llm.yaml"
    config.write_text(
        f"data_dir: {tmp_path / 'data'}\n"
        f"llm:\n  base_url: {stub.base_url}\n  model: stub-model\n  api_key: ${{STUB_KEY}}\n  max_retries: 1\n"
        + embedder
    )
    return config


def test_the_model_summarises_and_answers(tmp_path: Path, stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STUB_KEY", "sk-test-secret")
    config = str(write_config(tmp_path, stub))
    assert run("--config", config, "ingest", "--channel", "c", str(SAMPLE))[0] == 0
    code, out = run("--config", config, "rebuild", "--channel", "c")
    summaries = [r for r in stub.requests if r.path.endswith("/chat/completions")]
    assert code == 0 and summaries and f"{len(summaries)} summaries written" in out
    assert "Write a summary of the following" in str(summaries[0].body)
    assert summaries[0].headers.get("authorization") == "Bearer sk-test-secret"
    code, out = run("--config", config, "ask", "--channel", "c", "When is the launch?")
    assert code == 0 and "The launch is planned for March [1]" in out and "[99]" not in out
    code, out = run("--config", config, "inspect", "--channel", "c")
    assert "Summary: " in out  # the top summaries are the model's


def test_a_failing_model_stops_the_build_and_keeps_the_tree(tmp_path: Path, stub: OpenAIStub,
                                                           monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("STUB_KEY", "sk-test-secret")
    config = str(write_config(tmp_path, stub))
    run("--config", config, "ingest", "--channel", "c", str(SAMPLE))
    assert run("--config", config, "rebuild", "--channel", "c")[0] == 0
    (tmp_path / "more.txt").write_text("A new note about parking. " * 40)
    run("--config", config, "ingest", "--channel", "c", str(tmp_path / "more.txt"))
    from testkit.openai_stub import Behaviour

    stub.default = Behaviour.error(500)
    code, _ = run("--config", config, "rebuild", "--channel", "c")
    err = capsys.readouterr().err
    assert code == 1 and "previous tree still answers" in err and "500" in err
    assert "sk-test-secret" not in err
    code, out = run("--config", config, "inspect", "--channel", "c")
    assert code == 0 and "tree v1" in out and "2 sources" in out


def test_embeddings_over_the_api(tmp_path: Path, stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STUB_KEY", "k")
    config = str(write_config(tmp_path, stub, "embedder:\n  provider: api\n  model: stub-embed\n"))
    assert run("--config", config, "ingest", "--channel", "c", str(SAMPLE))[0] == 0
    assert run("--config", config, "rebuild", "--channel", "c")[0] == 0
    embeds = [r for r in stub.requests if r.path.endswith("/embeddings")]
    assert embeds and all(r.body["model"] == "stub-embed" for r in embeds)
    code, out = run("--config", config, "retrieve", "--channel", "c", "--json", "on-call")
    assert code == 0 and '"hits"' in out


def test_api_embedder_without_endpoint_is_a_config_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("embedder:\n  provider: api\n")
    assert run("--config", str(config), "sources", "--channel", "c")[0] == 1
    assert "needs llm.base_url" in capsys.readouterr().err


def test_a_rebuild_ceiling_names_its_key(tmp_path: Path, stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("STUB_KEY", "k")
    config = write_config(tmp_path, stub)
    config.write_text(config.read_text() + "  max_calls_per_rebuild: 2\n")
    run("--config", str(config), "ingest", "--channel", "c", str(SAMPLE))
    code, _ = run("--config", str(config), "rebuild", "--channel", "c")
    err = capsys.readouterr().err
    assert code == 1 and "ceiling of 2 language-model calls" in err and "llm.max_calls_per_rebuild" in err
    assert len([r for r in stub.requests if r.path.endswith("/chat/completions")]) <= 2
