"""A BM25 index over the nodes of one tree version, for hybrid retrieval.

Dense similarity misses exact words — names, codes, rare terms — that people
type into chat; BM25 finds them. The index is a sparse term-by-node matrix of
BM25 weights (an inverted index in scipy's CSC form), so a query touches only
the columns of its own terms, never a loop over the nodes. It is built once per
tree version from the stored node texts; trees are immutable, so it never goes
stale.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy import sparse
from sklearn.feature_extraction.text import CountVectorizer

_WORD = r"(?u)\b\w\w+\b"


class LexicalIndex:
    """Okapi BM25 over fixed texts identified by ids (k1 = 1.2, b = 0.75 by default)."""

    def __init__(self, ids: Sequence[str], texts: Sequence[str], k1: float = 1.2, b: float = 0.75) -> None:
        self._ids = list(ids)
        self._vectorizer = CountVectorizer(lowercase=True, stop_words="english", token_pattern=_WORD)
        try:
            counts = sparse.csr_matrix(self._vectorizer.fit_transform(texts), dtype=np.float64)
        except ValueError:  # no indexable word at all (empty, or only stop words)
            self._weights = None
            return
        lengths = np.asarray(counts.sum(axis=1)).ravel()
        average = max(float(lengths.mean()), 1e-9)
        document_frequency = np.bincount(counts.indices, minlength=counts.shape[1])
        self._idf = np.log1p((len(self._ids) - document_frequency + 0.5) / (document_frequency + 0.5))
        rows = np.repeat(np.arange(counts.shape[0]), np.diff(counts.indptr))
        saturation = k1 * (1.0 - b + b * lengths[rows] / average)
        counts.data = counts.data * (k1 + 1.0) / (counts.data + saturation)
        self._weights = counts.T.tocsr()  # term rows: a query reads only its terms' rows

    def top(self, query: str, n: int) -> list[tuple[str, float]]:
        """Up to ``n`` (id, BM25 score) pairs with a positive score, best first."""
        if self._weights is None or n <= 0:
            return []
        terms = self._vectorizer.transform([query]).indices
        if terms.size == 0:
            return []
        scores = np.asarray(self._weights[terms].T @ self._idf[terms]).ravel()
        positive = np.flatnonzero(scores > 0)
        if positive.size == 0:
            return []
        best = positive[np.argsort(-scores[positive], kind="stable")[:n]]
        return [(self._ids[i], float(scores[i])) for i in best]
