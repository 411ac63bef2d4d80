"""The offline answerer: the retrieved sentences that best answer the question, cited.

Without a language model we cannot write new prose, so the answer is made of
the sentences of the retrieved nodes closest to the question (by the same
embedding model the tree uses), each followed by the number of the node it
came from. When even the best retrieved node is far from the question, the
answer says nothing relevant was found instead of quoting noise.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from raptor_engine.chunking import sentences
from raptor_engine.protocols import Embedder
from raptor_engine.types import Answer, Citation, Hit

NOT_FOUND = "I could not find anything about that in this channel's material."
QUOTE_CHARS = 200


@dataclass(frozen=True, slots=True)
class ExtractiveSettings:
    """Limits of an extractive answer.

    ``min_relevance`` is the cosine similarity below which a node or sentence
    is not considered an answer; ``relative_cut`` keeps sentences scoring at
    least that share of the best sentence's score.
    """

    max_sentences: int = 4
    max_nodes: int = 8  # sentences are read from the best nodes only: each costs an embedding
    min_relevance: float = 0.3
    relative_cut: float = 0.8


class ExtractiveAnswerer:
    """An :class:`~raptor_engine.protocols.Answerer` that quotes the best-supported sentences."""

    def __init__(self, embedder: Embedder, settings: ExtractiveSettings = ExtractiveSettings()) -> None:
        self._embedder = embedder
        self._settings = settings

    @property
    def identity(self) -> str:
        return f"extractive-answer-v1/{self._embedder.model_id}"

    async def answer(self, question: str, hits: Sequence[Hit]) -> Answer:
        """See the ``Answerer`` protocol. CPU work runs in a worker thread."""
        return await asyncio.to_thread(self.answer_now, question, hits)

    def answer_now(self, question: str, hits: Sequence[Hit]) -> Answer:
        """The answer, computed in the calling thread."""
        relevant = [hit for hit in hits if hit.score >= self._settings.min_relevance][: self._settings.max_nodes]
        if not relevant:
            return Answer(text=NOT_FOUND, citations=(), hits=tuple(hits), found=False)
        sentences = _distinct_sentences(relevant)
        vectors = self._embedder.embed([question, *(s for _, s in sentences)])
        scores = vectors[1:] @ vectors[0]
        picked = self._pick(scores)
        if not picked:
            return Answer(text=NOT_FOUND, citations=(), hits=tuple(hits), found=False)
        return _cited([sentences[i] for i in picked], relevant, hits)

    def _pick(self, scores: np.ndarray) -> list[int]:
        """Indices of the best sentences, best first, above both thresholds."""
        if scores.size == 0:
            return []
        order = np.argsort(-scores, kind="stable")
        floor = max(self._settings.min_relevance, float(scores[order[0]]) * self._settings.relative_cut)
        return [int(i) for i in order[: self._settings.max_sentences] if scores[i] >= floor]


def _cited(chosen: list[tuple[int, str]], relevant: list[Hit], hits: Sequence[Hit]) -> Answer:
    """The answer text with ``[n]`` after each sentence; citations numbered by first use."""
    numbers: dict[int, int] = {}
    citations: list[Citation] = []
    parts: list[str] = []
    for hit_index, sentence in chosen:
        if hit_index not in numbers:
            numbers[hit_index] = len(numbers) + 1
            node = relevant[hit_index].node
            citations.append(
                Citation(numbers[hit_index], node.id, node.layer, node.title, node.link, quote(node.text))
            )
        parts.append(f"{sentence} [{numbers[hit_index]}]")
    return Answer(text=" ".join(parts), citations=tuple(citations), hits=tuple(hits), found=True)


def _distinct_sentences(hits: Sequence[Hit]) -> list[tuple[int, str]]:
    """(hit index, sentence) for every sentence of the hits, each sentence once.

    Extractive summaries repeat sentences of their leaves; a repeated sentence
    is attributed to the best-scoring hit that holds it (hits come best first).
    """
    seen: set[str] = set()
    result: list[tuple[int, str]] = []
    for index, hit in enumerate(hits):
        for sentence in sentences(hit.node.text):
            if sentence not in seen:
                seen.add(sentence)
                result.append((index, sentence))
    return result


def quote(text: str, limit: int = QUOTE_CHARS) -> str:
    """A short quote of ``text``: whitespace folded, cut at a word with an ellipsis."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    return flat[:limit].rsplit(" ", 1)[0] + "…"
