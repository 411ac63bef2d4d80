"""Soft clustering of one RAPTOR layer: UMAP, Gaussian mixtures chosen by BIC.

This is the clustering step of RAPTOR (Sarthi et al., ICLR 2024) with the
guards the reference code lacks (see ``/work/shared/notes/raptor.md``):

1. **Global pass** - UMAP to ``reduction_dim`` dimensions with a wide
   neighbourhood (``sqrt(n - 1)`` neighbours), then a Gaussian mixture whose
   component count minimises BIC; soft membership ``P(component) > threshold``
   (a row always joins its most likely component).
2. **Local pass** - every global cluster of more than ``reduction_dim + 1``
   rows is reduced again with a narrow neighbourhood and clustered the same
   way. Local rows are mapped back *by index*, never by vector equality (the
   reference merges duplicate vectors that way).
3. **Token budget** - a cluster whose members' tokens exceed
   ``max_cluster_tokens`` is clustered again with the same two passes. A
   re-clustering that returns the input again (no progress) is replaced by a
   deterministic split along the first principal component, so every step
   works on strictly smaller row sets and the loop terminates.

Small inputs: a call on at most ``small_input_rows`` rows (32 by default)
never imports or runs UMAP: both passes reduce with PCA to at most
``_SMALL_INPUT_DIM`` dimensions instead. On so few points UMAP's neighbour
graph is too thin to help (measured on chunks of the QuALITY dev articles,
mixtures of 2-3 articles, 15-36 chunks: clusters of one article 99.7 % of the
time with PCA against 95.1 % with UMAP, and closer members, mean pairwise
cosine 0.47 against 0.38), while UMAP's first fit in a process costs seconds
of numba compilation. From about 40 rows on, PCA mixtures on one topic
collapse into one component and UMAP clusters better, so larger inputs keep
UMAP. Larger inputs are unchanged by this rule.

Guards: fewer than ``reduction_dim + 2`` rows skip UMAP (which needs
``n_components < n - 1``) and use PCA instead; the BIC search never asks for
more components than there are distinct points; mixture fits use a
regularised covariance, fall back to a diagonal covariance when a full one
fails, and drop a candidate count when both fail; UMAP failures fall back to
PCA. Every fallback is logged on this module's logger.

Everything is seeded (UMAP ``random_state``, mixture ``random_state``), so the
same input and settings give the same clusters. UMAP with a ``random_state``
runs single-threaded; that is the price of determinism.

The k-nearest-neighbour graph UMAP builds on is computed here, exactly, with
one matrix product (cosine distance on the normalised rows) and handed to
UMAP as ``precomputed_knn``: UMAP's own small-data path evaluates the cosine
distance through a Python callable per pair (about 4 s for 2,000 rows), and
its large-data path (4,096 rows and more) is an approximate, separately
compiled search. The graph is the one ``metric="cosine"`` would build, up
to a seeded jitter of at most 1e-5 on the distances (see ``_KNN_JITTER``).
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TypeAlias

import numpy as np
from numpy.typing import NDArray
from sklearn.decomposition import PCA
from sklearn.mixture import GaussianMixture
from threadpoolctl import threadpool_limits

from raptor_engine import defaults
from raptor_engine.numba_cache import cache_umap_kernels

# We hand UMAP exact neighbours (see _cosine_knn), so it warns on every fit that
# transforming new data will be unavailable; we never transform. Narrowly ignored.
warnings.filterwarnings("ignore", message=r"precomputed_knn", category=UserWarning, module=r"umap")

logger = logging.getLogger(__name__)

Rows: TypeAlias = NDArray[np.intp]
"""Sorted, unique row indices into the caller's embedding matrix."""

