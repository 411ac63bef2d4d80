"""Tests of ``raptor_engine.clustering``: the guarantees of ``cluster_rows``.

Every test that clusters asserts the full contract (coverage, no empty or
duplicate clusters, sorted order, token budget) through ``_check``. UMAP's
numba compilation is paid once, by the module fixture calling ``warm_up``.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np
import pytest
from sklearn.mixture import GaussianMixture

# numba's on-disk cache makes UMAP's compilation a few seconds instead of
# 10-15; only effective when numba has not been imported yet.
os.environ.setdefault("NUMBA_CACHE_DIR", str(Path(__file__).parents[2] / ".cache" / "numba"))

from raptor_engine import mixtures, reduction  # noqa: E402  (after NUMBA_CACHE_DIR)
from raptor_engine.clustering import ClusteringSettings, cluster_rows, passes, split, warm_up  # noqa: E402

# UMAP warns on every fit that a precomputed kNN (which we pass on purpose)
# disables transform(); nothing here uses transform.
pytestmark = pytest.mark.filterwarnings("ignore:precomputed_knn:UserWarning")

DIM = 384
BUDGET = ClusteringSettings().max_cluster_tokens


@pytest.fixture(scope="module", autouse=True)
def _compiled() -> None:
    """Pay UMAP's numba compilation once for the whole module."""
    warm_up()


# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------


