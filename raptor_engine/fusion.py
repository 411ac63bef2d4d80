"""One ranking of a question's candidate leaves from their cosine and their BM25 score.

Each signal is standardised over the candidates (a z-score: how far a candidate stands above
the others, in their spread), then the two are mixed, :data:`DENSE_WEIGHT` of the cosine's
and the rest of BM25's. A candidate that BM25 did not rank scores 0 there, as BM25 scores
a text sharing none of the question's words.

Why scores and not ranks: reciprocal-rank fusion, used before, counts only positions, so a
passage that one signal puts first by a wide margin fell behind passages both signals rank
middling (measured: "what is the record for the most 3 pointers in one game", whose answer
dense search ranked first, came 17th). A z-score keeps the margin. It also weighs each signal
by how much it separates the candidates for this question: a word that few passages hold (a
name, a code, an error message) makes one BM25 score stand far out and decides the ranking,
while a question whose words every passage uses gives BM25 a flat spread that moves little.
That replaced a fixed BM25 weight raised for questions holding a rare word.

Measured with ``bench.retrieval`` (one channel per document, and ``--pooled``), against that
rank fusion, fitted on the fit half of each set's documents (0.6, 0.7 and 0.8, and min-max
scaling against z-scores): figures in docs/benchmarks.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

DENSE_WEIGHT = 0.7


def standardised(values: np.ndarray) -> np.ndarray:
    """``values`` as z-scores; all zeros when they do not spread (one value, or all equal)."""
    deviations = values - values.mean()
    spread = float(np.sqrt((deviations * deviations).mean()))  # values.std(), without computing the mean twice
    if spread <= 0.0:
        return np.zeros_like(values, dtype=float)
    return deviations / spread


def fused_order(ids: Sequence[str], cosines: Sequence[float], lexical: Mapping[str, float]) -> list[str]:
    """``ids`` best first by ``DENSE_WEIGHT`` x z(cosine) + (1 - ``DENSE_WEIGHT``) x z(BM25).

    ``cosines`` holds each id's cosine to the question, row for row; ``lexical`` the BM25
    scores of the ids BM25 ranked (missing ids score 0). Equal values are ordered by id, so
    the same candidates always give the same order.
    """
    if not ids:
        return []
    dense = standardised(np.asarray(cosines, dtype=float))
    words = standardised(np.array([lexical.get(node_id, 0.0) for node_id in ids], dtype=float))
    mixed = DENSE_WEIGHT * dense + (1.0 - DENSE_WEIGHT) * words
    # A stable sort by value of the ids in id order: equal values stay in id order.
    by_id = np.asarray(sorted(range(len(ids)), key=ids.__getitem__))
    return [ids[i] for i in by_id[np.argsort(-mixed[by_id], kind="stable")].tolist()]
