"""The per-question scoring of ``bench.retrieval``: every method over one document's channel,
each question's outcome recorded by method and budget.

The methods (:data:`METHODS`): the engine's three modes (``collapsed``, the default, as
``Engine.retrieve`` runs it; ``traversal``; ``leaves``); the flat baselines
(:data:`FLAT`, ``bench.retrieval_flat``) and ``chance`` (leaves drawn at random into the
budget); and the two references, the ``whole document`` (the ceiling) and the ``oracle
extract``. A question's context is scored by content-word recall (``bench.measure``) of its
gold answer, and of the gold's distinguishing words; each outcome also keeps the tokens
spent, the share of them taken by summary nodes (layer > 0), and the half of its set the
document is in (:data:`FIT`: even positions, where retrieval's constants are fitted;
:data:`HELD`: odd positions).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from bench.common import ensure_article_channels
from bench.data import Article, DataSet, Question, half_of, normalised
from bench.measure import content_words, distinguishing_words, word_recall
from bench.retrieval_flat import ChannelLeaves, document_sentences, oracle_recall, ranked, rrf_scores
from raptor_engine import ChannelKey, Embedder, Engine, Node, RetrievalMode, TokenCounter

ENGINE_MODES = {
    "collapsed": RetrievalMode.COLLAPSED,
    "traversal": RetrievalMode.TRAVERSAL,
    "leaves": RetrievalMode.LEAVES,
}
FLAT = ("bm25", "dense", "bm25+dense")
CHANCE = "chance"
WHOLE = "whole document"
ORACLE = "oracle extract"
METHODS = (*ENGINE_MODES, *FLAT, CHANCE, WHOLE, ORACLE)


@dataclass(slots=True)
class Outcomes:
    """Per-question results of one method at one budget, in the order asked."""

    recall: list[float] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    summary_share: list[float] = field(default_factory=list)
    half: list[str] = field(default_factory=list)  # FIT or HELD: the half of the set its document is in
    specific: list[float] = field(default_factory=list)  # recall of the gold's distinguishing words

    def add(self, recall: float, tokens: int, summary_tokens: int, half: str, specific: float) -> None:
        """Records one question's outcome (a context of no tokens has a summary share of 0)."""
        self.recall.append(recall)
        self.specific.append(specific)
        self.tokens.append(tokens)
        self.summary_share.append(summary_tokens / tokens if tokens else 0.0)
        self.half.append(half)


Results = dict[int, dict[str, Outcomes]]
"""Outcomes by budget, then by method."""


class DocumentBench:
    """Every method over one document's channel: the served tree's leaves and their
    stored embeddings for the flat baselines, its sentences for the oracle."""

    def __init__(self, engine: Engine, key: ChannelKey, article: Article, counter: TokenCounter, half: str,
                 channel: ChannelLeaves) -> None:
        self._engine = engine
        self._key = key
        self._half = half
        self._chance = random.Random(article.index)  # the same draws in every run
        self.leaves = channel.leaves
        self._vectors = channel.vectors
        self._bm25 = channel.bm25
        self._sentences = document_sentences(article.text, counter)
        self._whole = content_words(normalised(article.text))
        self._whole_tokens = sum(s.tokens for s in self._sentences)
        self._words: dict[str, frozenset[str]] = {}

    def _context_words(self, nodes: Sequence[Node]) -> frozenset[str]:
        words: set[str] = set()
        for node in nodes:
            if node.id not in self._words:
                self._words[node.id] = content_words(node.text)
            words |= self._words[node.id]
        return frozenset(words)

    def score(self, asked: Question, vector: np.ndarray, budgets: Sequence[int], results: Results) -> None:
        """Adds one question's outcome for every method and budget to ``results``."""
        question, wanted = asked.text, content_words(asked.gold)
        telling = distinguishing_words(asked.gold, asked.options)
        bm25 = self._bm25.scores(question)
        dense = self._vectors @ vector
        drawn = np.array([self._chance.random() for _ in self.leaves])
        flat = {"bm25": bm25, "dense": dense, "bm25+dense": rrf_scores(bm25, dense), CHANCE: drawn}
        for budget in budgets:
            row = results.setdefault(budget, {name: Outcomes() for name in METHODS})
            for name, mode in ENGINE_MODES.items():
                self._add(row[name], wanted, telling, self._engine_nodes(question, mode, budget))
            for name, scores in flat.items():
                self._add(row[name], wanted, telling, ranked(self.leaves, scores, budget))
            row[WHOLE].add(word_recall(wanted, self._whole), self._whole_tokens, 0, self._half,
                           word_recall(telling, self._whole))
            recall, used = oracle_recall(wanted, self._sentences, budget)
            row[ORACLE].add(recall, used, 0, self._half, float("nan"))  # the oracle maximises plain recall only

    def _engine_nodes(self, question: str, mode: RetrievalMode, budget: int) -> list[Node]:
        # The engine's own retrieval settings (hybrid and all), only the mode and budget changed.
        settings = replace(self._engine.settings.retrieval, mode=mode, budget=budget)
        return [hit.node for hit in self._engine.retrieve(self._key, question, settings)]

    def _add(self, outcomes: Outcomes, wanted: frozenset[str], telling: frozenset[str], nodes: Sequence[Node]) -> None:
        summary_tokens = sum(n.tokens for n in nodes if n.layer > 0)
        found = self._context_words(nodes)
        outcomes.add(word_recall(wanted, found), sum(n.tokens for n in nodes), summary_tokens, self._half,
                     word_recall(telling, found))


def run_set(
    engine: Engine, embedder: Embedder, counter: TokenCounter, data: DataSet, budgets: Sequence[int], built_with: str,
    pooled: bool = False,
) -> Results:
    """Every question of one set through every method at every budget (``pooled``: every
    document in one channel, see :func:`~bench.common.ensure_article_channels`)."""
    keys = ensure_article_channels(engine, data.articles, built_with, pooled)
    channels = {key: ChannelLeaves.read(engine, key) for key in dict.fromkeys(keys.values())}
    results: Results = {}
    for position, article in enumerate(data.articles):
        key = keys[article.index]
        bench = DocumentBench(engine, key, article, counter, half_of(position), channels[key])
        vectors = embedder.embed([q.text for q in article.questions])  # one batched call per document
        for question, vector in zip(article.questions, vectors, strict=True):
            bench.score(question, vector, budgets, results)
    return results
