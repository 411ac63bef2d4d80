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
_SUFFIXES = (("ies", "y"), ("ing", ""), ("ed", ""), ("es", ""), ("s", ""))
_analyse = CountVectorizer(lowercase=True, stop_words="english", token_pattern=_WORD).build_analyzer()


def terms(text: str) -> list[str]:
    """The distinct indexable words of ``text`` in order of first use: lower case, two or more
    word characters, English stop words left out (exactly what the index counts)."""
    return list(dict.fromkeys(_analyse(text)))


def stem(word: str) -> str:
    """A crude English stem (``checks``/``checked``/``checking`` -> ``check``), used only to
    match a question's words against the index's words; both sides go through it, so an
    over-eager cut merely merges two rare forms."""
    for suffix, replacement in _SUFFIXES:
        if word.endswith(suffix) and not word.endswith("ss") and len(word) - len(suffix) >= 3:
            return word[: len(word) - len(suffix)] + replacement
    return word


class LexicalIndex:
    """Okapi BM25 over fixed texts identified by ids (k1 = 1.2, b = 0.75 by default)."""

    def __init__(self, ids: Sequence[str], texts: Sequence[str], k1: float = 1.2, b: float = 0.75) -> None:
        self._ids = list(ids)
        self._frequency_by_stem: dict[str, int] | None = None
        self._vectorizer = CountVectorizer(lowercase=True, stop_words="english", token_pattern=_WORD)
        try:
            counts = sparse.csr_matrix(self._vectorizer.fit_transform(texts), dtype=np.float64)
        except ValueError:  # no indexable word at all (empty, or only stop words)
            self._weights = None
            return
        lengths = np.asarray(counts.sum(axis=1)).ravel()
        average = max(float(lengths.mean()), 1e-9)
        document_frequency = np.bincount(counts.indices, minlength=counts.shape[1])
        self._document_frequency = document_frequency
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

    @property
    def size(self) -> int:
        """How many texts are indexed."""
        return len(self._ids)

    def frequencies(self, words: Sequence[str]) -> list[int]:
        """For each word (as :func:`terms` gives them), how many indexed texts hold it or
        another form of it with the same :func:`stem`; 0 for a word the texts never use."""
        by_stem = self._stems()
        return [by_stem.get(stem(word), 0) for word in words]

    def _stems(self) -> dict[str, int]:
        """The largest document frequency of any indexed word per stem, built on first use
        (one pass over the vocabulary; the index is immutable, so it never goes stale)."""
        if self._frequency_by_stem is None:
            by_stem: dict[str, int] = {}
            if self._weights is not None:
                for word, column in self._vectorizer.vocabulary_.items():
                    key = stem(word)
                    by_stem[key] = max(by_stem.get(key, 0), int(self._document_frequency[column]))
            self._frequency_by_stem = by_stem
        return self._frequency_by_stem