# Relative covariance regularisation: added to the diagonal of every mixture
# covariance, scaled by the data's mean per-dimension variance so that it
# means the same on UMAP output (coordinates of order 1-10) and on PCA output
# of unit vectors (order 0.1).
_REG_COVAR_RELATIVE = 1e-4
# Floor of the regularisation, sklearn's default, for data without spread.
_REG_COVAR_FLOOR = 1e-6
# PCA dimensions of the small-input path (see the module docstring). Full
# covariances in more dimensions than this need more points than a small input
# has, and BIC then prefers a single component.
_SMALL_INPUT_DIM = 5
# The coarse BIC grid grows geometrically by this factor.
_GRID_RATIO = 1.25
# Stop walking the coarse grid after this many consecutive candidates whose
# BIC is not better than the best so far...
_GRID_PATIENCE = 2
# ...but never below this many components: on small sets (a local pass over
# ~50 rows) BIC is bumpy for small counts (it rises from 1 to 4 components,
# then falls to its minimum near 8) while fits there are cheap. The sizes
# worth skipping are the large, expensive ones.
_EARLY_STOP_MIN_K = 15
# Rows of the similarity matrix computed per block by the exact kNN search;
# bounds its memory to _KNN_BLOCK x n float32 values.
_KNN_BLOCK = 1024
# Upper bound of the seeded jitter added to neighbour distances (cosine
# distances are 0..2; nearest neighbours of distinct texts are ~0.1 apart).
# Why: duplicate rows make the neighbour graph symmetric, UMAP's spectral
# initialisation (scipy ARPACK) then hits an invariant subspace and restarts
# from an *unseeded* random vector, and the layout differs from run to run.
# The jitter breaks the symmetry reproducibly.
_KNN_JITTER = 1e-5


@dataclass(frozen=True, slots=True)
class ClusteringSettings:
    """Parameters of :func:`cluster_rows`; defaults are the reference's.

    ``reduction_dim``: UMAP target dimensions (reference 10).
    ``max_clusters``: upper bound of the BIC search, inclusive (reference 50,
    exclusive there).
    ``membership_threshold``: a row joins every component whose probability
    exceeds this (reference 0.1).
    ``local_neighbors``: UMAP ``n_neighbors`` of the local pass (reference 10).
    ``max_cluster_tokens``: a cluster whose members' tokens exceed this is
    clustered again (reference 3,500).
    ``seed``: random state of UMAP and of the mixtures (reference 224).
    ``umap_epochs``: UMAP optimisation epochs. Not in the reference, which
    uses UMAP's default (500 below 10,000 rows); 200, UMAP's own default for
    large inputs, cuts the global pass on 1,000 rows from ~2.1 s to ~0.9 s.
    ``None`` means UMAP's default.
    ``small_input_rows``: inputs of at most this many rows are clustered
    without UMAP, on PCA (see the module docstring); 0 always uses UMAP
    where it can run.
    """

    reduction_dim: int = defaults.REDUCTION_DIM
    max_clusters: int = defaults.MAX_CLUSTERS
    membership_threshold: float = defaults.MEMBERSHIP_THRESHOLD
    local_neighbors: int = defaults.LOCAL_NEIGHBORS
    max_cluster_tokens: int = defaults.MAX_CLUSTER_TOKENS
    seed: int = defaults.SEED
    umap_epochs: int | None = 200
    small_input_rows: int = 32

    def __post_init__(self) -> None:
        # The bounds are the configuration's too (raptor_engine.defaults): what one accepts, so does the other.
        _within("reduction_dim", self.reduction_dim, defaults.REDUCTION_DIM_RANGE)
        _within("max_clusters", self.max_clusters, defaults.MAX_CLUSTERS_RANGE)
        _within("local_neighbors", self.local_neighbors, defaults.LOCAL_NEIGHBORS_RANGE)
        _within("max_cluster_tokens", self.max_cluster_tokens, (defaults.MAX_CLUSTER_TOKENS_MIN, None))
        if not 0.0 <= self.membership_threshold < 1.0:
            raise ValueError(
                f"membership_threshold must be in [0, 1), got {self.membership_threshold}"
            )
        if self.umap_epochs is not None and self.umap_epochs < 1:
            raise ValueError(f"umap_epochs must be >= 1 or None, got {self.umap_epochs}")
        if self.small_input_rows < 0:
            raise ValueError(f"small_input_rows must be >= 0, got {self.small_input_rows}")


def _within(name: str, value: int, bounds: tuple[int, int | None]) -> None:
    low, high = bounds
    if value < low or (high is not None and value > high):
        shown = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ValueError(f"{name} must be {shown}, got {value}")


# --------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------


