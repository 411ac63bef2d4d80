"""Retrieval-quality benchmark: RAPTOR's modes against flat BM25 and dense retrieval.

One tree per article, in its own channel (the paper: "We build one tree per
document"). Each question's text, without its options, is sent to
``Engine.retrieve`` in the collapsed, traversal and leaves modes, and to two
flat baselines over exactly the engine's leaf chunks (the article cut by
``chunk_text`` at the engine's 100 tokens): Okapi BM25 and dense cosine
similarity. Every method gets the same token budget, filled best first by the
engine's own ``fill_budget``.

Scoring without a reader model: a question counts as right when its right
option is the one best supported by the retrieved nodes, i.e. the option whose
embedding has the highest cosine similarity to any retrieved node's embedding
(same embedding model). References: the same rule over every leaf of the
article ("whole article"), and random choice (25 %).

Target: collapsed-tree accuracy ahead of both BM25 and dense.

Run: ``python -m bench.retrieval [--articles N] [--budget 2000] [--data-dir DIR] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
from sklearn.feature_extraction.text import CountVectorizer

from bench.common import (
    Article,
    Question,
    Stopwatch,
    add_articles_argument,
    add_data_dir_argument,
    base_parser,
    data_dir,
    ensure_article_channels,
    heading,
    load_articles,
    load_embedder,
    machine_info,
    machine_line,
    start_run,
    normalised,
    offline_engine,
    table,
    tree_nodes,
    verdict,
    write_json,
)
from raptor_engine.chunking import chunk_text
from raptor_engine.engine import Engine
from raptor_engine.protocols import Embedder, TokenCounter
from raptor_engine.retrieval import (
    DEFAULT_BUDGET,
    DEFAULT_TOP_K,
    RetrievalSettings,
    fill_budget,
)
from raptor_engine.types import ChannelKey, Hit, Node, RetrievalMode

RANDOM_ACCURACY = 0.25
ENGINE_METHODS = {
    "collapsed": RetrievalSettings(mode=RetrievalMode.COLLAPSED),
    "collapsed, dense only": RetrievalSettings(mode=RetrievalMode.COLLAPSED, hybrid=False),
    "traversal": RetrievalSettings(mode=RetrievalMode.TRAVERSAL),
    "leaves": RetrievalSettings(mode=RetrievalMode.LEAVES),
}
BASELINES = ("bm25", "dense")
REFERENCE = "whole article"

Retriever = Callable[[Question], list[Node]]
"""Returns the nodes a method retrieves for a question."""


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


# -- embeddings ----------------------------------------------------------------


class EmbeddingCache:
    """Embeddings by text, so each distinct text is embedded once."""

    def __init__(self, embedder: Embedder) -> None:
        self._embedder = embedder
        self._vectors: dict[str, np.ndarray] = {}

    def vectors(self, texts: Sequence[str]) -> np.ndarray:
        """One row per text, in order; new texts are embedded together in one call."""
        missing = list(dict.fromkeys(t for t in texts if t not in self._vectors))
        if missing:
            self._vectors.update(zip(missing, self._embedder.embed(missing), strict=True))
        if not texts:
            return np.zeros((0, self._embedder.dimension), dtype=np.float32)
        return np.vstack([self._vectors[t] for t in texts])


def best_supported(options: np.ndarray, nodes: np.ndarray) -> int:
    """The option whose vector is most similar to any node's vector (-1 when no node)."""
    if len(nodes) == 0:
        return -1
    return int(np.argmax((options @ nodes.T).max(axis=1)))


# -- the methods ---------------------------------------------------------------


def chunk_nodes(article: Article, counter: TokenCounter, chunk_tokens: int) -> list[Node]:
    """The article cut exactly as the engine cuts it (same counter and size), as leaves in reading order."""
    chunks = chunk_text(normalised(article.text), "bench", counter, chunk_tokens)
    return [Node(id=f"c{c.ordinal:05d}", layer=0, text=c.text, tokens=c.tokens, ordinal=c.ordinal) for c in chunks]


def ranked(nodes: Sequence[Node], scores: np.ndarray, budget: int) -> list[Node]:
    """The best-scoring nodes that fit ``budget``, filled as the engine fills it."""
    hits = [Hit(node, float(score)) for node, score in zip(nodes, scores, strict=True)]
    hits.sort(key=lambda hit: -hit.score)  # fill_budget takes hits in rank order
    return [hit.node for hit in fill_budget(hits, budget, DEFAULT_TOP_K)]


