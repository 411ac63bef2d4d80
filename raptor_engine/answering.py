"""The offline answerer: the retrieved text that best answers the question, cited.

Without a language model we cannot write new prose, so the answer is made of
the retrieved nodes' own sentences, each followed by the number of the node it
came from. What it is made of follows the question's scope (``scope.py``),
judged during retrieval:

- nothing about the question in the channel: a short "nothing found" answer,
  quoting nothing;
- an overview or a theme: the best summary first (trimmed to
  ``summary_chars`` at a sentence end), cited as a summary with its layer, then
  up to ``max_excerpts`` supporting sentences from the other nodes;
- a detail: the sentences closest to the question (by the embedding model the
  tree uses), up to ``max_sentences``.

Either way no two quoted sentences are near duplicates (token Jaccard at least
``duplicate_jaccard``), sentences are grouped by source and keep their order in
the document (leaves carry their span).

A partial answer ends by naming what the material lacks ("I found nothing about
…"): of the question's words that the channel never uses (``Scope.missing``,
compared by stem), those whose clause of the question is also far in meaning
from the sentences the answer was chosen from (and its lead summary): see
``unfound.py`` for the rule and its fitted threshold. A word that is absent
only in spelling ("reached" when the text says a page is not acknowledged) is
not named, and when no word is left there is no note.

Called without a scope (an older caller), the answerer falls back on a cosine
floor: nodes and sentences under ``min_relevance`` do not answer.

:func:`cite` turns an answer's ``[n]`` markers into its cited nodes; the
model's answerer (``raptor_engine.llm.answerer``) uses it too.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from raptor_engine import defaults
from raptor_engine.chunking import sentences as sentences_of
from raptor_engine.protocols import Embedder
from raptor_engine.scope import Scope
from raptor_engine.types import Answer, Citation, Hit
from raptor_engine.unfound import Judged, judge
from raptor_engine.vector_cache import VectorCache

NOT_FOUND = "I could not find anything about that in this channel's material."
QUOTE_CHARS = 200
_TOKEN = re.compile(r"\w+")
_NO_EVIDENCE = np.zeros((0, 0), dtype=np.float32)
# Sentences whose vectors an answerer keeps (about 6 MiB at 384 dimensions): questions in a channel
# keep reaching the same passages, and embedding their sentences is nearly all of an answer's cost.
SENTENCE_VECTORS_KEPT = 4096

#: Told the question and how each of its lexically missing words was judged, for each
#: answer that had any (``bench.answers`` measures the note with it).
UnfoundObserver = Callable[[str, tuple[Judged, ...]], None]


def nothing_about(words: Sequence[str]) -> str:
    """The sentence naming the question's words the channel never uses."""
    return f"I found nothing about {', '.join(words)}."


@dataclass(frozen=True, slots=True)
class ExtractiveSettings:
    """Limits of an extractive answer.

    ``min_relevance`` is the cosine similarity below which a node or sentence
    is not considered an answer when no scope is given; ``relative_cut`` keeps
    sentences scoring at least that share of the best sentence's score;
    ``summary_chars`` bounds the summary leading a broad answer.
    """

    max_sentences: int = 4
    max_nodes: int = 8  # sentences are read from the best nodes only: each costs an embedding
    min_relevance: float = 0.3
    relative_cut: float = 0.8
    summary_chars: int = defaults.SUMMARY_CHARS
    max_excerpts: int = 3
    max_excerpt_nodes: int = 4  # a broad answer's excerpts come from this many nodes after its summary
    duplicate_jaccard: float = 0.8
    min_words: int = 4  # shorter sentences (headings, "Korvin shrugged.") are not quoted alone


@dataclass(frozen=True, slots=True)
class _Sentence:
    """A sentence of a hit: which hit (by index), its text and its place in the node."""

    hit: int
    text: str
    place: int


