"""The token budget loop: oversized clusters are clustered again until every cluster fits
``max_cluster_tokens`` (or is a single row), falling back to the deterministic split
where a re-clustering makes no progress."""

from __future__ import annotations

import logging

import numpy as np
from numpy.typing import NDArray

from raptor_engine.clustering.passes import cluster_pass
from raptor_engine.clustering.settings import ClusteringSettings
from raptor_engine.clustering.split import split_along_first_component
from raptor_engine.mixtures import Rows

logger = logging.getLogger(__name__)


def enforce_token_budget(
    vectors: NDArray[np.float32],
    tokens: NDArray[np.int64],
    all_rows: Rows,
    first: list[Rows],
    settings: ClusteringSettings,
    exact: bool,
) -> list[Rows]:
    """Re-cluster oversized clusters until every cluster fits the budget.

    ``first`` is the result of :func:`cluster_pass` on ``all_rows``;
    ``exact`` is passed on to it (PCA instead of UMAP).

    Termination: a cluster is split only when it has at least two rows and
    exceeds the budget, and every part pushed on the work list is strictly
    smaller than the cluster it came from (parts that are not are replaced by
    :func:`split_along_first_component`, whose parts always are). Row-set
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
            parts = cluster_pass(vectors, tokens, rows, settings, exact)
        if any(len(part) >= len(rows) for part in parts):
            logger.info(
                "re-clustering %d rows (%d tokens) made no progress; "
                "splitting along the first principal component",
                len(rows),
                int(tokens[rows].sum()),
            )
            parts = split_along_first_component(vectors, tokens, rows, budget)
        work.extend(parts)
    return done
