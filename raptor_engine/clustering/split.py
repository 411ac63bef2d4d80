"""The deterministic fallback split: rows cut into contiguous, token-bounded groups along
their first principal component. Used where clustering makes no progress (a
re-clustering that returns its input, or every mixture fit failing)."""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray
from sklearn.decomposition import PCA

from raptor_engine.mixtures import Rows


def split_along_first_component(
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
    if len(points) < 2 or not has_spread(points):
        return np.arange(len(points), dtype=np.intp)
    projection = PCA(n_components=1, svd_solver="full").fit_transform(
        points.astype(np.float64)
    )[:, 0]
    return np.argsort(projection, kind="stable").astype(np.intp)


def has_spread(points: np.ndarray) -> bool:
    """Whether the rows of ``points`` are not all (numerically) identical."""
    return bool(np.ptp(points, axis=0).max() > 1e-12)