class ExtractiveAnswerer:
    """An :class:`~raptor_engine.protocols.Answerer` that quotes the best-supported sentences.

    ``on_unfound``, where given, is called (in the answering thread) with the question
    and the judgement of its lexically missing words, for every found answer whose
    scope had any; it must not raise.
    """

    def __init__(
        self,
        embedder: Embedder,
        settings: ExtractiveSettings = ExtractiveSettings(),
        on_unfound: UnfoundObserver | None = None,
    ) -> None:
        self._embedder = embedder
        self._sentence_vectors = VectorCache(embedder, SENTENCE_VECTORS_KEPT)
        self._settings = settings
        self._on_unfound = on_unfound

    @property
    def identity(self) -> str:
        return f"extractive-answer-v2/{self._embedder.model_id}"

    async def answer(self, question: str, hits: Sequence[Hit], scope: Scope | None = None) -> Answer:
        """See the ``Answerer`` protocol; ``scope`` is the question's scope from retrieval.
        CPU work runs in a worker thread."""
        return await asyncio.to_thread(self.answer_now, question, hits, scope)

    def answer_now(self, question: str, hits: Sequence[Hit], scope: Scope | None = None) -> Answer:
        """The answer, computed in the calling thread."""
        if scope is None:
            floor = self._settings.min_relevance
            relevant = [hit for hit in hits if hit.score >= floor]
        else:
            floor = float("-inf")
            relevant = list(hits) if scope.answerable else []
        if not relevant:
            return Answer(text=NOT_FOUND, citations=(), hits=tuple(hits), found=False)
        lead = next((hit for hit in relevant if hit.node.layer > 0), None) if scope and scope.broad else None
        if lead is not None:
            others = [hit for hit in relevant if hit is not lead]
            # Supporting excerpts from leaves first, the closest to the question first: a context
            # in reading order (a document's opening) would otherwise give its title and references.
            others.sort(key=lambda hit: (hit.node.layer > 0, -hit.score))
            answer, evidence = self._broad(question, lead, others[: self._settings.max_excerpt_nodes], hits)
        else:
            answer, evidence = self._detail(question, relevant[: self._settings.max_nodes], hits, floor)
        if answer.found and scope is not None and scope.missing:
            judged = judge(self._embedder, question, scope.missing, evidence)
            if self._on_unfound is not None:
                self._on_unfound(question, judged)
            unfound = [item.word for item in judged if item.named]
            if unfound:
                answer = Answer(f"{answer.text} {nothing_about(unfound)}", answer.citations, answer.hits, True)
        return answer

    def _detail(self, question: str, nodes: list[Hit], hits: Sequence[Hit], floor: float) -> tuple[Answer, np.ndarray]:
        """The best sentences of ``nodes``, above ``floor`` and the relative cut; and the
        evidence they were chosen from (see :meth:`_pick`)."""
        candidates = _distinct_sentences(nodes)
        picked, evidence = self._pick(question, candidates, self._settings.max_sentences, floor)
        if not picked:
            return Answer(text=NOT_FOUND, citations=(), hits=tuple(hits), found=False), evidence
        return _cited([], _in_reading_order(picked, nodes), nodes, hits), evidence

    def _broad(self, question: str, lead: Hit, others: list[Hit], hits: Sequence[Hit]) -> tuple[Answer, np.ndarray]:
        """The lead summary, trimmed, then the best supporting sentences of the other nodes;
        and the evidence they were chosen from (see :meth:`_pick`)."""
        summary = trim(lead.node.text, self._settings.summary_chars)
        nodes = [lead, *others]
        candidates = [s for s in _distinct_sentences(nodes) if s.hit > 0]
        said = [_tokens(sentence) for sentence in sentences_of(summary)]
        fresh = [s for s in candidates if not any(_similar(_tokens(s.text), t, self._settings) for t in said)]
        picked, evidence = self._pick(question, fresh, self._settings.max_excerpts, float("-inf"), summary)
        if not evidence.size:  # no supporting sentence to choose from: the summary alone answers
            evidence = self._embedder.embed([summary])
        return _cited([(0, summary)], _in_reading_order(picked, nodes), nodes, hits), evidence

    def _pick(
        self, question: str, candidates: list[_Sentence], limit: int, floor: float, lead: str = ""
    ) -> tuple[list[_Sentence], np.ndarray]:
        """Up to ``limit`` of ``candidates``, best first: above ``floor`` and the relative cut,
        and none a near duplicate of one picked before it; and the evidence: the embeddings
        of the candidates and of ``lead``, one unit row each (none when nothing was embedded).

        A sentence scores its cosine to the question; with a ``lead`` summary, the
        mean of its cosines to the question and to the lead, so that supporting
        sentences bear on what the answer leads with (an overview question alone
        is too generic to choose by).
        """
        if not candidates or limit <= 0:
            return [], _NO_EVIDENCE
        # Embedded apart: a batch is padded to its longest text, and a summary is several
        # times longer than a sentence (one batch of both took 3.5 times as long).
        anchors = [self._embedder.embed([text])[0] for text in ([question, lead] if lead else [question])]
        vectors = self._sentence_vectors.embed([s.text for s in candidates])
        evidence = np.vstack([vectors, *anchors[1:]])  # the question itself is no evidence
        scores = (vectors @ np.vstack(anchors).T).mean(axis=1)
        order = np.argsort(-scores, kind="stable")
        best = float(scores[order[0]])
        cut = max(floor, best * self._settings.relative_cut if best > 0 else best)
        picked: list[_Sentence] = []
        seen: list[set[str]] = []
        for index in order:
            if scores[index] < cut or len(picked) >= limit:
                break
            tokens = _tokens(candidates[index].text)
            short = len(_TOKEN.findall(candidates[index].text)) < self._settings.min_words
            if (short and (picked or lead)) or any(_similar(tokens, other, self._settings) for other in seen):
                continue
            picked.append(candidates[index])
            seen.append(tokens)
        return picked, evidence


