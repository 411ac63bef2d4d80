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
``passes.SMALL_INPUT_DIM`` dimensions instead. On so few points UMAP's neighbour
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
to a seeded jitter of at most 1e-5 on the distances (see ``reduction._KNN_JITTER``).

The package: :func:`cluster_rows` and :func:`warm_up` here; ``settings``
(:class:`ClusteringSettings`), ``passes`` (one global-then-local pass over a set
of rows: reduction, mixtures, the small-input path), ``budget`` (the token
budget loop) and ``split`` (the deterministic split along the first principal
component). UMAP and PCA are in ``raptor_engine.reduction``, the BIC search and
soft membership in ``raptor_engine.mixtures``; every part logs under
``raptor_engine.clustering``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray
from threadpoolctl import threadpool_limits

from raptor_engine.clustering.budget import enforce_token_budget
from raptor_engine.clustering.passes import cluster_pass
from raptor_engine.clustering.settings import ClusteringSettings
from raptor_engine.mixtures import Rows
from raptor_engine.reduction import umap_reduce

__all__ = ["ClusteringSettings", "cluster_rows", "warm_up"]


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
        first = cluster_pass(vectors, tokens, all_rows, settings, exact)
        bounded = enforce_token_budget(vectors, tokens, all_rows, first, settings, exact)
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