def cluster_rows(
    embeddings: np.ndarray,
    token_counts: Sequence[int],
    settings: ClusteringSettings = ClusteringSettings(),
) -> list[list[int]]:
    """Cluster the rows of ``embeddings`` into soft, token-bounded clusters.

    ``embeddings`` is an ``n x d`` matrix of L2-normalised rows (float32
    expected; any real dtype accepted), ``token_counts[i]`` the token count of
    row ``i``.

    Returns clusters as sorted lists of row indices, ordered
    lexicographically (so by first member). Guarantees:

    - every row is in at least one cluster; a row may be in several;
    - no cluster is empty and no two clusters are equal;
    - every cluster's token total is ``<= settings.max_cluster_tokens``,
      except a cluster of one row that alone exceeds it;
    - ``n == 0`` gives ``[]``, ``n == 1`` gives ``[[0]]``;
    - the same input and settings give the same output;
    - ``n <= settings.small_input_rows`` neither imports nor runs UMAP.

    Raises ``ValueError`` when the inputs do not fit together (not a matrix,
    length mismatch, negative token counts, non-finite values).
    """
    vectors, tokens = _validate(embeddings, token_counts)
    n = vectors.shape[0]
    if n == 0:
        return []
    if n == 1:
        return [[0]]
    all_rows: Rows = np.arange(n, dtype=np.intp)
    # One BLAS and one OpenMP thread: the work is hundreds of small mixture
    # fits (and single-threaded UMAP), and on 2 cores the spinning worker
    # threads of OpenBLAS and of sklearn's OpenMP k-means fight each other
    # (measured on 1,000 rows: 5.5 s -> 2.3 s, same output). threadpoolctl's
    # limit is process-wide while it lasts: other threads' BLAS/OpenMP work
    # (e.g. torch) runs single-threaded meanwhile.
    # Decided once for the whole call, so that the token budget loop's
    # re-clustering of subsets of a large input still uses UMAP, as before.
    exact = n <= settings.small_input_rows
    with threadpool_limits(limits=1):
        first = _cluster_pass(vectors, tokens, all_rows, settings, exact)
        bounded = _enforce_token_budget(vectors, tokens, all_rows, first, settings, exact)
    return _canonical(bounded)


def warm_up() -> None:
    """Compile UMAP's numba kernels now, on tiny data, instead of on first use.

    The first UMAP fit of a process compiles its kernels (10-15 s, less when
    numba's on-disk cache, ``NUMBA_CACHE_DIR``, is warm). Calling this at
    start-up moves that cost out of the first tree build. It runs the same
    code path and dtypes as :func:`cluster_rows`, so nothing is compiled
    again later. Idempotent; safe to call more than once.
    """
    rng = np.random.default_rng(0)
    data = rng.normal(size=(24, 8)).astype(np.float32)
    data /= np.linalg.norm(data, axis=1, keepdims=True)
    _umap_reduce(data, n_neighbors=4, n_components=2, seed=0, epochs=5)


# --------------------------------------------------------------------------
# Validation and output
# --------------------------------------------------------------------------


def _validate(
    embeddings: np.ndarray, token_counts: Sequence[int]
) -> tuple[NDArray[np.float32], NDArray[np.int64]]:
    """Return the embeddings as float32 and the token counts as int64.

    Raises ``ValueError`` when ``embeddings`` is not 2-D (an empty 1-D array
    is accepted as zero rows), when the lengths differ, when a token count is
    negative or when an embedding value is not finite.
    """
    vectors = np.asarray(embeddings, dtype=np.float32)
    tokens = np.asarray(token_counts, dtype=np.int64).reshape(-1)
    if vectors.ndim == 1 and vectors.size == 0:
        vectors = vectors.reshape(0, 0)
    if vectors.ndim != 2:
        raise ValueError(f"embeddings must be a 2-D matrix, got shape {vectors.shape}")
    if vectors.shape[0] != tokens.shape[0]:
        raise ValueError(
            f"{vectors.shape[0]} embeddings but {tokens.shape[0]} token counts"
        )
    if tokens.size and tokens.min() < 0:
        raise ValueError("token counts must be >= 0")
    if not np.isfinite(vectors).all():
        raise ValueError("embeddings contain NaN or infinite values")
    return vectors, tokens


