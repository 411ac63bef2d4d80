"""numba's persistent cache (issue 13, fast cold start).

The directory defaults to ``<data_dir>/numba-cache`` unless
``NUMBA_CACHE_DIR`` is set, and a second process clustering enough rows to
need UMAP loads every UMAP kernel from that cache instead of compiling it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from raptor_engine import numba_cache
from raptor_engine.numba_cache import ENV_VAR, SEED_ENV_VAR, SUBDIRECTORY, seed_from, use_cache_dir

REPO = Path(__file__).resolve().parents[2]

# A fresh process clusters 60 rows (over small_input_rows: UMAP runs) and
# reports, for every UMAP kernel it ran, numba's cache hits and misses.
_CHILD = """
import json, time
import numpy as np
from raptor_engine.clustering import cluster_rows
rng = np.random.default_rng(3)
x = rng.normal(size=(60, 384)).astype(np.float32)
x /= np.linalg.norm(x, axis=1, keepdims=True)
start = time.perf_counter()
clusters = cluster_rows(x, [100] * 60)
seconds = time.perf_counter() - start
from numba.core.registry import CPUDispatcher
import umap.layouts, umap.umap_
kernels = {}
for module in (umap.umap_, umap.layouts):
    for name, value in vars(module).items():
        if isinstance(value, CPUDispatcher) and value.signatures and value.py_func.__module__ == module.__name__:
            stats = value.stats
            kernels[module.__name__ + "." + name] = [sum(stats.cache_hits.values()), sum(stats.cache_misses.values())]
print(json.dumps({"seconds": seconds, "clusters": clusters, "kernels": kernels}))
"""


def _cluster_in_fresh_process(cache: Path) -> dict[str, object]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", ENV_VAR: str(cache)}
    result = subprocess.run(
        [sys.executable, "-c", _CHILD], cwd=REPO, env=env, capture_output=True, text=True, check=False, timeout=600
    )
    assert result.returncode == 0, result.stderr
    report: dict[str, object] = json.loads(result.stdout.strip().splitlines()[-1])
    return report


def test_default_is_under_the_data_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    chosen = use_cache_dir(tmp_path / "data")
    assert chosen == (tmp_path / "data" / SUBDIRECTORY).resolve()
    assert chosen.is_dir()
    assert os.environ[ENV_VAR] == str(chosen)


def test_a_set_environment_variable_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "elsewhere"))
    assert use_cache_dir(tmp_path / "data") == tmp_path / "elsewhere"
    assert os.environ[ENV_VAR] == str(tmp_path / "elsewhere")
    assert not (tmp_path / "data").exists()


def test_switching_umap_caching_on_is_idempotent() -> None:
    import umap  # noqa: F401  (the kernels must exist to be switched on)

    numba_cache.cache_umap_kernels()
    assert numba_cache.cache_umap_kernels() == 0


def test_a_second_process_loads_umap_kernels_instead_of_compiling(tmp_path: Path) -> None:
    cache = tmp_path / "numba-cache"
    first = _cluster_in_fresh_process(cache)
    second = _cluster_in_fresh_process(cache)
    first_kernels = first["kernels"]
    second_kernels = second["kernels"]
    assert isinstance(first_kernels, dict) and isinstance(second_kernels, dict)
    # The first process compiled UMAP's layout and graph kernels and wrote them...
    assert "umap.layouts._nb_optimize_layout_euclidean_single_epoch" in first_kernels
    assert "umap.umap_.smooth_knn_dist" in first_kernels
    assert any(p.suffix == ".nbc" and p.name.startswith("layouts.") for p in cache.rglob("*"))
    # ...and the second compiled none of them: every one it ran came from the
    # cache (helpers like ``clip`` are inlined in the cached code, not run).
    assert set(second_kernels) <= set(first_kernels)
    for name in ("umap.layouts._nb_optimize_layout_euclidean_single_epoch", "umap.umap_.smooth_knn_dist"):
        assert second_kernels[name][0] >= 1, second_kernels
    assert all(misses == 0 for _, misses in second_kernels.values()), second_kernels
    assert second["clusters"] == first["clusters"]


def test_a_new_data_directory_loads_the_kernels_compiled_at_install(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 31: ``python -m raptor_engine.install_kernels`` (run by ``make install`` and the
    Docker build) compiles UMAP's kernels into the seed; a new data directory's cache is seeded
    from it, so its first clustering compiles nothing."""
    seed = tmp_path / "seed"
    env = {key: value for key, value in os.environ.items() if key != ENV_VAR}
    compiled = subprocess.run([sys.executable, "-m", "raptor_engine.install_kernels"], cwd=REPO, capture_output=True,
                              text=True, env={**env, "HF_HUB_OFFLINE": "1", SEED_ENV_VAR: str(seed)}, timeout=600)
    assert compiled.returncode == 0, compiled.stderr
    assert any(seed.rglob("*.nbi")) and str(seed) in compiled.stdout

    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setenv(SEED_ENV_VAR, str(seed))
    cache = use_cache_dir(tmp_path / "data")
    assert any(cache.rglob("*.nbi"))
    report = _cluster_in_fresh_process(cache)
    kernels = report["kernels"]
    assert isinstance(kernels, dict) and "umap.layouts._nb_optimize_layout_euclidean_single_epoch" in kernels
    assert all(misses == 0 for _, misses in kernels.values()), kernels
    assert seed_from(seed, cache) == 0  # kernels there already are never overwritten