def article_methods(
    engine: Engine, key: ChannelKey, leaves: list[Node], cache: EmbeddingCache, budget: int
) -> dict[str, Retriever]:
    """Every method's retriever for one article, by name (engine modes, baselines, reference)."""
    bm25 = BM25([node.text for node in leaves])
    leaf_vectors = cache.vectors([node.text for node in leaves])

    def engine_method(base: RetrievalSettings) -> Retriever:
        settings = replace(base, budget=budget)
        return lambda q: [hit.node for hit in engine.retrieve(key, q.text, settings)]

    methods: dict[str, Retriever] = {name: engine_method(s) for name, s in ENGINE_METHODS.items()}
    methods["bm25"] = lambda q: ranked(leaves, bm25.scores(q.text), budget)
    methods["dense"] = lambda q: ranked(leaves, leaf_vectors @ cache.vectors([q.text])[0], budget)
    methods[REFERENCE] = lambda q: leaves
    return methods


# -- scoring -------------------------------------------------------------------


@dataclass(slots=True)
class Tally:
    """What one method retrieved and how often it was right."""

    right: int = 0
    questions: int = 0
    nodes: int = 0
    tokens: int = 0
    summaries: int = 0
    per_article: dict[int, list[int]] = field(default_factory=dict)  # article -> [right, questions]
    outcomes: list[bool] = field(default_factory=list)  # one per question, in the order asked

    def add(self, article: int, correct: bool, nodes: Sequence[Node]) -> None:
        self.outcomes.append(correct)
        self.right += int(correct)
        self.questions += 1
        self.nodes += len(nodes)
        self.tokens += sum(node.tokens for node in nodes)
        self.summaries += sum(1 for node in nodes if node.layer > 0)
        counts = self.per_article.setdefault(article, [0, 0])
        counts[0] += int(correct)
        counts[1] += 1

    @property
    def accuracy(self) -> float:
        return self.right / self.questions if self.questions else float("nan")

    def figures(self) -> dict[str, float]:
        n = max(self.questions, 1)
        low, high = wilson_interval(self.right, self.questions)
        return {
            "accuracy": self.accuracy,
            "ci95_low": low,
            "ci95_high": high,
            "right": self.right,
            "questions": self.questions,
            "mean_nodes": self.nodes / n,
            "mean_tokens": self.tokens / n,
            "summary_share": self.summaries / self.nodes if self.nodes else 0.0,
        }


