"""One clustering pass over a set of rows: a global pass (wide UMAP neighbourhood, then a
Gaussian mixture chosen by BIC), then a local pass inside each global cluster; with the
guards for small inputs (PCA instead of UMAP), UMAP failures and failed mixture fits."""

from __future__ import annotations

import logging
import math

import numpy as np
from numpy.typing import NDArray

from raptor_engine.clustering.settings import ClusteringSettings
from raptor_engine.clustering.split import has_spread, split_along_first_component
from raptor_engine.mixtures import Rows, bic_search, distinct_count, soft_assign
from raptor_engine.reduction import pca, umap_reduce

logger = logging.getLogger(__name__)

# PCA dimensions of the small-input path (see the package docstring). Full
# covariances in more dimensions than this need more points than a small input
# has, and BIC then prefers a single component.
SMALL_INPUT_DIM = 5


def cluster_pass(
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

    reduced = _reduce(points, max(2, int(math.sqrt(m - 1))), settings, exact)
    global_clusters = mixture_clusters(reduced, settings)
    if global_clusters is None:
        logger.warning(
            "every mixture fit failed on %d rows; splitting them deterministically",
            m,
        )
        return split_along_first_component(
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
    reduced = _reduce(points, max(2, min(settings.local_neighbors, m - 1)), settings, exact)
    local = mixture_clusters(reduced, settings)
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
    if m < 2 or int(tokens.sum()) <= settings.max_cluster_tokens or not has_spread(points):
        return whole
    reduced = pca(points, min(m - 1, settings.reduction_dim))
    clusters = mixture_clusters(reduced, settings)
    return whole if clusters is None else clusters


def _exact_reduce(points: NDArray[np.float32], n_components: int) -> NDArray[np.float64]:
    """PCA to ``min(n_components, SMALL_INPUT_DIM)`` dimensions: the small-input
    path's stand-in for UMAP. Deterministic; needs no compilation."""
    if not has_spread(points):
        # PCA of identical points divides by a zero variance; they are one point.
        return np.zeros((len(points), 1), dtype=np.float64)
    return pca(points, min(n_components, SMALL_INPUT_DIM))


def _reduce(
    points: NDArray[np.float32],
    n_neighbors: int,
    settings: ClusteringSettings,
    exact: bool = False,
) -> NDArray[np.float64]:
    """Reduce ``points`` to ``min(reduction_dim, len(points) - 2)`` dimensions with UMAP;
    fall back to PCA when UMAP fails. With ``exact`` (small inputs), PCA alone
    (:func:`_exact_reduce`), never touching UMAP.

    Precondition: ``2 <= n_neighbors < len(points)`` and ``len(points) > 2``.
    Returns float64 (the mixtures are fitted in float64 for numerical headroom).
    """
    n_components = min(settings.reduction_dim, len(points) - 2)
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


def mixture_clusters(
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
