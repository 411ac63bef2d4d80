"""What an operator sees on stderr: ``log_level`` decides it, a normal start warns of nothing,
and the start says once which store and models are used, never a secret. Real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import REPO

# Only what the entry point itself sets (python -m bot): the test's own defaults must not hide a warning.
ENV = {k: v for k, v in os.environ.items() if k not in ("TOKENIZERS_PARALLELISM", "ANONYMIZED_TELEMETRY",
                                                         "HF_HUB_DISABLE_PROGRESS_BARS")}
ENV |= {"HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}

STORE_LINE = "store: Chroma embedded in "
MODELS_LINE = "embeddings: all-MiniLM-L6-v2 (packaged); language model: offline"


def cli(tmp_path: Path, config: str, *argv: str, env: dict[str, str] = ENV) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "config.yaml"
    path.write_text(config)
    return subprocess.run([sys.executable, "-m", "bot", "--config", str(path), "--data-dir", str(tmp_path / "data"),
                           *argv], check=False, capture_output=True, text=True, env=env, cwd=REPO, timeout=300)


def levels(stderr: str) -> set[str]:
    return {line.split(" ", 1)[0] for line in stderr.splitlines() if line.split(" ", 1)[0].isupper()}


def test_log_level_decides_what_is_logged(tmp_path: Path) -> None:
    quiet = cli(tmp_path, "log_level: WARNING\n", "sources", "--channel", "c")
    assert quiet.returncode == 0 and quiet.stderr == ""
    chatty = cli(tmp_path, "log_level: DEBUG\n", "sources", "--channel", "c")
    assert chatty.returncode == 0 and {"DEBUG", "INFO"} <= levels(chatty.stderr)
    assert "WARNING" not in levels(chatty.stderr)
    # Said once, at start: which store, which models.
    assert chatty.stderr.count(STORE_LINE + str((tmp_path / "data" / "chroma").resolve())) == 1
    assert chatty.stderr.count(MODELS_LINE) == 1
    assert "DEBUG numba" not in chatty.stderr  # numba's compile trace is not the operator's business
    verbose = cli(tmp_path, "log_level: WARNING\n", "-v", "sources", "--channel", "c")
    assert levels(verbose.stderr) == {"INFO"}  # -v shows INFO whatever log_level says


def test_no_secret_reaches_the_logs(tmp_path: Path, chroma_server: tuple[str, int]) -> None:
    host, port = chroma_server
    secrets = {"CHROMA_SECRET": "chroma-token-7f3a9", "LLM_KEY": "sk-llm-key-51be2", "URL_PASSWORD": "urlpass-88c1",
               "URL_QUERY": "querysecret-a41d", "SLACK_SECRET": "xoxb-slack-token-0c9e", "APP_SECRET": "xapp-1-app-77d0",
               "DISCORD_SECRET": "discord-token-5e21", "REDIS_SECRET": "redispass-3c7e",
               "COORDINATION_SECRET": "coordination-secret-9d04-0123456789abcdef"}
    config = (
        "log_level: DEBUG\n"
        f"chroma:\n  host: {host}\n  port: {port}\n  token: ${{CHROMA_SECRET}}\n"
        "llm:\n  base_url: http://operator:${URL_PASSWORD}@127.0.0.1:9/v1?key=${URL_QUERY}\n"
        "  model: tiny\n  api_key: ${LLM_KEY}\n"
        "slack:\n  bot_token: ${SLACK_SECRET}\n  app_token: ${APP_SECRET}\n"
        "discord:\n  token: ${DISCORD_SECRET}\n"
        "coordination:\n  redis_url: redis://:${REDIS_SECRET}@127.0.0.1:9/0\n  secret: ${COORDINATION_SECRET}\n"
    )
    result = cli(tmp_path, config, "sources", "--channel", "c", env=ENV | secrets)
    assert result.returncode == 0, result.stderr
    assert f"store: the Chroma server at http://{host}:{port}" in result.stderr and "with a token" in result.stderr
    assert "language model: tiny at http://127.0.0.1:9/v1" in result.stderr
    leaked = [name for name, secret in secrets.items() if secret in result.stderr + result.stdout]
    assert leaked == []


class Lines:
    """The lines a pipe gives, read by a thread, so that a test can wait for one with a timeout."""

    def __init__(self, pipe: object) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(pipe,), daemon=True)
        self._thread.start()

    def _read(self, pipe: object) -> None:
        for line in pipe:  # type: ignore[attr-defined]
            self.lines.append(line)

    def wait_for(self, fragment: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(fragment in line for line in self.lines):
                return True
            time.sleep(0.2)
        return False

    def close(self) -> str:
        self._thread.join(timeout=30)
        return "".join(self.lines)


@pytest.mark.slow
def test_a_normal_start_logs_no_warning(tmp_path: Path) -> None:
    """The console bot with the default configuration, through its start-up and UMAP's warm-up,
    at INFO so that anything worth a warning would show."""
    process = subprocess.Popen([sys.executable, "-m", "bot", "-v", "--data-dir", str(tmp_path / "data")],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=ENV, cwd=REPO, start_new_session=True)
    assert process.stdin is not None
    out, err = Lines(process.stdout), Lines(process.stderr)
    try:
        assert out.wait_for("Welcome", timeout=240)
        err.wait_for("UMAP is compiled", timeout=240)  # the warm-up too, where it still runs at start
        started = "".join(err.lines)  # the start only: stopping is another matter
        process.stdin.write("/quit\n")
        process.stdin.close()
        assert process.wait(timeout=60) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert started.count(STORE_LINE) == 1 and started.count(MODELS_LINE) == 1
    warnings = [line for line in started.splitlines() if "WARN" in line.upper() or "Traceback" in line]
    assert warnings == [], started
    err.close()
