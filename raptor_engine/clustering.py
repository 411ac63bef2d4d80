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
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from sklearn.decomposition import PCA
from threadpoolctl import threadpool_limits

from raptor_engine import defaults
from raptor_engine.mixtures import Rows, bic_search, distinct_count, soft_assign
from raptor_engine.reduction import pca, umap_reduce

logger = logging.getLogger(__name__)


# PCA dimensions of the small-input path (see the module docstring). Full
# covariances in more dimensions than this need more points than a small input
# has, and BIC then prefers a single component.
_SMALL_INPUT_DIM = 5


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
    umap_reduce(data, n_neighbors=4, n_components=2, seed=0, epochs=5)


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
    reduced = pca(points, min(m - 1, settings.reduction_dim))
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
    return pca(points, min(n_components, _SMALL_INPUT_DIM))


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
        reduced = umap_reduce(
            points, n_neighbors, n_components, settings.seed, settings.umap_epochs
        )
    # UMAP's numerical failures come as many types (ValueError, TypeError from
    # scipy's eigensolver, numba errors); any of them means "no embedding".
    except Exception:  # noqa: BLE001
        logger.warning(
            "UMAP failed on %d rows; reducing with PCA instead", len(points), exc_info=True
        )
        return pca(points, n_components)
    if not np.isfinite(reduced).all():
        logger.warning("UMAP gave non-finite coordinates on %d rows; using PCA", len(points))
        return pca(points, n_components)
    return reduced.astype(np.float64)


# --------------------------------------------------------------------------
# Gaussian mixtures (the search itself is in raptor_engine.mixtures)
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
    k_max = min(settings.max_clusters, m - 1, distinct_count(reduced))
    if k_max <= 1:
        return [np.arange(m, dtype=np.intp)]
    model = bic_search(reduced, k_max, settings.seed)
    if model is None:
        return None
    return soft_assign(model.predict_proba(reduced), settings.membership_threshold)


