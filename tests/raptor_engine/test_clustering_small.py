"""Small inputs are clustered without UMAP (issue 13, fast cold start).

A call of ``cluster_rows`` on at most ``small_input_rows`` rows reduces with
PCA: it must not import numba or umap (their import and compilation is what
made a cold rebuild of one paper take 40 s), must keep the full contract and
determinism, and must still separate distinct topics.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from raptor_engine import reduction
from raptor_engine.clustering import ClusteringSettings, cluster_rows, passes

DIM = 384
SMALL = ClusteringSettings().small_input_rows
REPO = Path(__file__).resolve().parents[2]


def _topics(n: int, topics: int, seed: int, spread: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    """``n`` normalised points around ``topics`` random centres; (points, topic per row)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(topics, DIM))
    labels = np.arange(n) % topics
    points = centres[labels] + spread * rng.normal(size=(n, DIM))
    points /= np.linalg.norm(points, axis=1, keepdims=True)
    return points.astype(np.float32), labels


def _check(clusters: list[list[int]], n: int, tokens: np.ndarray, budget: int) -> None:
    """The contract of ``cluster_rows``: coverage, no empty or duplicate
    clusters, sorted order, token budget (except lone oversized rows)."""
    assert sorted({r for c in clusters for r in c}) == list(range(n))
    assert all(c and c == sorted(c) for c in clusters)
    assert len({tuple(c) for c in clusters}) == len(clusters)
    assert clusters == sorted(clusters)
    assert all(len(c) == 1 or int(tokens[c].sum()) <= budget for c in clusters)


def _spy_umap(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record the row count of every UMAP fit (without running UMAP)."""
    calls: list[int] = []

    def spy(points: np.ndarray, n_neighbors: int, n_components: int, *args: object) -> np.ndarray:
        calls.append(len(points))
        return reduction.pca(points, n_components).astype(np.float32)

    monkeypatch.setattr(passes, "umap_reduce", spy)
    return calls


def test_small_input_imports_neither_umap_nor_numba() -> None:
    # A fresh interpreter: this test process may have imported umap already.
    code = (
        "import json, sys, numpy as np\n"
        "from raptor_engine.clustering import cluster_rows\n"
        f"n = {SMALL}\n"
        "rng = np.random.default_rng(1)\n"
        "x = rng.normal(size=(n, 384)).astype(np.float32)\n"
        "x /= np.linalg.norm(x, axis=1, keepdims=True)\n"
        "clusters = cluster_rows(x, [400] * n)\n"
        "print(json.dumps({'clusters': len(clusters), "
        "'modules': sorted(m for m in ('umap', 'numba', 'pynndescent') if m in sys.modules)}))\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=False, timeout=120
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["modules"] == []
    assert report["clusters"] > 1  # 32 x 400 tokens is over the budget: it was split


@pytest.mark.parametrize("n", [12, 20, SMALL])
def test_small_inputs_never_call_umap(n: int, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _spy_umap(monkeypatch)
    points, _ = _topics(n, 3, seed=n)
    tokens = np.full(n, 300)
    _check(cluster_rows(points, tokens), n, tokens, ClusteringSettings().max_cluster_tokens)
    assert calls == []


def test_one_row_more_uses_umap(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _spy_umap(monkeypatch)
    points, _ = _topics(SMALL + 1, 3, seed=4)
    cluster_rows(points, np.full(SMALL + 1, 100))
    assert calls and calls[0] == SMALL + 1


def test_zero_small_input_rows_keeps_umap_for_every_size(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _spy_umap(monkeypatch)
    points, _ = _topics(12, 3, seed=5)
    cluster_rows(points, np.full(12, 100), ClusteringSettings(small_input_rows=0))
    assert calls and calls[0] == 12


def test_small_inputs_separate_distinct_topics() -> None:
    # Three well-separated topics, 30 rows: no cluster mixes two topics.
    points, labels = _topics(30, 3, seed=6, spread=0.3)
    tokens = np.full(30, 100)
    clusters = cluster_rows(points, tokens)
    _check(clusters, 30, tokens, ClusteringSettings().max_cluster_tokens)
    assert len(clusters) >= 3
    assert all(len(set(labels[c].tolist())) == 1 for c in clusters)


def test_small_inputs_are_deterministic() -> None:
    points, _ = _topics(SMALL, 4, seed=7, spread=0.8)
    tokens = np.full(SMALL, 250)
    first = cluster_rows(points, tokens)
    assert cluster_rows(points.copy(), tokens.copy()) == first


@pytest.mark.parametrize("n", [13, 25, SMALL])
def test_small_inputs_over_a_tight_budget_terminate(n: int) -> None:
    points, _ = _topics(n, 2, seed=n, spread=1.0)
    tokens = np.full(n, 400)
    settings = ClusteringSettings(max_cluster_tokens=1000)
    _check(cluster_rows(points, tokens, settings), n, tokens, 1000)


def test_identical_small_inputs_over_budget_terminate() -> None:
    vector = np.random.default_rng(8).normal(size=DIM).astype(np.float32)
    points = np.tile(vector / np.linalg.norm(vector), (20, 1))
    tokens = np.full(20, 400)
    _check(cluster_rows(points, tokens, ClusteringSettings(max_cluster_tokens=1000)), 20, tokens, 1000)


def test_negative_small_input_rows_is_rejected() -> None:
    with pytest.raises(ValueError, match="small_input_rows"):
        ClusteringSettings(small_input_rows=-1)