def _canonical(clusters: Sequence[Rows]) -> list[list[int]]:
    """Drop empty and duplicate clusters; sort lexicographically.

    Lexicographic order of the sorted member lists is deterministic and puts
    clusters in order of their first member.
    """
    unique = {tuple(int(r) for r in np.sort(c)) for c in clusters if len(c)}
    return [list(c) for c in sorted(unique)]


# --------------------------------------------------------------------------
# The token budget loop
# --------------------------------------------------------------------------


def _enforce_token_budget(
    vectors: NDArray[np.float32],
    tokens: NDArray[np.int64],
    all_rows: Rows,
    first: list[Rows],
    settings: ClusteringSettings,
    exact: bool,
) -> list[Rows]:
    """Re-cluster oversized clusters until every cluster fits the budget.

    ``first`` is the result of :func:`_cluster_pass` on ``all_rows``;
    ``exact`` is passed on to it (PCA instead of UMAP).

    Termination: a cluster is split only when it has at least two rows and
    exceeds the budget, and every part pushed on the work list is strictly
    smaller than the cluster it came from (parts that are not are replaced by
    :func:`_split_along_first_component`, whose parts always are). Row-set
    sizes strictly decrease along every chain of splits, so the loop ends.
    """
    budget = settings.max_cluster_tokens
    # The first pass on all rows is known; re-running it on an oversized
    # all-rows cluster would give the same answer (it is deterministic).
    known: dict[tuple[int, ...], list[Rows]] = {tuple(all_rows.tolist()): first}
    work: list[Rows] = list(first)
    seen: set[tuple[int, ...]] = set()
    done: list[Rows] = []
    while work:
        rows = work.pop()
        key = tuple(rows.tolist())
        if key in seen:
            continue
        seen.add(key)
        if len(rows) == 1 or int(tokens[rows].sum()) <= budget:
            done.append(rows)
            continue
        parts = known.get(key)
        if parts is None:
            parts = _cluster_pass(vectors, tokens, rows, settings, exact)
        if any(len(part) >= len(rows) for part in parts):
            logger.info(
                "re-clustering %d rows (%d tokens) made no progress; "
                "splitting along the first principal component",
                len(rows),
                int(tokens[rows].sum()),
            )
            parts = _split_along_first_component(vectors, tokens, rows, budget)
        work.extend(parts)
    return done


def _split_along_first_component(
    vectors: NDArray[np.float32],
    tokens: NDArray[np.int64],
    rows: Rows,
    budget: int,
) -> list[Rows]:
    """Cut ``rows`` into contiguous groups along their first principal axis.

    Deterministic fallback. Contract: the groups partition ``rows``; each
    group's token total is ``<= budget`` unless the group is a single row that
    alone exceeds it; the groups are roughly balanced (about
    ``ceil(total / budget)`` of them). Whenever ``rows`` has two or more rows
    and exceeds the budget there are at least two groups, so each group is
    strictly smaller than ``rows``. A ``rows`` within the budget comes back
    as one group.
    """
    total = int(tokens[rows].sum())
    if len(rows) < 2 or total <= budget:
        return [rows]
    order = rows[_first_component_order(vectors[rows])]
    counts = tokens[order]
    # total > budget >= 1 here, so target > 0 and at least two groups form.
    target = total / math.ceil(total / budget)
    groups: list[Rows] = []
    start = 0
    running = 0
    for i, count in enumerate(counts.tolist()):
        # Close the group before this row when adding it would break the
        # budget; close it after this row when it has reached its fair share.
        if i > start and running + count > budget:
            groups.append(np.sort(order[start:i]))
            start, running = i, 0
        running += count
        if running >= target:
            groups.append(np.sort(order[start : i + 1]))
            start, running = i + 1, 0
    if start < len(order):
        groups.append(np.sort(order[start:]))
    return groups


def _first_component_order(points: NDArray[np.float32]) -> NDArray[np.intp]:
    """Return the stable order of ``points`` along their first principal axis.

    Points without spread (all identical) keep their input order: PCA of such
    data is undefined, and input order is deterministic.
    """
    if len(points) < 2 or not _has_spread(points):
        return np.arange(len(points), dtype=np.intp)
    projection = PCA(n_components=1, svd_solver="full").fit_transform(
        points.astype(np.float64)
    )[:, 0]
    return np.argsort(projection, kind="stable").astype(np.intp)