def _blobs(
    n: int,
    centres: int,
    seed: int,
    spread: float = 0.6,
    duplicates: int = 0,
    near_duplicates: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Normalised Gaussian blobs in DIM dims, with exact and near duplicates.

    Returns ``(embeddings float32 n x DIM, blob label per row)``. The last
    ``duplicates`` rows copy earlier rows exactly; the ``near_duplicates``
    before them copy earlier rows plus noise of 1e-6.
    """
    rng = np.random.default_rng(seed)
    centre_vectors = rng.normal(size=(centres, DIM))
    labels = rng.integers(0, centres, n)
    points = centre_vectors[labels] + spread * rng.normal(size=(n, DIM))
    originals = n - duplicates - near_duplicates
    assert originals > 0
    for i in range(originals, n):
        source = int(rng.integers(0, originals))
        points[i] = points[source]
        labels[i] = labels[source]
        if i < originals + near_duplicates:
            points[i] += 1e-6 * rng.normal(size=DIM)
    points /= np.linalg.norm(points, axis=1, keepdims=True)
    return points.astype(np.float32), labels


def _identical(n: int, seed: int = 3) -> np.ndarray:
    """``n`` copies of one normalised random vector."""
    vector = np.random.default_rng(seed).normal(size=DIM)
    vector /= np.linalg.norm(vector)
    return np.tile(vector.astype(np.float32), (n, 1))


def _check(clusters: list[list[int]], n: int, tokens: np.ndarray, budget: int = BUDGET) -> None:
    """Assert every guarantee of ``cluster_rows`` on its output."""
    assert isinstance(clusters, list)
    covered: set[int] = set()
    for cluster in clusters:
        assert isinstance(cluster, list) and cluster, "empty cluster"
        assert all(isinstance(row, int) for row in cluster)
        assert cluster == sorted(set(cluster)), "members not sorted/unique"
        assert 0 <= cluster[0] and cluster[-1] < n
        total = int(tokens[cluster].sum())
        assert total <= budget or len(cluster) == 1, f"{total} tokens in {len(cluster)} rows"
        covered.update(cluster)
    assert covered == set(range(n)), "some rows are in no cluster"
    assert len({tuple(c) for c in clusters}) == len(clusters), "duplicate clusters"
    assert clusters == sorted(clusters), "clusters not in deterministic order"


def _purity(clusters: list[list[int]], labels: np.ndarray) -> float:
    """Share of clusters whose members all come from one blob."""
    return float(np.mean([len(set(labels[c].tolist())) == 1 for c in clusters]))


# --------------------------------------------------------------------------
# Sizes: 0, 1, 2, 3, 11, 12
# --------------------------------------------------------------------------


def test_no_rows_gives_no_clusters() -> None:
    assert cluster_rows(np.zeros((0, DIM), dtype=np.float32), []) == []
    assert cluster_rows(np.zeros((0,), dtype=np.float32), []) == []


def test_one_row_is_one_cluster() -> None:
    points, _ = _blobs(1, 1, seed=1)
    assert cluster_rows(points, [10]) == [[0]]
    # Even when it alone exceeds the budget.
    assert cluster_rows(points, [BUDGET * 2]) == [[0]]


def test_two_rows_within_budget_are_one_cluster() -> None:
    points, _ = _blobs(2, 2, seed=2)
    assert cluster_rows(points, [100, 100]) == [[0, 1]]


def test_two_rows_over_budget_are_split() -> None:
    points, _ = _blobs(2, 2, seed=2)
    tokens = np.array([3000, 3000])
    clusters = cluster_rows(points, tokens)
    assert clusters == [[0], [1]]
    _check(clusters, 2, tokens)


@pytest.mark.parametrize("token_each", [100, 1500, 4000])
def test_three_rows(token_each: int) -> None:
    points, _ = _blobs(3, 2, seed=3)
    tokens = np.full(3, token_each)
    clusters = cluster_rows(points, tokens)
    _check(clusters, 3, tokens)
    if token_each * 3 <= BUDGET:
        assert clusters == [[0, 1, 2]]


@pytest.mark.parametrize("n", [11, 12])
@pytest.mark.parametrize("token_each", [100, 1000])
def test_around_the_umap_threshold(n: int, token_each: int) -> None:
    # 11 = reduction_dim + 1 is the largest size that skips UMAP; 12 is the
    # smallest that uses it (n_components 10 < n - 1).
    points, _ = _blobs(n, 3, seed=n, duplicates=2)
    tokens = np.full(n, token_each)
    clusters = cluster_rows(points, tokens)
    _check(clusters, n, tokens)
    if n == 11 and token_each * n <= BUDGET:
        assert clusters == [list(range(n))]


def test_small_inputs_skip_umap(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    original = passes.umap_reduce

    def spy(points: np.ndarray, *args: object) -> np.ndarray:
        calls.append(len(points))
        return original(points, *args)

    monkeypatch.setattr(passes, "umap_reduce", spy)
    points, _ = _blobs(11, 3, seed=5)
    _check(cluster_rows(points, np.full(11, 1000)), 11, np.full(11, 1000))
    assert calls == []
    points, _ = _blobs(12, 3, seed=5)
    cluster_rows(points, np.full(12, 100))
    assert calls == []  # up to ClusteringSettings.small_input_rows, exact PCA instead of UMAP
    cluster_rows(points, np.full(12, 100), ClusteringSettings(small_input_rows=0))
    assert calls and calls[0] == 12


# --------------------------------------------------------------------------
# Realistic sizes
# --------------------------------------------------------------------------


def test_thousand_rows_with_duplicates() -> None:
    points, labels = _blobs(1000, 20, seed=10, duplicates=30, near_duplicates=30)
    tokens = np.random.default_rng(10).integers(60, 130, 1000)
    clusters = cluster_rows(points, tokens)
    _check(clusters, 1000, tokens)
    # Well-separated blobs: clusters should rarely mix them.
    assert _purity(clusters, labels) >= 0.9
    # Summaries need several children: the clustering must not degenerate
    # into singletons.
    assert np.mean([len(c) for c in clusters]) >= 4


@pytest.mark.slow
def test_four_thousand_rows() -> None:
    # The reference crashes around 3,600 leaves (ill-defined covariance).
    points, labels = _blobs(4000, 40, seed=11, spread=0.8, duplicates=200, near_duplicates=200)
    tokens = np.random.default_rng(11).integers(40, 160, 4000)
    clusters = cluster_rows(points, tokens)
    _check(clusters, 4000, tokens)
    assert _purity(clusters, labels) >= 0.9


def test_deterministic() -> None:
    points, _ = _blobs(300, 6, seed=12, duplicates=10, near_duplicates=10)
    tokens = np.random.default_rng(12).integers(50, 150, 300)
    first = cluster_rows(points, tokens)
    second = cluster_rows(points.copy(), list(tokens))
    assert first == second
    _check(first, 300, tokens)


def test_deterministic_with_heavy_duplication() -> None:
    # 10 distinct vectors x 12 copies: a symmetric neighbour graph, on which
    # UMAP's spectral initialisation is not reproducible unless guarded.
    rng = np.random.default_rng(24)
    distinct = rng.normal(size=(10, DIM))
    distinct /= np.linalg.norm(distinct, axis=1, keepdims=True)
    points = np.repeat(distinct, 12, axis=0).astype(np.float32)
    tokens = np.full(120, 100)
    settings = ClusteringSettings(max_cluster_tokens=1000)
    results = [cluster_rows(points, tokens, settings) for _ in range(3)]
    assert results[0] == results[1] == results[2]
    _check(results[0], 120, tokens, budget=1000)


def test_settings_change_the_result_deterministically() -> None:
    points, _ = _blobs(200, 4, seed=13)
    tokens = np.full(200, 50)
    settings = ClusteringSettings(seed=7, max_clusters=5, max_cluster_tokens=800)
    first = cluster_rows(points, tokens, settings)
    assert first == cluster_rows(points, tokens, settings)
    _check(first, 200, tokens, budget=800)


# --------------------------------------------------------------------------
# Token budget and the no-progress guard
# --------------------------------------------------------------------------


def test_token_budget_forces_reclustering() -> None:
    # Two tight blobs of 100 rows x 100 tokens: each blob alone is 10,000
    # tokens, so the budget of 500 can only be met by re-clustering.
    points, _ = _blobs(200, 2, seed=14, spread=0.3)
    tokens = np.full(200, 100)
    clusters = cluster_rows(points, tokens, ClusteringSettings(max_cluster_tokens=500))
    _check(clusters, 200, tokens, budget=500)
    assert max(len(c) for c in clusters) <= 5


def test_row_alone_over_budget_is_a_singleton() -> None:
    points, _ = _blobs(60, 3, seed=15)
    tokens = np.full(60, 100)
    tokens[[7, 33]] = BUDGET + 1
    clusters = cluster_rows(points, tokens)
    _check(clusters, 60, tokens)
    assert [7] in clusters and [33] in clusters


@pytest.mark.parametrize("n", [5, 40])
def test_identical_vectors_over_budget_terminate(
    n: int, caplog: pytest.LogCaptureFixture
) -> None:
    # Nothing can separate identical vectors: re-clustering returns the same
    # cluster, and the guard must split it deterministically.
    points = _identical(n)
    tokens = np.full(n, 400)
    with caplog.at_level(logging.INFO, logger="raptor_engine.clustering"):
        clusters = cluster_rows(points, tokens, ClusteringSettings(max_cluster_tokens=1000))
    _check(clusters, n, tokens, budget=1000)
    assert len(clusters) >= n * 400 // 1000
    assert "no progress" in caplog.text
    assert clusters == cluster_rows(points, tokens, ClusteringSettings(max_cluster_tokens=1000))


def test_identical_vectors_within_budget() -> None:
    points = _identical(30)
    tokens = np.full(30, 10)
    clusters = cluster_rows(points, tokens)
    _check(clusters, 30, tokens)


def test_near_identical_vectors_do_not_crash() -> None:
    rng = np.random.default_rng(16)
    points = _identical(80) + 1e-7 * rng.normal(size=(80, DIM)).astype(np.float32)
    tokens = np.full(80, 100)
    _check(cluster_rows(points, tokens), 80, tokens)


# --------------------------------------------------------------------------
# Mixture fit failures
# --------------------------------------------------------------------------


def _repeated_column_points(n: int, seed: int) -> np.ndarray:
    """3-D points ``(x, y, x)``: every per-dimension variance is positive but
    the full covariance is exactly singular (two identical columns)."""
    xy = np.random.default_rng(seed).normal(size=(n, 2))
    return np.column_stack([xy, xy[:, 0]])


def test_full_covariance_failure_falls_back_to_diagonal(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Without regularisation sklearn rejects the singular full covariance
    # ("ill-defined empirical covariance"); the diagonal one is well defined.
    with caplog.at_level(logging.INFO, logger="raptor_engine.clustering"):
        model = mixtures._fit_mixture(
            _repeated_column_points(40, 17), 1, reg_covar=0.0, seed=224
        )
    assert model is not None and model.covariance_type == "diag"
    assert "full-covariance mixture of 1 components failed" in caplog.text


def test_identical_points_cannot_be_fitted_without_regularisation(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Ill-conditioned for every covariance type: both failures are caught
    # and the fit reports None instead of raising.
    with caplog.at_level(logging.INFO, logger="raptor_engine.clustering"):
        assert mixtures._fit_mixture(np.zeros((20, 3)), 2, reg_covar=0.0, seed=224) is None
    assert "full-covariance mixture of 2 components failed" in caplog.text
    assert "diag-covariance mixture of 2 components failed" in caplog.text


def test_duplicates_get_a_regularised_fit() -> None:
    # With the module's own regularisation, heavy duplication (3 distinct
    # points, 30 rows) fits at every candidate size the search allows.
    points = np.repeat(_repeated_column_points(3, 18), 10, axis=0)
    clusters = passes.mixture_clusters(points, ClusteringSettings())
    assert clusters is not None
    assert set(np.concatenate(clusters).tolist()) == set(range(30))


def test_every_fit_failing_falls_back_to_a_split(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # sklearn's own failure mode, forced for every fit (nothing of ours is
    # patched): the global pass must fall back to the deterministic split.
    def fail(self: GaussianMixture, *args: object, **kwargs: object) -> None:
        raise ValueError("Fitting the mixture model failed (ill-defined empirical covariance)")

    monkeypatch.setattr(GaussianMixture, "fit", fail)
    points, _ = _blobs(100, 4, seed=19)
    tokens = np.full(100, 100)
    with caplog.at_level(logging.INFO, logger="raptor_engine.clustering"):
        clusters = cluster_rows(points, tokens)
    _check(clusters, 100, tokens)
    assert "every mixture fit failed" in caplog.text


def test_only_full_covariance_failing_still_clusters(monkeypatch: pytest.MonkeyPatch) -> None:
    original = GaussianMixture.fit

    def full_fails(self: GaussianMixture, X: np.ndarray, y: object = None) -> GaussianMixture:
        if self.covariance_type == "full" and self.n_components > 1:
            raise np.linalg.LinAlgError("not positive definite")
        return original(self, X, y)

    monkeypatch.setattr(GaussianMixture, "fit", full_fails)
    points, _ = _blobs(150, 3, seed=20)
    tokens = np.full(150, 20)
    clusters = cluster_rows(points, tokens)
    _check(clusters, 150, tokens)
    assert len(clusters) > 1


# --------------------------------------------------------------------------
# Building blocks
# --------------------------------------------------------------------------


def test_soft_assign_keeps_every_point_and_drops_empty_components() -> None:
    probabilities = np.array(
        [
            [0.85, 0.15, 0.0],  # in components 0 and 1
            [0.05, 0.95, 0.0],  # only 1
            [0.08, 0.07, 0.85],  # only 2
        ]
    )
    clusters = mixtures.soft_assign(probabilities, 0.1)
    assert [c.tolist() for c in clusters] == [[0], [0, 1], [2]]
    # No probability above a high threshold: each point joins its argmax;
    # component 2 only gets point 2.
    clusters = mixtures.soft_assign(probabilities, 0.99)
    assert [c.tolist() for c in clusters] == [[0], [1], [2]]
    # A component nobody joins disappears.
    clusters = mixtures.soft_assign(np.array([[0.9, 0.1, 0.0], [0.95, 0.05, 0.0]]), 0.1)
    assert [c.tolist() for c in clusters] == [[0, 1]]


def test_coarse_grid_spans_the_range() -> None:
    for k_max in (2, 3, 11, 49, 50):
        grid = mixtures._coarse_grid(k_max)
        assert grid[0] == 1 and grid[-1] == k_max
        assert grid == sorted(set(grid))
    assert len(mixtures._coarse_grid(50)) < 20


def test_bic_search_matches_the_exhaustive_search_on_clear_data() -> None:
    # Six well-separated 2-D blobs: the coarse-to-fine search must land on the
    # same size as trying every size, including the upper bound itself.
    rng = np.random.default_rng(21)
    centres = rng.uniform(-20, 20, size=(6, 2))
    points = np.concatenate([c + rng.normal(size=(40, 2)) for c in centres])
    reg = mixtures._reg_covar(points)
    exhaustive = min(
        range(1, 16),
        key=lambda k: mixtures._fit_mixture(points, k, reg, 224).bic(points),  # type: ignore[union-attr]
    )
    model = mixtures.bic_search(points, 15, 224)
    assert model is not None and model.n_components == exhaustive == 6
    # The upper bound is a candidate (the reference excluded it).
    model = mixtures.bic_search(points, 6, 224)
    assert model is not None and model.n_components == 6


def _few_points_in_many_dimensions(n: int, seed: int) -> np.ndarray:
    """``n`` points in 10 dimensions around three centres: a local pass's shape (a UMAP
    reduction of a global cluster of a dozen or two chunks)."""
    rng = np.random.default_rng(seed)
    centres = rng.uniform(-4, 4, size=(3, 10))
    return centres[rng.integers(0, 3, n)] + 0.5 * rng.normal(size=(n, 10))


@pytest.mark.parametrize("covariance_type", ["full", "diag"])
def test_bic_floor_is_below_every_fitted_bic(covariance_type: str) -> None:
    for seed, n in ((31, 14), (32, 40), (33, 120)):
        points = _few_points_in_many_dimensions(n, seed)
        reg = mixtures._reg_covar(points)
        for k in (1, 2, 3, 5, 8, min(13, n - 1)):
            model = GaussianMixture(n_components=k, covariance_type=covariance_type, reg_covar=reg,
                                    init_params="k-means++", random_state=224).fit(points)
            assert mixtures._bic_floor(points, k, reg, covariance_type) <= model.bic(points)
        # The floor rises with the size: past one that cannot win, none can.
        floors = [mixtures._bic_floor(points, k, reg, covariance_type) for k in range(1, n)]
        assert floors == sorted(floors)


def _counting_fits(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Records (covariance type, size) of every mixture sklearn fits from now on."""
    fitted: list[tuple[str, int]] = []
    original = GaussianMixture.fit

    def fit(self: GaussianMixture, X: np.ndarray, y: object = None) -> GaussianMixture:
        fitted.append((self.covariance_type, self.n_components))
        return original(self, X, y)

    monkeypatch.setattr(GaussianMixture, "fit", fit)
    return fitted


