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
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import sparse
from sklearn.feature_extraction.text import CountVectorizer

# What counts as a word, for the lexical index and for anything that must split text the same way:
# two or more letters or digits (scikit-learn's default token pattern).
WORD_PATTERN = r"(?u)\b\w\w+\b"
STEM_CACHE = 100_000  # words whose stem is kept: coverage asks for the same candidates' words question after question
# Texts whose word columns one index keeps (coverage asks for the same candidates' words question
# after question). Per index, so an index's cache goes with it; at most ~1.5 MiB for one index.
TEXT_COLUMNS_CACHE = 4096
_SUFFIXES = (("ies", "y"), ("ing", ""), ("ed", ""), ("es", ""), ("s", ""))
_analyse = CountVectorizer(lowercase=True, stop_words="english", token_pattern=WORD_PATTERN).build_analyzer()


def terms(text: str) -> list[str]:
    """The distinct indexable words of ``text`` in order of first use: lower case, two or more
    word characters, English stop words left out (exactly what the index counts)."""
    return list(dict.fromkeys(_analyse(text)))


@lru_cache(maxsize=STEM_CACHE)
def stem(word: str) -> str:
    """A crude English stem (``checks``/``checked``/``checking`` -> ``check``), used only to
    match a question's words against the index's words; both sides go through it, so an
    over-eager cut merely merges two rare forms."""
    for suffix, replacement in _SUFFIXES:
        if word.endswith(suffix) and not word.endswith("ss") and len(word) - len(suffix) >= 3:
            return word[: len(word) - len(suffix)] + replacement
    return word


@dataclass(frozen=True, slots=True)
class TermCounts:
    """How often each word occurs in each of some texts: one row per id, one column per word of
    ``vocabulary`` (word -> column). Counts of separate batches of texts can be :func:`joined`,
    so an index over a tree plus a few new texts need not count the tree again.

    ``counts`` are what BM25 ranks: a text's words with its title's (see :func:`count_terms`);
    ``own`` the text's words alone (the same matrix where no title was given), which coverage
    weighs: a candidate covers what its text says, not its file's name."""

    ids: tuple[str, ...]
    vocabulary: dict[str, int]
    counts: sparse.csr_matrix
    own: sparse.csr_matrix

    @property
    def size(self) -> int:
        return len(self.ids)


def count_terms(ids: Sequence[str], texts: Sequence[str], titles: Sequence[str] | None = None) -> TermCounts:
    """The :class:`TermCounts` of ``texts`` (``ids`` row for row), words as :func:`terms` finds them;
    with ``titles`` (row for row, "" for none) each row also counts its title's words, as the
    text with its title before it would count: the title and the text are counted apart, in one
    pass, and added."""
    vectorizer = CountVectorizer(lowercase=True, stop_words="english", token_pattern=WORD_PATTERN, dtype=np.float64)
    counted = [*texts, *titles] if titles is not None else list(texts)
    try:
        both = sparse.csr_matrix(vectorizer.fit_transform(counted), dtype=np.float64)
    except ValueError:  # no indexable word at all (empty, or only stop words)
        empty = sparse.csr_matrix((len(ids), 0), dtype=np.float64)
        return TermCounts(tuple(ids), {}, empty, empty)
    own = sparse.csr_matrix(both[: len(texts)])
    counts = own if titles is None else sparse.csr_matrix(own + both[len(texts):])
    return TermCounts(tuple(ids), dict(vectorizer.vocabulary_), counts, own)


def joined(parts: Sequence[TermCounts]) -> TermCounts:
    """The counts of every part's texts, in order, over the union of their vocabularies.

    The first part keeps its columns (a tree's large vocabulary is not copied
    column by column); each later part's columns are renumbered into the union.
    """
    if not parts:
        empty = sparse.csr_matrix((0, 0), dtype=np.float64)
        return TermCounts((), {}, empty, empty)
    vocabulary = dict(parts[0].vocabulary)
    renumbering = [np.arange(len(parts[0].vocabulary), dtype=np.int64)]
    for part in parts[1:]:
        columns = np.empty(len(part.vocabulary), dtype=np.int64)
        for word, column in part.vocabulary.items():
            columns[column] = vocabulary.setdefault(word, len(vocabulary))
        renumbering.append(columns)
    width = len(vocabulary)
    counts = _stacked([part.counts for part in parts], renumbering, width)
    own = counts if all(part.own is part.counts for part in parts) else _stacked(
        [part.own for part in parts], renumbering, width)
    return TermCounts(tuple(i for part in parts for i in part.ids), vocabulary, counts, own)


def _stacked(matrices: Sequence[sparse.csr_matrix], renumbering: Sequence[np.ndarray], width: int) -> sparse.csr_matrix:
    """``matrices`` one under the other, each one's columns renumbered (``renumbering``, part
    for part) into a vocabulary ``width`` words wide."""
    blocks = []
    for matrix, columns in zip(matrices, renumbering, strict=True):
        coo = matrix.tocoo()
        blocks.append(sparse.csr_matrix((coo.data, (coo.row, columns[coo.col])), shape=(matrix.shape[0], width)))
    return sparse.csr_matrix(sparse.vstack(blocks, format="csr", dtype=np.float64))


