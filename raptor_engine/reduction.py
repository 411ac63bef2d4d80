"""Dimension reduction for clustering: UMAP over exact cosine neighbours, and PCA.

``umap_reduce`` gives UMAP an exact k-nearest-neighbour graph (``cosine_knn``,
blockwise, with a seeded jitter that keeps duplicate rows from making the
layout depend on an unseeded restart), so that equal inputs give equal layouts.
UMAP is imported on first use, with numba's disk cache switched on for its
kernels (``numba_cache``). ``pca`` is the exact stand-in used where UMAP cannot
run or is not worth its compilation (see :mod:`raptor_engine.clustering`).
"""

from __future__ import annotations

import logging
import warnings
from types import ModuleType

import numpy as np
from numpy.typing import NDArray
from sklearn.decomposition import PCA

from raptor_engine.numba_cache import cache_umap_kernels

# We hand UMAP exact neighbours (see cosine_knn), so it warns on every fit that
# transforming new data will be unavailable; we never transform. Narrowly ignored.
warnings.filterwarnings("ignore", message=r"precomputed_knn", category=UserWarning, module=r"umap")

logger = logging.getLogger("raptor_engine.clustering")  # the name operators' filters know

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


def umap_reduce(
    points: NDArray[np.float32],
    n_neighbors: int,
    n_components: int,
    seed: int,
    epochs: int | None,
) -> NDArray[np.float32]:
    """Fit UMAP (cosine neighbourhoods) on ``points``; return the embedding."""
    umap = _import_umap()

    knn_indices, knn_dists = _jitter_knn(*cosine_knn(points, n_neighbors), seed)
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


def cosine_knn(
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


def pca(points: np.ndarray, n_components: int) -> NDArray[np.float64]:
    """Project ``points`` on their first ``n_components`` principal axes.

    ``n_components`` is clamped to ``min(points.shape)`` (PCA cannot give
    more axes than points or input dimensions). Deterministic (full SVD,
    sign-normalised by sklearn).
    """
    n_components = max(1, min(n_components, *points.shape))
    return PCA(n_components=n_components, svd_solver="full").fit_transform(
        np.asarray(points, dtype=np.float64)
    )
