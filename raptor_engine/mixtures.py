"""Gaussian mixtures for clustering: the number of components chosen by BIC, and
soft membership.

``bic_search`` fits mixtures of ``1..k_max`` components coarse to fine and keeps
the one with the lowest BIC, without fitting a size whose BIC cannot be the lowest
(:func:`_bic_floor`); ``soft_assign`` lets a point join every component
it belongs to with more than a threshold's probability. Regularisation scales
with the data, so it means the same on UMAP and on PCA coordinates.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from typing import TypeAlias

import numpy as np
from numpy.typing import NDArray
from sklearn.mixture import GaussianMixture

logger = logging.getLogger("raptor_engine.clustering")  # the name operators' filters know

Rows: TypeAlias = NDArray[np.intp]
"""Sorted, unique row indices into the caller's embedding matrix."""

# Relative covariance regularisation: added to the diagonal of every mixture
# covariance, scaled by the data's mean per-dimension variance so that it
# means the same on UMAP output (coordinates of order 1-10) and on PCA output
# of unit vectors (order 0.1).
_REG_COVAR_RELATIVE = 1e-4
# Floor of the regularisation, sklearn's default, for data without spread.
_REG_COVAR_FLOOR = 1e-6
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
# A size is skipped only when its BIC floor exceeds the best BIC by more than this share of
# it (plus as much absolute): room for the rounding of the fitted model's own BIC.
_FLOOR_MARGIN = 1e-9


def distinct_count(points: np.ndarray) -> int:
    """Number of distinct rows of ``points``."""
    return int(np.unique(points, axis=0).shape[0])


def soft_assign(probabilities: NDArray[np.float64], threshold: float) -> list[Rows]:
    """Turn an ``m x k`` membership matrix into soft clusters.

    A point joins every component with probability ``> threshold``, and its
    most likely component in any case (so no point is left out). Empty
    components are dropped; the rest keep component order.
    """
    member = probabilities > threshold
    member[np.arange(len(probabilities)), probabilities.argmax(axis=1)] = True
    return [np.flatnonzero(column).astype(np.intp) for column in member.T if column.any()]


def bic_search(points: NDArray[np.float64], k_max: int, seed: int) -> GaussianMixture | None:
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

    A size whose :func:`_bic_floor` already exceeds the best BIC so far is not
    fitted: its floor stands in for its score. Both lose to the best, so every
    decision above (the walk, its stopping, the refinement, the choice) is the
    one the fitted score would give, and the search returns the same mixture.
    On the dev sets' small local passes (12-40 points in 10 dimensions) this
    skips the large sizes, a third of the fitting time.
    """
    reg_covar = _reg_covar(points)
    scores: dict[int, float] = {}
    models: dict[int, GaussianMixture] = {}
    diagonal_seen = False  # a size fell back to a diagonal covariance (fewer parameters)

    def evaluate(k: int) -> float:
        nonlocal diagonal_seen
        if k not in scores:
            best_score = min(scores.values(), default=math.inf)
            floor = _bic_floor(points, k, reg_covar, "diag" if diagonal_seen else "full")
            if floor > best_score + _FLOOR_MARGIN * (1.0 + abs(best_score)):
                scores[k] = floor
                return floor
            model = _fit_mixture(points, k, reg_covar, seed)
            scores[k] = math.inf if model is None else float(model.bic(points))
            if model is not None:
                models[k] = model
            diagonal_seen = diagonal_seen or model is None or model.covariance_type == "diag"
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


def _bic_floor(points: NDArray[np.float64], k: int, reg_covar: float, covariance_type: str) -> float:
    """The lowest BIC any ``k``-component mixture of ``covariance_type`` can have on ``points``.

    Every covariance sklearn fits has ``reg_covar`` added to its diagonal, so its
    eigenvalues are at least ``reg_covar`` and no component's density (nor the
    mixture's, a weighted mean of them) exceeds ``(2 pi reg_covar) ** (-d / 2)``.
    That caps the log-likelihood of ``n`` points at ``-n d / 2 * log(2 pi reg_covar)``;
    BIC is ``-2`` times it plus the parameter count (sklearn's) times ``log n``.
    The count grows with ``k`` and the cap does not, so the floor rises with ``k``.

    A diagonal covariance has fewer parameters than a full one, so its floor is
    lower: the search uses it once any size fell back to a diagonal fit, and a
    size it skipped on the full floor is one where a full fit was expected to work.
    """
    n, d = points.shape
    covariance_parameters = d * (d + 1) // 2 if covariance_type == "full" else d
    parameters = k * (covariance_parameters + d) + k - 1  # covariances, means, free weights
    log_likelihood_cap = -0.5 * n * d * math.log(2.0 * math.pi * reg_covar)
    return -2.0 * log_likelihood_cap + parameters * math.log(n)


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
