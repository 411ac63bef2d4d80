"""The flat baselines and the oracle reference of ``bench.retrieval``, with nothing of the engine's tree.

The flat baselines rank exactly the engine's leaf chunks (a channel's leaves in reading
order, with their stored embeddings: :class:`ChannelLeaves`) by :class:`BM25`, by the
dense cosine, or by both fused by reciprocal rank (:func:`rrf_scores`, k = 60 as in the
engine), and fill the budget with the engine's own ``fill_budget`` (:func:`ranked`). The
``oracle extract`` is the best recall an extract of the document's sentences reaches within
the budget, found greedily (:func:`oracle_recall`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from sklearn.feature_extraction.text import CountVectorizer

from bench.common import tree_nodes
from bench.data import normalised
from bench.measure import content_words
from raptor_engine import ChannelKey, Engine, Hit, Node, TokenCounter
from raptor_engine.budget import fill_budget
from raptor_engine.chunking import sentences
from raptor_engine.retrieval import DEFAULT_TOP_K, RRF_K

# -- BM25 ----------------------------------------------------------------------


class BM25:
    """Okapi BM25 over a fixed set of texts: lower-cased word tokens, English stop words removed.

    ``idf = ln(1 + (N - n + 0.5) / (n + 0.5))`` (never negative);
    ``score = sum over query tokens of idf * tf (k1 + 1) / (tf + k1 (1 - b + b dl / avgdl))``.
    """

    def __init__(self, texts: Sequence[str], k1: float = 1.5, b: float = 0.75) -> None:
        self._vectorizer = CountVectorizer(lowercase=True, stop_words="english", token_pattern=r"(?u)\b\w+\b")
        counts = self._vectorizer.fit_transform(texts).toarray().astype(np.float64)
        lengths = counts.sum(axis=1)
        present = (counts > 0).sum(axis=0)
        self._idf = np.log1p((len(texts) - present + 0.5) / (present + 0.5))
        norm = k1 * (1.0 - b + b * lengths / max(lengths.mean(), 1e-9))
        self._weights = counts * (k1 + 1.0) / (counts + norm[:, None])  # documents x terms

    def scores(self, query: str) -> np.ndarray:
        """One score per text; each query token counts as often as it occurs."""
        query_counts = self._vectorizer.transform([query]).toarray()[0].astype(np.float64)
        return self._weights @ (self._idf * query_counts)


def rrf_scores(*rankings: np.ndarray) -> np.ndarray:
    """Reciprocal-rank fusion of score vectors over the same items: ``sum 1 / (k + rank)``,
    rank 1 for each vector's best item, ``k`` = 60 as in the engine."""
    fused = np.zeros(len(rankings[0]), dtype=np.float64)
    for scores in rankings:
        order = np.argsort(-scores, kind="stable")
        ranks = np.empty(len(scores), dtype=np.float64)
        ranks[order] = np.arange(1, len(scores) + 1)
        fused += 1.0 / (RRF_K + ranks)
    return fused


def ranked(nodes: Sequence[Node], scores: np.ndarray, budget: int) -> list[Node]:
    """The best-scoring nodes that fit ``budget``, filled as the engine fills it (ties by reading order)."""
    order = np.argsort(-scores, kind="stable")
    hits = [Hit(nodes[i], float(scores[i])) for i in order]
    return [hit.node for hit in fill_budget(hits, budget, DEFAULT_TOP_K)]


@dataclass(frozen=True, slots=True)
class ChannelLeaves:
    """A built channel's leaves in reading order, their stored embeddings and BM25 over them:
    what the flat baselines rank (read once per channel, shared by its documents)."""

    leaves: list[Node]
    vectors: np.ndarray
    bm25: BM25

    @classmethod
    def read(cls, engine: Engine, key: ChannelKey) -> ChannelLeaves:
        """The leaves of ``key``'s served tree; raises ``RuntimeError`` when the channel has no tree yet."""
        leaves = sorted(tree_nodes(engine, key, 0), key=lambda n: (n.source_ids, n.ordinal, n.id))
        state = engine.store.channel(key).live_state()
        if state is None:
            raise RuntimeError(f"{key} has no tree: build its channel first (ensure_article_channels)")
        stored = engine.store.channel(key).get_tree_embeddings(state.version, [n.id for n in leaves])
        return cls(leaves, np.vstack([stored[n.id] for n in leaves]), BM25([n.text for n in leaves]))


# -- the oracle ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Sentence:
    """A sentence of a document with its token count and content words."""

    tokens: int
    words: frozenset[str]


def document_sentences(text: str, counter: TokenCounter) -> list[Sentence]:
    """The document's sentences as the engine's chunker splits them."""
    found = sentences(normalised(text))
    counts = counter.count_many(found)
    return [Sentence(tokens, content_words(sentence)) for sentence, tokens in zip(found, counts, strict=True)]


def oracle_recall(gold: frozenset[str], pool: Sequence[Sentence], budget: int) -> tuple[float, int]:
    """The recall of gold words (and the tokens spent) of a greedy best extract of
    ``pool``'s sentences within ``budget`` tokens.

    Budgeted maximum coverage, greedily: take the sentence covering most new
    gold words per token while one fits; the result is then compared with the
    best single sentence that fits, and the better kept. Under a plain count
    limit greedy is within (1 - 1/e) of the optimum; with token costs, greedy
    plus the best single sentence is within (1 - 1/e) / 2 (Khuller, Moss and
    Naor, 1999). Gold answers have tens of words, so in practice it is close to
    the optimum, but it is a lower bound of the true best extract.
    """
    if not gold:
        return float("nan"), 0
    useful = [s for s in pool if s.tokens <= budget and s.words & gold]
    covered: set[str] = set()
    used = 0
    while True:
        best, best_rate = None, 0.0
        for sentence in useful:
            gain = len((sentence.words & gold) - covered)
            rate = gain / max(sentence.tokens, 1)
            if gain and used + sentence.tokens <= budget and rate > best_rate:
                best, best_rate = sentence, rate
        if best is None:
            break
        covered |= best.words & gold
        used += best.tokens
    single = max(useful, key=lambda s: len(s.words & gold), default=None)
    if single is not None and len(single.words & gold) > len(covered):
        return len(single.words & gold) / len(gold), single.tokens
    return len(covered) / len(gold), used