def _cited(
    lead: list[tuple[int, str]], chosen: list[_Sentence], nodes: Sequence[Hit], hits: Sequence[Hit]
) -> Answer:
    """The answer text with ``[n]`` after each part; citations numbered by first use.

    ``lead`` is the (node index, text) of a leading summary, set apart from the
    sentences after it by a blank line.
    """
    numbers: dict[int, int] = {}  # node index -> its marker; insertion order is the order of first use

    def number(index: int) -> int:
        return numbers.setdefault(index, len(numbers) + 1)

    parts = [f"{text} [{number(index)}]" for index, text in lead]
    body = " ".join(f"{sentence.text} [{number(sentence.hit)}]" for sentence in chosen)
    text = "\n\n".join(part for part in (*parts, body) if part)
    return Answer(text=text, citations=cite(nodes, numbers), hits=tuple(hits), found=True)


def cite(hits: Sequence[Hit], order: Iterable[int]) -> tuple[Citation, ...]:
    """The citations of an answer whose ``[1]``, ``[2]``, … markers name ``hits[order[0]]``,
    ``hits[order[1]]``, …: one per index of ``order`` (indices into ``hits``), numbered from 1.

    The one place an answer's markers become cited nodes, for this answerer and for
    the model's (``raptor_engine.llm.answerer``), so both cite a node alike.
    """
    return tuple(_citation(number, hits[index]) for number, index in enumerate(order, start=1))


def _citation(number: int, hit: Hit) -> Citation:
    node = hit.node
    return Citation(number, node.id, node.layer, node.title, node.link, quote(node.text))


def _distinct_sentences(hits: Sequence[Hit]) -> list[_Sentence]:
    """Every sentence of the hits, each sentence once.

    Extractive summaries repeat sentences of their leaves; a repeated sentence
    is attributed to the first hit that holds it (hits come best first).
    """
    seen: set[str] = set()
    result: list[_Sentence] = []
    for index, hit in enumerate(hits):
        for place, sentence in enumerate(sentences_of(hit.node.text)):
            if sentence not in seen:
                seen.add(sentence)
                result.append(_Sentence(index, sentence, place))
    return result


def _in_reading_order(chosen: list[_Sentence], nodes: Sequence[Hit]) -> list[_Sentence]:
    """``chosen`` grouped by source (the source of the best sentence first), each source's
    sentences in document order: summaries first, then leaves by their start in the source."""
    rank: dict[str, int] = {}
    for sentence in chosen:
        rank.setdefault(_source(nodes[sentence.hit]), len(rank))

    def key(sentence: _Sentence) -> tuple[int, int, int, int, int]:
        node = nodes[sentence.hit].node
        return (rank[_source(nodes[sentence.hit])], node.layer == 0, node.start, sentence.hit, sentence.place)

    return sorted(chosen, key=key)


def _source(hit: Hit) -> str:
    return hit.node.source_ids[0] if hit.node.source_ids else hit.node.id


def _tokens(text: str) -> set[str]:
    return set(_TOKEN.findall(text.lower()))


def _similar(a: set[str], b: set[str], settings: ExtractiveSettings) -> bool:
    """Whether two sentences' token sets are near duplicates (Jaccard at least the setting)."""
    union = len(a | b)
    return union > 0 and len(a & b) / union >= settings.duplicate_jaccard


def trim(text: str, limit: int) -> str:
    """``text``'s first sentences within ``limit`` characters (whitespace folded); if even
    the first is longer, that sentence cut at a word with an ellipsis."""
    parts = sentences_of(text)
    kept: list[str] = []
    for sentence in parts:
        if len(" ".join([*kept, sentence])) > limit:
            break
        kept.append(sentence)
    if kept:
        return " ".join(kept)
    return quote(parts[0] if parts else text, limit)


def quote(text: str, limit: int = QUOTE_CHARS) -> str:
    """A short quote of ``text``: whitespace folded, cut at a word with an ellipsis."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    return flat[:limit].rsplit(" ", 1)[0] + "…"
