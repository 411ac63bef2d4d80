"""The offline summariser: the sentences most central to a cluster.

RAPTOR asks a language model to summarise each cluster; with no model at hand
we pick, from the members' sentences, those closest to the cluster's centroid
in TF-IDF space (the idea of centroid-based extractive summarisation), up to a
token budget, and give them in their original order. No model, no network, and
a few milliseconds per cluster.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer

from raptor_engine.chunking import sentences as sentences_of
from raptor_engine.protocols import TokenCounter

DEFAULT_SUMMARY_TOKENS = 130  # the paper's average summary length


class ExtractiveSummarizer:
    """A :class:`~raptor_engine.protocols.Summarizer` that extracts central sentences."""

    def __init__(self, counter: TokenCounter, max_tokens: int = DEFAULT_SUMMARY_TOKENS) -> None:
        self._counter = counter
        self._max_tokens = max_tokens

    @property
    def identity(self) -> str:
        return f"extractive-centroid-v1/{self._max_tokens}"

    async def summarize(self, texts: Sequence[str]) -> str:
        """See the ``Summarizer`` protocol. CPU work runs in a worker thread."""
        return await asyncio.to_thread(self.summarize_now, texts)

    def summarize_now(self, texts: Sequence[str]) -> str:
        """The summary of ``texts``, computed in the calling thread."""
        sentences = _sentences_of(texts)
        if not sentences:
            return ""
        if len(sentences) == 1:
            return sentences[0]
        ranked = _rank_by_centrality(sentences)
        chosen = self._fill_budget(sentences, ranked)
        return " ".join(sentences[i] for i in sorted(chosen))

    def _fill_budget(self, sentences: list[str], ranked: list[int]) -> list[int]:
        """Takes sentences in rank order while they fit the budget; always at least one."""
        counts = self._counter.count_many(sentences)
        chosen: list[int] = []
        used = 0
        for index in ranked:
            if chosen and used + counts[index] > self._max_tokens:
                continue
            chosen.append(index)
            used += counts[index]
            if used >= self._max_tokens * 0.9:
                break
        return chosen


def _sentences_of(texts: Sequence[str]) -> list[str]:
    """Every sentence of ``texts`` with its whitespace folded, duplicates dropped."""
    seen: set[str] = set()
    sentences: list[str] = []
    for text in texts:
        for sentence in sentences_of(text):
            if sentence and sentence not in seen:
                seen.add(sentence)
                sentences.append(sentence)
    return sentences


def _rank_by_centrality(sentences: list[str]) -> list[int]:
    """Sentence indices, most central first (cosine to the TF-IDF centroid)."""
    try:
        matrix = TfidfVectorizer(sublinear_tf=True, stop_words="english").fit_transform(sentences)
    except ValueError:  # only stop words or punctuation: no vocabulary; keep reading order
        return list(range(len(sentences)))
    centroid = np.asarray(matrix.mean(axis=0)).ravel()
    norm = np.linalg.norm(centroid)
    if norm == 0:
        return list(range(len(sentences)))
    scores = matrix @ (centroid / norm)
    # Stable sort on the negated score keeps reading order among ties: deterministic.
    return [int(i) for i in np.argsort(-np.asarray(scores).ravel(), kind="stable")]
