"""The bot keeps numba's compiled kernels under its data directory by default (issue 13)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _sources(data_dir: Path, env: dict[str, str]) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "bot", "--data-dir", str(data_dir), "sources", "--channel", "c"],
        cwd=REPO, env=env, capture_output=True, text=True, check=False, timeout=300,
    )
    assert result.returncode == 0, result.stderr


def test_the_cache_defaults_to_the_data_directory(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env["HF_HUB_OFFLINE"] = "1"
    _sources(tmp_path / "data", env)
    assert (tmp_path / "data" / "numba-cache").is_dir()


def test_numba_cache_dir_in_the_environment_wins(tmp_path: Path) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "NUMBA_CACHE_DIR": str(tmp_path / "elsewhere")}
    _sources(tmp_path / "data", env)
    assert not (tmp_path / "data" / "numba-cache").exists()


_BUILD_AND_COUNT_WORKERS = """
import multiprocessing, sys
from pathlib import Path
from bot.composition import build_engine
from bot.config import Config
build_engine(Config(data_dir=Path(sys.argv[1])), clusters_soon=sys.argv[2] == "soon")
print(len(multiprocessing.active_children()))
"""


def test_a_one_shot_rebuild_starts_the_clustering_worker_while_models_load(tmp_path: Path) -> None:
    """``rebuild`` asks for the worker as the engine is built, so its start overlaps loading
    the embedding model; other commands start none."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}

    def workers(when: str) -> int:
        result = subprocess.run([sys.executable, "-c", _BUILD_AND_COUNT_WORKERS, str(tmp_path / when), when],
                                cwd=REPO, env=env, capture_output=True, text=True, check=False, timeout=300)
        assert result.returncode == 0, result.stderr
        return int(result.stdout.split()[-1])

    assert workers("soon") == 1
    assert workers("later") == 0