def test_bic_search_skips_sizes_that_cannot_win_and_still_finds_the_best(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 16 points in 10 dimensions: a full covariance costs 65 parameters a component, so
    # BIC's penalty outgrows any likelihood after a few components.
    points = _few_points_in_many_dimensions(16, 34)
    reg = mixtures._reg_covar(points)
    exhaustive = min(range(1, 16), key=lambda k: (mixtures._fit_mixture(points, k, reg, 224).bic(points), k))  # type: ignore[union-attr]
    fitted = _counting_fits(monkeypatch)
    model = mixtures.bic_search(points, 15, 224)
    assert model is not None and model.n_components == exhaustive
    assert len(fitted) < len(mixtures._coarse_grid(15))  # the grid alone has more sizes than were fitted
    assert max(k for _, k in fitted) < 15


def test_bic_search_after_a_diagonal_fallback_judges_sizes_by_the_diagonal_floor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Full covariances fail from two components on (sklearn's own failure, forced): the
    # fits fall back to diagonal ones, which have fewer parameters and a lower floor, so
    # sizes the full floor would rule out are fitted and the best diagonal size is found.
    points = _few_points_in_many_dimensions(16, 35)
    reg = mixtures._reg_covar(points)

    def diagonal_bic(k: int) -> float:
        return GaussianMixture(n_components=k, covariance_type="diag", reg_covar=reg, init_params="k-means++",
                               random_state=224).fit(points).bic(points)

    full_one = mixtures._fit_mixture(points, 1, reg, 224)
    assert full_one is not None
    scores = {1: full_one.bic(points)} | {k: diagonal_bic(k) for k in range(2, 16)}
    best = min(scores, key=lambda k: (scores[k], k))
    fitted = _counting_fits(monkeypatch)
    original = GaussianMixture.fit  # the counting one

    def full_fails(self: GaussianMixture, X: np.ndarray, y: object = None) -> GaussianMixture:
        if self.covariance_type == "full" and self.n_components > 1:
            raise np.linalg.LinAlgError("not positive definite")
        return original(self, X, y)

    monkeypatch.setattr(GaussianMixture, "fit", full_fails)
    model = mixtures.bic_search(points, 15, 224)
    assert model is not None and model.n_components == best
    assert any(kind == "diag" for kind, _ in fitted)


def test_first_component_split_contract() -> None:
    points, _ = _blobs(50, 2, seed=22)
    rows = np.arange(50, dtype=np.intp)
    tokens = np.full(50, 100)
    tokens[10] = 5000
    groups = split.split_along_first_component(points, tokens, rows, 1000)
    assert sorted(np.concatenate(groups).tolist()) == list(range(50))
    assert all(tokens[g].sum() <= 1000 or len(g) == 1 for g in groups)
    assert all(len(g) < 50 for g in groups)
    # Zero-token rows within budget stay together.
    groups = split.split_along_first_component(points, np.zeros(50, int), rows, 1000)
    assert [g.tolist() for g in groups] == [list(range(50))]


def test_cosine_knn_puts_each_row_first_even_among_duplicates() -> None:
    points = _identical(6)
    indices, dists = reduction.cosine_knn(points, 3)
    assert indices[:, 0].tolist() == list(range(6))
    assert np.allclose(dists, 0.0, atol=1e-6)


# --------------------------------------------------------------------------
# Validation and warm-up
# --------------------------------------------------------------------------


def test_invalid_inputs_are_rejected() -> None:
    points, _ = _blobs(5, 1, seed=23)
    with pytest.raises(ValueError, match="token counts"):
        cluster_rows(points, [1, 2, 3])
    with pytest.raises(ValueError, match=">= 0"):
        cluster_rows(points, [1, 2, 3, 4, -5])
    bad = points.copy()
    bad[2, 3] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        cluster_rows(bad, [1] * 5)
    with pytest.raises(ValueError, match="2-D"):
        cluster_rows(points[0], [1] * DIM)


@pytest.mark.parametrize(
    "field,value",
    [
        ("reduction_dim", 0),
        ("max_clusters", 0),
        ("membership_threshold", 1.0),
        ("local_neighbors", 1),
        ("max_cluster_tokens", 0),
        ("umap_epochs", 0),
    ],
)
def test_invalid_settings_are_rejected(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        ClusteringSettings(**{field: value})  # type: ignore[arg-type]


def _compiled_umap_kernels() -> int:
    """How many (kernel, signature) pairs numba has compiled or loaded for UMAP so far."""
    import sys

    from numba.core.registry import CPUDispatcher

    return sum(len(value.signatures) for name, module in list(sys.modules.items()) if name.startswith("umap")
               for value in list(vars(module).values()) if isinstance(value, CPUDispatcher))


def test_warm_up_compiles_what_clustering_uses() -> None:
    """The contract of ``warm_up``: after it, clustering compiles nothing more, and a second
    warm-up compiles nothing either."""
    warm_up()
    compiled = _compiled_umap_kernels()
    assert compiled > 0
    warm_up()
    points, _ = _blobs(300, 6, seed=3)
    tokens = np.full(300, 100)
    _check(cluster_rows(points, tokens), 300, tokens)
    assert _compiled_umap_kernels() == compiled