def _has_spread(points: np.ndarray) -> bool:
    """Whether the rows of ``points`` are not all (numerically) identical."""
    return bool(np.ptp(points, axis=0).max() > 1e-12)


# --------------------------------------------------------------------------
# One clustering pass (global + local) on a set of rows
# --------------------------------------------------------------------------


def _cluster_pass(
    vectors: NDArray[np.float32],
    tokens: NDArray[np.int64],
    rows: Rows,
    settings: ClusteringSettings,
    exact: bool = False,
) -> list[Rows]:
    """Cluster ``rows`` once: global pass, then local pass per global cluster.

    ``exact`` reduces with PCA (:func:`_exact_reduce`) where UMAP would run.

    Returns clusters of row indices (into ``vectors``) covering ``rows``,
    possibly overlapping, possibly including ``rows`` itself (the caller
    checks progress). Small inputs (``<= reduction_dim + 1`` rows) skip UMAP:
    they stay one cluster when they fit the token budget, and are otherwise
    clustered by a mixture in PCA space.
    """
    m = len(rows)
    points = vectors[rows]
    if m <= settings.reduction_dim + 1:
        return [rows[c] for c in _small_clusters(points, tokens[rows], settings)]

    n_components = min(settings.reduction_dim, m - 2)
    reduced = _reduce(
        points,
        n_neighbors=max(2, int(math.sqrt(m - 1))),
        n_components=n_components,
        settings=settings,
        exact=exact,
    )
    global_clusters = _mixture_clusters(reduced, settings)
    if global_clusters is None:
        logger.warning(
            "every mixture fit failed on %d rows; splitting them deterministically",
            m,
        )
        return _split_along_first_component(
            vectors, tokens, rows, settings.max_cluster_tokens
        )

    clusters: list[Rows] = []
    for members in global_clusters:
        for local in _local_clusters(points[members], settings, exact):
            # Map back by index: members[local] are positions in ``rows``.
            clusters.append(rows[members[local]])
    return clusters


def _local_clusters(
    points: NDArray[np.float32], settings: ClusteringSettings, exact: bool = False
) -> list[Rows]:
    """Cluster one global cluster's ``points``; indices are into ``points``.

    ``exact`` reduces with PCA (:func:`_exact_reduce`) where UMAP would run.

    Clusters of ``<= reduction_dim + 1`` points stay whole (as in the
    reference); so does a cluster whose mixture fits all fail (the token
    budget loop splits it if it must).
    """
    m = len(points)
    whole = [np.arange(m, dtype=np.intp)]
    if m <= settings.reduction_dim + 1:
        return whole
    n_components = min(settings.reduction_dim, m - 2)
    reduced = _reduce(
        points,
        n_neighbors=max(2, min(settings.local_neighbors, m - 1)),
        n_components=n_components,
        settings=settings,
        exact=exact,
    )
    local = _mixture_clusters(reduced, settings)
    if local is None:
        logger.warning(
            "every mixture fit failed on a global cluster of %d rows; keeping it whole",
            m,
        )
        return whole
    return local


def _small_clusters(
    points: NDArray[np.float32], tokens: NDArray[np.int64], settings: ClusteringSettings
) -> list[Rows]:
    """Cluster a handful of points (too few for UMAP); indices into ``points``.

    Within the token budget they are one cluster (as the reference treats a
    layer of ``<= reduction_dim + 1`` nodes). Over it, a mixture in a PCA
    space of ``min(m - 1, reduction_dim)`` dimensions splits them; the result
    may be the whole set again (the caller's progress guard handles that).
    """
    m = len(points)
    whole = [np.arange(m, dtype=np.intp)]
    if m < 2 or int(tokens.sum()) <= settings.max_cluster_tokens or not _has_spread(points):
        return whole
    reduced = _pca(points, min(m - 1, settings.reduction_dim))
    clusters = _mixture_clusters(reduced, settings)
    return whole if clusters is None else clusters