class LexicalIndex:
    """Okapi BM25 over fixed texts identified by ids (k1 = 1.2, b = 0.75 by default).

    Built from the texts, or from their :class:`TermCounts` (:meth:`of_counts`).
    """

    def __init__(self, ids: Sequence[str], texts: Sequence[str], k1: float = 1.2, b: float = 0.75) -> None:
        self._build(count_terms(ids, texts), k1, b)

    @classmethod
    def of_counts(cls, counts: TermCounts, k1: float = 1.2, b: float = 0.75) -> LexicalIndex:
        """The index of texts already counted (see :func:`count_terms` and :func:`joined`)."""
        index = cls.__new__(cls)
        index._build(counts, k1, b)
        return index

    def _build(self, counted: TermCounts, k1: float, b: float) -> None:
        self._ids = list(counted.ids)
        # Each id's place in id order: equal scores rank by id, whatever order the texts were read in.
        self._id_order = np.argsort(np.argsort(np.asarray(self._ids, dtype=object), kind="stable"), kind="stable")
        self._vocabulary = counted.vocabulary
        self._frequency_by_stem: dict[str, int] | None = None
        self._stem_frequency_by_column: np.ndarray | None = None
        self._text_columns: dict[str, np.ndarray] = {}
        counts = counted.counts.copy()
        # Each text's distinct words (its title's left out) are its row's columns in ``own``: kept,
        # so that a text the index holds need not be analysed again when coverage asks for its words.
        self._row_of = {node_id: row for row, node_id in enumerate(self._ids)}
        self._row_starts, self._row_columns = counted.own.indptr, counted.own.indices
        if not self._vocabulary or counts.nnz == 0:
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

    def _columns(self, query: str) -> np.ndarray:
        """The columns of the query's distinct indexed words."""
        found = [self._vocabulary[word] for word in terms(query) if word in self._vocabulary]
        return np.asarray(sorted(found), dtype=np.int64)

    def top(self, query: str, n: int) -> list[tuple[str, float]]:
        """Up to ``n`` (id, BM25 score) pairs with a positive score, best first (equal scores by id)."""
        if self._weights is None or n <= 0:
            return []
        columns = self._columns(query)
        if columns.size == 0:
            return []
        scores = self._scores(columns)
        positive = np.flatnonzero(scores > 0)
        if positive.size == 0:
            return []
        best = positive[np.lexsort((self._id_order[positive], -scores[positive]))[:n]]
        ids = self._ids
        return [(ids[i], score) for i, score in zip(best.tolist(), scores[best].tolist())]

    def _scores(self, columns: np.ndarray) -> np.ndarray:
        """Every text's BM25 score for the words of ``columns``: each word's row of saturated
        counts times its IDF, added up. Read straight off the term rows (a query has a handful
        of words): scipy's row selection and product cost more than the sum itself."""
        weights = self._weights
        assert weights is not None
        starts, ends = weights.indptr[columns], weights.indptr[columns + 1]
        texts = np.concatenate([weights.indices[start:end] for start, end in zip(starts, ends)])
        shares = np.concatenate([weights.data[start:end] * idf
                                 for start, end, idf in zip(starts, ends, self._idf[columns])])
        return np.bincount(texts, weights=shares, minlength=weights.shape[1])

    @property
    def size(self) -> int:
        """How many texts are indexed."""
        return len(self._ids)

    @property
    def width(self) -> int:
        """How many distinct words are indexed: every column is below it."""
        return len(self._vocabulary)

    def frequencies(self, words: Sequence[str]) -> list[int]:
        """For each word (as :func:`terms` gives them), how many indexed texts hold it or
        another form of it with the same :func:`stem`; 0 for a word the texts never use."""
        by_stem = self._stems()
        return [by_stem.get(stem(word), 0) for word in words]

    def columns_of(self, text: str) -> np.ndarray:
        """The columns of ``text``'s distinct indexed words, in the order :func:`terms` finds
        them (a word the index does not hold is left out: every indexed text's words are held).
        Kept for the last :data:`TEXT_COLUMNS_CACHE` texts asked for, all dropped at once past
        it (plain dict operations: threads share the index)."""
        found = self._text_columns.get(text)
        if found is None:
            vocabulary = self._vocabulary
            found = np.fromiter((vocabulary[w] for w in terms(text) if w in vocabulary), dtype=np.int32)
            if len(self._text_columns) >= TEXT_COLUMNS_CACHE:
                self._text_columns.clear()
            self._text_columns[text] = found
        return found

    def columns_of_node(self, node_id: str, text: str) -> np.ndarray:
        """:meth:`columns_of` ``text``, as a set: for a node this index holds (by ``node_id``,
        whose text ``text`` is) its row's columns of its own words (:attr:`TermCounts.own`),
        without analysing the text again; for any other node, :meth:`columns_of` ``text``.

        Why: a broad question's coverage asks for the words of some 150 candidates; analysing
        those not yet kept took half of its time in a fresh process (2.4 of 5.2 ms a question,
        measured in the ``retrieve`` command)."""
        row = self._row_of.get(node_id)
        if row is None:
            return self.columns_of(text)
        return self._row_columns[self._row_starts[row]:self._row_starts[row + 1]]

    def stem_frequencies(self, columns: np.ndarray) -> np.ndarray:
        """:meth:`frequencies` of the words of ``columns``: for each, how many indexed texts hold
        it or another form of it with the same :func:`stem`."""
        if self._stem_frequency_by_column is None:
            by_stem = self._stems()
            by_column = np.zeros(len(self._vocabulary), dtype=np.float64)
            for word, column in self._vocabulary.items():
                by_column[column] = by_stem.get(stem(word), 0)
            self._stem_frequency_by_column = by_column
        return self._stem_frequency_by_column[columns]

    def _stems(self) -> dict[str, int]:
        """The largest document frequency of any indexed word per stem, built on first use
        (one pass over the vocabulary; the index is immutable, so it never goes stale)."""
        if self._frequency_by_stem is None:
            by_stem: dict[str, int] = {}
            if self._weights is not None:
                for word, column in self._vocabulary.items():
                    key = stem(word)
                    by_stem[key] = max(by_stem.get(key, 0), int(self._document_frequency[column]))
            self._frequency_by_stem = by_stem
        return self._frequency_by_stem