def wilson_interval(right: int, total: int, z: float = 1.96) -> tuple[float, float]:
    """The 95 % Wilson score interval of a proportion ``right / total``."""
    if total == 0:
        return float("nan"), float("nan")
    p = right / total
    centre = (p + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    return centre - half, centre + half


def paired(ours: Tally, theirs: Tally) -> tuple[int, int, float]:
    """Questions only ``ours`` got right, only ``theirs`` got right, and the two-sided sign-test p-value."""
    wins = sum(1 for a, b in zip(ours.outcomes, theirs.outcomes, strict=True) if a and not b)
    losses = sum(1 for a, b in zip(ours.outcomes, theirs.outcomes, strict=True) if b and not a)
    n = wins + losses
    tail = sum(math.comb(n, i) for i in range(min(wins, losses) + 1)) / 2**n if n else 1.0
    return wins, losses, min(1.0, 2 * tail)


def prefetch(engine: Engine, key: ChannelKey, article: Article, cache: EmbeddingCache) -> None:
    """Embeds every text the scoring of ``article`` can need in one batched call.

    Many small calls cost far more than one large one (and much more again on
    a busy 2-core machine), so the tree's nodes of every layer, the questions
    and their options go through the embedder together.
    """
    layers = engine.stats(key).nodes_per_layer
    texts = [node.text for layer in layers for node in tree_nodes(engine, key, layer)]
    texts += [question.text for question in article.questions]
    texts += [option for question in article.questions for option in question.options]
    cache.vectors(texts)


def score_article(
    article: Article, methods: dict[str, Retriever], cache: EmbeddingCache, tallies: dict[str, Tally]
) -> None:
    """Adds every question of ``article`` to every method's tally."""
    for question in article.questions:
        options = cache.vectors(list(question.options))
        for name, retrieve in methods.items():
            nodes = retrieve(question)
            chosen = best_supported(options, cache.vectors([node.text for node in nodes]))
            tallies[name].add(article.index, chosen == question.answer, nodes)


def leaves_match(engine: Engine, key: ChannelKey, leaves: Sequence[Node]) -> bool:
    """Whether our chunks are exactly the leaves of the engine's tree for that article."""
    return sorted(n.text for n in tree_nodes(engine, key, 0)) == sorted(n.text for n in leaves)


# -- report --------------------------------------------------------------------


def accuracy_table(tallies: dict[str, Tally]) -> str:
    rows = []
    for name, tally in tallies.items():
        f = tally.figures()
        interval = f"{100 * f['ci95_low']:.1f}-{100 * f['ci95_high']:.1f} %"
        rows.append([name, f"{100 * f['accuracy']:.1f} %", interval, f"{tally.right}/{tally.questions}",
                     f["mean_nodes"], f["mean_tokens"], f"{100 * f['summary_share']:.1f} %"])
    rows.append(["random", f"{100 * RANDOM_ACCURACY:.1f} %", "-", "-", "-", "-", "-"])
    headers = ["method", "accuracy", "95 % CI", "right", "mean nodes", "mean tokens", "summaries"]
    return table(headers, rows)


def per_article_table(articles: Sequence[Article], tallies: dict[str, Tally]) -> str:
    rows = []
    for article in articles:
        cells = [f"{t.per_article[article.index][0]}/{t.per_article[article.index][1]}" for t in tallies.values()]
        rows.append([article.title[:32], *cells])
    return table(["article", *tallies], rows)


def target_lines(tallies: dict[str, Tally]) -> tuple[bool, list[str]]:
    """PASS/FAIL of collapsed ahead of both baselines, with the paired comparison behind it."""
    collapsed = tallies[RetrievalMode.COLLAPSED.value]
    passed = all(collapsed.accuracy > tallies[name].accuracy for name in BASELINES)
    others = ", ".join(f"{name} {100 * tallies[name].accuracy:.1f} %" for name in BASELINES)
    lines = [f"collapsed {100 * collapsed.accuracy:.1f} % vs {others} (target: ahead of both): {verdict(passed)}"]
    for name in BASELINES:
        wins, losses, p_value = paired(collapsed, tallies[name])
        lines.append(f"  collapsed vs {name}: right only with collapsed {wins}, only with {name} {losses} "
                     f"(paired sign test p = {p_value:.2f})")
    return passed, lines


def build_parser() -> argparse.ArgumentParser:
    parser = base_parser("bench.retrieval", __doc__.split("\n\n")[0])
    add_articles_argument(parser)
    add_data_dir_argument(parser)
    parser.add_argument(
        "--budget", type=int, default=DEFAULT_BUDGET,
        help=f"token budget of every method (default {DEFAULT_BUDGET})",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the retrieval-quality benchmark; returns the process exit code."""
    args = build_parser().parse_args(argv)
    articles = load_articles(args.data, args.articles)
    start_info = start_run()
    print("One tree per article, each in its own channel (the paper builds one tree per document).")
    embedder = load_embedder()
    cache = EmbeddingCache(embedder)
    tallies = {name: Tally() for name in list(ENGINE_METHODS) + list(BASELINES) + [REFERENCE]}
    mismatched: list[int] = []
    with data_dir(args.data_dir, "bench-retrieval-") as directory, Stopwatch() as run:
        counter = embedder.token_counter()
        engine = offline_engine(directory, embedder, counter)
        keys = ensure_article_channels(engine, articles)
        for article in articles:
            leaves = chunk_nodes(article, counter, engine.settings.chunk_tokens)
            if not leaves_match(engine, keys[article.index], leaves):
                mismatched.append(article.index)
            prefetch(engine, keys[article.index], article, cache)
            methods = article_methods(engine, keys[article.index], leaves, cache, args.budget)
            score_article(article, methods, cache, tallies)
    questions = sum(len(a.questions) for a in articles)
    print(f"\n{len(articles)} articles, {questions} questions; budget {args.budget} tokens per method; "
          f"run took {run.seconds:.1f} s")
    print("baseline chunks identical to the engine's leaves: "
          + ("yes" if not mismatched else f"NO for articles {mismatched}"))
    print(heading("Accuracy (right option = best supported by the retrieved nodes)"))
    print(accuracy_table(tallies))
    print(f"'{REFERENCE}' scores the options against every leaf of the article (the reference the brief calls "
          "the upper bound; with this scorer more text can also add distractors).")
    print(heading("Right answers per article"))
    print(per_article_table(articles, tallies))
    passed, lines = target_lines(tallies)
    print(heading("Target"))
    print("\n".join(lines))
    print("\n" + machine_line("machine at end"))
    write_json(args.json, {
        "benchmark": "retrieval",
        "data": str(args.data),
        "machine_start": start_info,
        "machine_end": machine_info(),
        "articles": len(articles),
        "questions": questions,
        "budget": args.budget,
        "leaves_identical": not mismatched,
        "methods": {name: tally.figures() for name, tally in tallies.items()},
        "paired_vs_collapsed": {
            name: dict(zip(("collapsed_only", "baseline_only", "p_value"),
                           paired(tallies["collapsed"], tallies[name]), strict=True))
            for name in BASELINES
        },
        "per_article": {name: {str(k): v for k, v in t.per_article.items()} for name, t in tallies.items()},
        "random_accuracy": RANDOM_ACCURACY,
        "target": {"collapsed_ahead_of": list(BASELINES), "pass": passed},
    })
    return 0


if __name__ == "__main__":
    sys.exit(main())