# --------------------------------------------------------------------------
# Dimension reduction
# --------------------------------------------------------------------------


def _exact_reduce(points: NDArray[np.float32], n_components: int) -> NDArray[np.float64]:
    """PCA to ``min(n_components, _SMALL_INPUT_DIM)`` dimensions: the small-input
    path's stand-in for UMAP. Deterministic; needs no compilation."""
    if not _has_spread(points):
        # PCA of identical points divides by a zero variance; they are one point.
        return np.zeros((len(points), 1), dtype=np.float64)
    return _pca(points, min(n_components, _SMALL_INPUT_DIM))


def _reduce(
    points: NDArray[np.float32],
    n_neighbors: int,
    n_components: int,
    settings: ClusteringSettings,
    exact: bool = False,
) -> NDArray[np.float64]:
    """Reduce ``points`` with UMAP; fall back to PCA when UMAP fails. With ``exact``
    (small inputs), PCA alone (:func:`_exact_reduce`), never touching UMAP.

    Precondition: ``2 <= n_neighbors < len(points)`` and
    ``1 <= n_components < len(points) - 1``. Returns float64 (the mixtures are
    fitted in float64 for numerical headroom).
    """
    if exact:
        return _exact_reduce(points, n_components)
    try:
        reduced = _umap_reduce(
            points, n_neighbors, n_components, settings.seed, settings.umap_epochs
        )
    # UMAP's numerical failures come as many types (ValueError, TypeError from
    # scipy's eigensolver, numba errors); any of them means "no embedding".
    except Exception:  # noqa: BLE001
        logger.warning(
            "UMAP failed on %d rows; reducing with PCA instead", len(points), exc_info=True
        )
        return _pca(points, n_components)
    if not np.isfinite(reduced).all():
        logger.warning("UMAP gave non-finite coordinates on %d rows; using PCA", len(points))
        return _pca(points, n_components)
    return reduced.astype(np.float64)


def _umap_reduce(
    points: NDArray[np.float32],
    n_neighbors: int,
    n_components: int,
    seed: int,
    epochs: int | None,
) -> NDArray[np.float32]:
    """Fit UMAP (cosine neighbourhoods) on ``points``; return the embedding."""
    umap = _import_umap()

    knn_indices, knn_dists = _jitter_knn(*_cosine_knn(points, n_neighbors), seed)
    model = umap.UMAP(
        n_neighbors=n_neighbors,
        n_components=n_components,
        metric="cosine",
        random_state=seed,
        # n_jobs=1 states what random_state implies anyway and silences the
        # warning UMAP gives when it overrides n_jobs.
        n_jobs=1,
        n_epochs=epochs,
        precomputed_knn=(knn_indices, knn_dists),
    )
    return np.asarray(model.fit_transform(points), dtype=np.float32)


def _import_umap() -> ModuleType:
    """Import umap, with numba's on-disk cache switched on for its kernels.

    Imported here, not at module level: importing umap costs ~1.5 s (numba,
    pynndescent) and only UMAP fits need it; small inputs never do.
    """
    import umap

    cache_umap_kernels()  # idempotent; cheap after the first call
    return umap


def _cosine_knn(
    points: NDArray[np.float32], k: int
) -> tuple[NDArray[np.int32], NDArray[np.float32]]:
    """Exact ``k`` nearest neighbours of every row under cosine distance.

    Returns ``(indices, distances)``, both ``n x k``, each row sorted by
    distance with the row itself first at distance 0 (UMAP's convention;
    forcing it keeps duplicates from pushing a row out of its own list).
    Deterministic; within the list, equal distances are ordered by index.
    """
    norms = np.linalg.norm(points, axis=1, keepdims=True)
    # Zero rows stay zero: cosine distance 1 to everything, as in UMAP.
    unit = points / np.where(norms > 0, norms, 1.0)
    n = len(unit)
    indices = np.empty((n, k), dtype=np.int32)
    dists = np.empty((n, k), dtype=np.float32)
    for start in range(0, n, _KNN_BLOCK):
        stop = min(n, start + _KNN_BLOCK)
        block = np.clip(1.0 - unit[start:stop] @ unit.T, 0.0, 2.0)
        # -1 sorts the row itself first, ahead of exact duplicates at 0.
        block[np.arange(stop - start), np.arange(start, stop)] = -1.0
        # Select the k smallest, then order them by (distance, index).
        chosen = np.argpartition(block, k - 1, axis=1)[:, :k]
        chosen_dists = np.take_along_axis(block, chosen, axis=1)
        order = np.lexsort((chosen, chosen_dists), axis=1)
        indices[start:stop] = np.take_along_axis(chosen, order, axis=1)
        dists[start:stop] = np.take_along_axis(chosen_dists, order, axis=1)
    dists[:, 0] = 0.0
    return indices, dists


def _jitter_knn(
    indices: NDArray[np.int32], dists: NDArray[np.float32], seed: int
) -> tuple[NDArray[np.int32], NDArray[np.float32]]:
    """Add seeded noise in ``[0, _KNN_JITTER)`` to the neighbour distances.

    Keeps UMAP's conventions: each row itself stays first at distance 0 and
    each row stays sorted by distance. Same input and seed, same output.
    """
    noise = np.random.default_rng(seed).uniform(0.0, _KNN_JITTER, size=dists.shape)
    noise[:, 0] = 0.0
    jittered = (dists + noise).astype(np.float32)
    # Stable: the row itself (column 0, distance 0) stays ahead of any tie.
    order = np.argsort(jittered, axis=1, kind="stable")
    return np.take_along_axis(indices, order, axis=1), np.take_along_axis(jittered, order, axis=1)


def _pca(points: np.ndarray, n_components: int) -> NDArray[np.float64]:
    """Project ``points`` on their first ``n_components`` principal axes.

    ``n_components`` is clamped to ``min(points.shape)`` (PCA cannot give
    more axes than points or input dimensions). Deterministic (full SVD,
    sign-normalised by sklearn).
    """
    n_components = max(1, min(n_components, *points.shape))
    return PCA(n_components=n_components, svd_solver="full").fit_transform(
        np.asarray(points, dtype=np.float64)
    )


# --------------------------------------------------------------------------
# Gaussian mixtures and the BIC search
# --------------------------------------------------------------------------


def _mixture_clusters(
    reduced: NDArray[np.float64], settings: ClusteringSettings
) -> list[Rows] | None:
    """Soft clusters of ``reduced`` by a mixture whose size minimises BIC.

    Candidate sizes are ``1 .. min(max_clusters, m - 1, distinct points)``
    (more components than distinct points cannot be fitted). Returns
    non-empty clusters of indices into ``reduced`` covering every point, or
    ``None`` when every candidate fit failed.
    """
    m = len(reduced)
    k_max = min(settings.max_clusters, m - 1, _distinct_count(reduced))
    if k_max <= 1:
        return [np.arange(m, dtype=np.intp)]
    model = _bic_search(reduced, k_max, settings.seed)
    if model is None:
        return None
    return _soft_assign(model.predict_proba(reduced), settings.membership_threshold)


def _distinct_count(points: np.ndarray) -> int:
    """Number of distinct rows of ``points``."""
    return int(np.unique(points, axis=0).shape[0])


def _soft_assign(probabilities: NDArray[np.float64], threshold: float) -> list[Rows]:
    """Turn an ``m x k`` membership matrix into soft clusters.

    A point joins every component with probability ``> threshold``, and its
    most likely component in any case (so no point is left out). Empty
    components are dropped; the rest keep component order.
    """
    member = probabilities > threshold
    member[np.arange(len(probabilities)), probabilities.argmax(axis=1)] = True
    return [np.flatnonzero(column).astype(np.intp) for column in member.T if column.any()]


def _bic_search(points: NDArray[np.float64], k_max: int, seed: int) -> GaussianMixture | None:
    """Return the fitted mixture of ``1..k_max`` components with the lowest BIC.

    Coarse to fine, to avoid fitting all ``k_max`` sizes (the cost of a fit
    grows with its size; a full search over 50 sizes on 4,000 points takes
    ~25 s):

    1. walk a geometric grid (for 50: 1-7, 9, 12, 15, 18, 23, 28, 36, 44, 50)
       upwards, stopping after ``_GRID_PATIENCE`` consecutive sizes that do
       not beat the best BIC so far, once past ``_EARLY_STOP_MIN_K``;
    2. refine around the best size: repeatedly evaluate the midpoints between
       it and its nearest evaluated neighbours on each side, until they are
       adjacent integers. On a BIC curve that is unimodal around its minimum
       this finds the same size as the full search, in ~2 log2(gap) fits.

    Ties in BIC go to the smaller size. Returns ``None`` when no fit
    succeeded.
    """
    reg_covar = _reg_covar(points)
    scores: dict[int, float] = {}
    models: dict[int, GaussianMixture] = {}

    def evaluate(k: int) -> float:
        if k not in scores:
            model = _fit_mixture(points, k, reg_covar, seed)
            scores[k] = math.inf if model is None else float(model.bic(points))
            if model is not None:
                models[k] = model
        return scores[k]

    def best() -> int:
        return min(scores, key=lambda k: (scores[k], k))

    _walk_grid(_coarse_grid(k_max), evaluate)
    _refine(best, evaluate, scores)
    if not models:
        return None
    return models[best()]


def _walk_grid(grid: Sequence[int], evaluate: Callable[[int], float]) -> None:
    """Evaluate ``grid`` upwards until BIC stops improving for a while."""
    best_score = math.inf
    stale = 0
    for k in grid:
        score = evaluate(k)
        if score < best_score:
            best_score, stale = score, 0
        else:
            stale += 1
            # Failed fits (inf) count as stale too: past a size that cannot
            # be fitted, larger ones rarely can.
            if stale >= _GRID_PATIENCE and k >= _EARLY_STOP_MIN_K and best_score < math.inf:
                return


def _refine(
    best: Callable[[], int], evaluate: Callable[[int], float], scores: dict[int, float]
) -> None:
    """Bisect towards the best size between its evaluated neighbours.

    Terminates: each round evaluates at least one new size strictly inside a
    finite gap, or stops.
    """
    while True:
        k = best()
        lower = max((j for j in scores if j < k), default=k)
        upper = min((j for j in scores if j > k), default=k)
        candidates = {(lower + k) // 2, (k + upper + 1) // 2} - set(scores) - {k}
        if not candidates:
            return
        for candidate in sorted(candidates):
            evaluate(candidate)


def _coarse_grid(k_max: int) -> list[int]:
    """Sizes 1..k_max spaced geometrically (ratio ``_GRID_RATIO``), both ends in."""
    grid = {1, k_max}
    value = 1.0
    while value < k_max:
        grid.add(int(round(value)))
        value *= _GRID_RATIO
    return sorted(g for g in grid if g <= k_max)


def _reg_covar(points: NDArray[np.float64]) -> float:
    """Covariance regularisation relative to the data's scale (see constants)."""
    scale = float(points.var(axis=0).mean()) if len(points) > 1 else 0.0
    return max(_REG_COVAR_FLOOR, _REG_COVAR_RELATIVE * scale)


def _fit_mixture(
    points: NDArray[np.float64], k: int, reg_covar: float, seed: int
) -> GaussianMixture | None:
    """Fit a ``k``-component mixture; ``None`` when no covariance type works.

    Tries a full covariance (the reference's), then a diagonal one, which
    needs far less data per component. sklearn raises ``ValueError`` for an
    ill-defined empirical covariance and numpy ``LinAlgError`` for a failed
    Cholesky; both mean "this size cannot be fitted here".
    """
    for covariance_type in ("full", "diag"):
        model = GaussianMixture(
            n_components=k,
            covariance_type=covariance_type,
            reg_covar=reg_covar,
            n_init=1,
            max_iter=100,
            tol=1e-3,
            # k-means++ seeding instead of a full k-means run: the same EM follows,
            # at about half the cost of each of the search's many small fits.
            init_params="k-means++",
            random_state=seed,
        )
        try:
            model.fit(points)
        except (ValueError, np.linalg.LinAlgError) as error:
            logger.info(
                "%s-covariance mixture of %d components failed on %d points: %s",
                covariance_type,
                k,
                len(points),
                error,
            )
            continue
        return model
    logger.warning("no mixture of %d components could be fitted on %d points", k, len(points))
    return None
