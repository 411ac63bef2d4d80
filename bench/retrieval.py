"""Retrieval-quality benchmark: how much of the gold answer each method puts in the context.

One tree per document, each in its own channel (built, or reused from a
``--data-dir`` built before). Every question's text (QuALITY's without its
options) goes through every method under the same token budget, and the
context it returns is scored by **content-word recall** (``bench.measure``):
the share of the gold answer's distinct content words found in it. The gold
is the right option's text for QuALITY, the reference summary for patents and
reviews, the reference answer for earnings calls (``financial``) and Wikipedia
(``wikipedia``). Every set is run at 500 and 2,000 tokens.

Methods: the engine's three modes (``collapsed``, the default, as
``Engine.retrieve`` runs it; ``traversal``; ``leaves``); three flat baselines
over exactly the engine's leaf chunks and their stored embeddings, ranked and
then filled into the budget by the engine's own ``fill_budget`` (``bm25``,
``dense``, and ``bm25+dense`` fused by reciprocal rank, k = 60); and two
references: the ``whole document`` (the ceiling) and the ``oracle extract``,
the best recall an extract of the document's sentences reaches within the
budget, found greedily (see :func:`oracle_recall`).

Each method's mean recall comes with a 95 % bootstrap interval over questions,
and its difference to the best flat baseline with a paired bootstrap
interval; "summaries" is the share of the context's tokens taken by summary
nodes (layer > 0), averaged over questions.

Every constant of retrieval is fitted on the *fit half* of each set (its
documents at even positions) and checked on the *other half* (odd positions):
the summary table shows collapsed's margin over the best flat baseline on
both, so a choice that only wins where it was fitted shows. It also compares
collapsed with the figures kept in ``bench/baselines/retrieval.json`` (the
last commit's): a set and budget that lost more than one point is flagged.
``--save-baseline`` writes this run's figures there.

Run: ``python -m bench.retrieval [--sets quality,patents,reviews,financial,wikipedia]
[--budgets 500,2000] [--limit N] [--questions N] [--data-dir DIR] [--json FILE]
[--baseline FILE] [--save-baseline]``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
from sklearn.feature_extraction.text import CountVectorizer

from bench.common import (
    Stopwatch,
    data_dir,
    ensure_article_channels,
    heading,
    load_embedder,
    machine_info,
    machine_line,
    offline_engine,
    offline_identity,
    sets_parser,
    start_run,
    table,
    tree_nodes,
    verdict,
    write_json,
)
from bench.data import Article, DataSet, Question, load_sets, normalised
from bench.measure import (
    Interval,
    Paired,
    content_words,
    distinguishing_words,
    mean_interval,
    paired_difference,
    word_recall,
)
from raptor_engine import ChannelKey, Embedder, Engine, Hit, Node, RetrievalMode, TokenCounter
from raptor_engine.budget import fill_budget
from raptor_engine.chunking import sentences
from raptor_engine.retrieval import DEFAULT_TOP_K, RRF_K

BUDGETS = (500, 2000)
ALL_SETS = "quality,patents,reviews,financial,wikipedia"
BASELINE = Path(__file__).resolve().parent / "baselines" / "retrieval.json"
ALLOWED_LOSS = 0.01  # a set and budget may not lose more than one point of recall against the baseline
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
FIT, HELD = "fit half", "other half"


@dataclass(frozen=True, slots=True)
class Target:
    """One of issue 27's targets: on ``set_name`` at ``budget``, collapsed at least
    ``margin`` (recall, 0-1) above ``versus`` (the best flat baseline when None)."""

    set_name: str
    budget: int
    margin: float
    versus: str | None = None


TARGETS = (
    *(Target(name, 2000, 0.02) for name in ALL_SETS.split(",")),
    Target("patents", 500, 0.05),
    Target("reviews", 500, 0.03, "leaves"),
    Target("reviews", 2000, 0.03, "leaves"),
)


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


# -- one document --------------------------------------------------------------


@dataclass(slots=True)
class Outcomes:
    """Per-question results of one method at one budget, in the order asked."""

    recall: list[float] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    summary_share: list[float] = field(default_factory=list)
    half: list[str] = field(default_factory=list)  # FIT or HELD: the half of the set its document is in
    specific: list[float] = field(default_factory=list)  # recall of the gold's distinguishing words

    def add(self, recall: float, tokens: int, summary_tokens: int, half: str, specific: float) -> None:
        self.recall.append(recall)
        self.specific.append(specific)
        self.tokens.append(tokens)
        self.summary_share.append(summary_tokens / tokens if tokens else 0.0)
        self.half.append(half)


Results = dict[int, dict[str, Outcomes]]
"""Outcomes by budget, then by method."""


@dataclass(frozen=True, slots=True)
class ChannelLeaves:
    """A built channel's leaves in reading order, their stored embeddings and BM25 over them:
    what the flat baselines rank (read once per channel, shared by its documents)."""

    leaves: list[Node]
    vectors: np.ndarray
    bm25: BM25

    @classmethod
    def read(cls, engine: Engine, key: ChannelKey) -> ChannelLeaves:
        leaves = sorted(tree_nodes(engine, key, 0), key=lambda n: (n.source_ids, n.ordinal, n.id))
        state = engine.store.channel(key).live_state()
        if state is None:
            raise RuntimeError(f"{key} has no tree: build its channel first (ensure_article_channels)")
        stored = engine.store.channel(key).get_tree_embeddings(state.version, [n.id for n in leaves])
        return cls(leaves, np.vstack([stored[n.id] for n in leaves]), BM25([n.text for n in leaves]))


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
        bench = DocumentBench(engine, key, article, counter, FIT if position % 2 == 0 else HELD, channels[key])
        vectors = embedder.embed([q.text for q in article.questions])  # one batched call per document
        for question, vector in zip(article.questions, vectors, strict=True):
            bench.score(question, vector, budgets, results)
    return results


# -- figures -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MethodFigures:
    """One method's figures at one budget of one set (recall in 0-1); ``halves`` its mean
    recall on each half of the set's documents (:data:`FIT`, :data:`HELD`)."""

    recall: Interval
    versus_best_flat: Paired
    mean_tokens: float
    summary_share: float
    per_question: list[float]
    halves: dict[str, float]

    def as_dict(self) -> dict[str, object]:
        return {
            "recall": self.recall.as_dict(),
            "vs_best_flat": self.versus_best_flat.as_dict(),
            "mean_tokens": self.mean_tokens,
            "summary_share": self.summary_share,
            "halves": self.halves,
            "per_question_recall": [round(r, 4) for r in self.per_question],
        }


SetFigures = dict[int, tuple[str, dict[str, MethodFigures]]]
"""By budget: the best flat baseline's name and every method's figures."""


def scored(values: Sequence[float]) -> list[int]:
    """Indices of the questions that can be scored (their gold has content words)."""
    return [i for i, v in enumerate(values) if not np.isnan(v)]


def _mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if len(values) else float("nan")


MEASURES = ("recall", "specific")  # plain content-word recall, and recall of the distinguishing words


def figures(row: dict[str, Outcomes], measure: str = "recall") -> tuple[str, dict[str, MethodFigures]]:
    """The best flat baseline's name and every method's figures by ``measure`` (one of
    :data:`MEASURES`), over the questions it can score."""
    keep = scored(getattr(row[WHOLE], measure))
    halves = [row[WHOLE].half[i] for i in keep]

    def recalls(name: str) -> list[float]:
        return [getattr(row[name], measure)[i] for i in keep]

    best = max(FLAT, key=lambda name: (float(np.mean(recalls(name))) if keep else 0.0, -FLAT.index(name)))
    result = {}
    for name, outcomes in row.items():
        values = recalls(name)
        result[name] = MethodFigures(
            recall=mean_interval(values),
            versus_best_flat=paired_difference(values, recalls(best)),
            mean_tokens=_mean([outcomes.tokens[i] for i in keep]),
            summary_share=_mean([outcomes.summary_share[i] for i in keep]),
            per_question=values,
            halves={half: _mean([v for v, h in zip(values, halves) if h == half]) for half in (FIT, HELD)},
        )
    return best, result


def percent(value: float) -> str:
    return f"{100 * value:.1f}"


def points(value: float) -> str:
    return f"{100 * value:+.1f}"


def recall_table(best: str, methods: dict[str, MethodFigures]) -> str:
    rows = []
    for name, f in methods.items():
        paired = f.versus_best_flat
        versus = "-" if name == best else (
            f"{100 * paired.difference.mean:+.1f} [{100 * paired.difference.low:+.1f}, "
            f"{100 * paired.difference.high:+.1f}]")
        ahead = "-" if name == best else f"{paired.a_ahead}/{paired.b_ahead}"
        rows.append([name, percent(f.recall.mean), f"{percent(f.recall.low)}-{percent(f.recall.high)}", versus, ahead,
                     f"{f.mean_tokens:.0f}", f"{percent(f.summary_share)} %"])
    headers = ["method", "recall %", "95 % CI", f"vs {best} (points, 95 % CI)", "ahead/behind", "mean tokens",
               "summaries"]
    return table(headers, rows)


SUMMARY_METHODS = ("collapsed", "leaves", *FLAT, CHANCE, WHOLE)
PER_QUESTION_BEST = "flat, best per question"


def per_question_best(methods: dict[str, MethodFigures]) -> float:
    """The mean recall of choosing, for each question, the flat baseline that found most of
    its gold: a ceiling for any way of choosing or fusing those rankings question by question.
    It tells how much room a set leaves a better ranking of the same chunks (issue 27's
    detail sets: little, at 2,000 tokens)."""
    return float(np.mean(np.max([methods[name].per_question for name in FLAT], axis=0)))


def summary_table(all_figures: dict[str, SetFigures], baseline: dict[str, float]) -> str:
    """One row per set and budget: each method's recall, collapsed's margin over the best flat
    baseline (whole set, fit half, other half), and its change against ``baseline``."""
    rows = []
    for set_name, by_budget in all_figures.items():
        for budget, (best, methods) in sorted(by_budget.items()):
            collapsed, flat = methods["collapsed"], methods[best]
            margins = [collapsed.halves[half] - flat.halves[half] for half in (FIT, HELD)]
            was = baseline.get(f"{set_name}@{budget}")
            change = "-" if was is None else points(collapsed.recall.mean - was)
            rows.append([f"{set_name}@{budget}", *(percent(methods[m].recall.mean) for m in SUMMARY_METHODS),
                         percent(per_question_best(methods)),
                         f"{points(collapsed.recall.mean - flat.recall.mean)} ({best})",
                         *(points(m) for m in margins), change])
    headers = ["set@budget", *SUMMARY_METHODS, PER_QUESTION_BEST, "collapsed vs best flat", FIT, HELD,
               "vs baseline"]
    return table(headers, rows)


def check_targets(all_figures: dict[str, SetFigures]) -> list[dict[str, object]]:
    """Each target's verdict, or ``None`` as its ``pass`` when its set and budget were not run."""
    checked = []
    for target in TARGETS:
        entry: dict[str, object] = {"set": target.set_name, "budget": target.budget, "margin": target.margin,
                                    "versus": target.versus or "best flat", "pass": None}
        if target.budget in all_figures.get(target.set_name, {}):
            best, methods = all_figures[target.set_name][target.budget]
            other = target.versus or best
            collapsed, reference = methods["collapsed"], methods[other]
            passed = collapsed.recall.mean >= reference.recall.mean + target.margin - 1e-12
            entry.update({"collapsed": collapsed.recall.mean, "reference": other,
                          "reference_recall": reference.recall.mean, "pass": passed})
        checked.append(entry)
    return checked


def target_line(entry: dict[str, object]) -> str:
    name = f"{entry['set']}@{entry['budget']}"
    margin = float(entry["margin"])  # type: ignore[arg-type]
    wanted = f"collapsed >= {entry['versus']} + {100 * margin:.0f} points"
    if entry["pass"] is None:
        return f"{name}: {wanted}: not run"
    got = (f"collapsed {percent(entry['collapsed'])} vs {entry['reference']} "  # type: ignore[arg-type]
           f"{percent(entry['reference_recall'])}")  # type: ignore[arg-type]
    return f"{name}: {wanted}: {got}: {verdict(bool(entry['pass']))}"


def collapsed_figures(all_figures: dict[str, SetFigures]) -> dict[str, float]:
    """Collapsed's mean recall by ``set@budget``: what a baseline file keeps."""
    return {f"{name}@{budget}": methods["collapsed"].recall.mean
            for name, by_budget in all_figures.items() for budget, (_, methods) in by_budget.items()}


def read_baseline(path: Path, measure: str = "recall") -> dict[str, float]:
    """Collapsed's recall (or distinguishing-word recall) by ``set@budget`` from a baseline file;
    empty when there is none."""
    if not path.exists():
        return {}
    kept = json.loads(path.read_text(encoding="utf-8")).get("collapsed" if measure == "recall" else measure, {})
    return {key: float(value) for key, value in kept.items()}


def regressions(current: dict[str, float], baseline: dict[str, float]) -> list[str]:
    """The ``set@budget`` whose collapsed recall fell more than :data:`ALLOWED_LOSS` below the baseline."""
    return [key for key, value in current.items() if key in baseline and value < baseline[key] - ALLOWED_LOSS]


# -- command line --------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = sets_parser("bench.retrieval", __doc__.split("\n\n")[0], ALL_SETS)
    parser.add_argument("--budgets", type=_budgets, default=BUDGETS, metavar="N,M",
                        help="token budgets for every set (default: 500,2000)")
    parser.add_argument("--baseline", type=Path, default=BASELINE, metavar="FILE",
                        help=f"the figures to compare collapsed with (default {BASELINE})")
    parser.add_argument("--pooled", action="store_true",
                        help="every document of a set in one channel (a budget is then a small part of it); "
                             "compared with the baseline's pooled figures")
    parser.add_argument("--save-baseline", action="store_true",
                        help="write this run's collapsed figures to the --baseline file (merged with what it has)")
    return parser


def _budgets(text: str) -> tuple[int, ...]:
    try:
        budgets = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"budgets are whole numbers of tokens, not {text!r}") from error
    if not budgets or min(budgets) <= 0:
        raise argparse.ArgumentTypeError(f"give one or more positive budgets, not {text!r}")
    return budgets


MEASURE_NOTE = (
    "recall = share of the gold answer's distinct content words (lower-cased [a-z0-9]+ tokens, 2+ characters, "
    "not stop words) found in the context; 95 % CI: bootstrap over questions; 'vs' column: paired bootstrap of "
    "per-question differences to the best flat baseline; ahead/behind: questions where the method scores "
    "higher/lower than it; summaries: share of the context's tokens from summary nodes; chance: leaves drawn at "
    "random into the budget. The oracle extract "
    "is a greedy budgeted max-coverage of the gold words by the document's sentences (a lower bound of the best "
    "extract: within (1-1/e)/2 in theory, near it in practice). Distinguishing-word recall: the same over the "
    "gold's words that no wrong option uses (multiple choice: QuALITY; the plain recall elsewhere). Fit half: the documents at even positions of "
    "each set (where constants are fitted); other half: odd positions. Flat, best per question: the mean, over "
    "questions, of the best flat baseline's recall on each (a ceiling for choosing among those rankings)."
)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the retrieval-quality benchmark; returns the process exit code."""
    args = build_parser().parse_args(argv)
    sets = load_sets(args.sets, args.sources, args.limit, args.questions)
    start_info = start_run()
    print("One tree per document, each in its own channel (the paper builds one tree per document).")
    embedder = load_embedder()
    counter = embedder.token_counter()
    all_figures: dict[str, SetFigures] = {}
    specific: dict[str, SetFigures] = {}
    payload_sets: dict[str, object] = {}
    with data_dir(args.data_dir, "bench-retrieval-") as directory, Stopwatch() as run:
        engine = offline_engine(directory, embedder, counter)
        built_with = offline_identity(engine, counter)
        for data in sets:
            with Stopwatch() as watch:
                results = run_set(engine, embedder, counter, data, args.budgets, built_with, args.pooled)
            label = f"{data.name} pooled" if args.pooled else data.name  # pooled figures are kept apart
            all_figures[label] = {budget: figures(results[budget]) for budget in args.budgets if budget in results}
            specific[label] = {budget: figures(results[budget], "specific") for budget in args.budgets if budget in results}
            payload_sets[label] = set_payload(data, all_figures[label], watch.seconds) | {
                "specific": set_payload(data, specific[label], watch.seconds)["budgets"]}
            print_set(data, all_figures[label], watch.seconds)
    print(f"\nrun took {run.seconds:.1f} s; trees built with {built_with}")
    print(MEASURE_NOTE)
    baseline = read_baseline(args.baseline)
    current = collapsed_figures(all_figures)
    print(heading("Every set and budget (recall %; margins in points)"))
    print(summary_table(all_figures, baseline))
    lost = regressions(current, baseline)
    print(f"\nagainst {args.baseline}: " + (f"LOST more than 1 point on {', '.join(lost)}" if lost else
                                          "no set and budget lost more than 1 point" if baseline else "no baseline"))
    print(heading("Every set and budget, distinguishing-word recall (%; margins in points)"))
    print(summary_table(specific, read_baseline(args.baseline, "specific")))
    checked = check_targets(all_figures)
    checked_specific = check_targets(specific)
    print(heading("Targets (issue 27), plain recall"))
    print("\n".join(target_line(entry) for entry in checked))
    print(heading("The same targets, distinguishing-word recall"))
    print("\n".join(target_line(entry) for entry in checked_specific))
    print("\n" + machine_line("machine at end"))
    if args.save_baseline:
        kept = {"built_with": built_with, "collapsed": read_baseline(args.baseline) | current,
                "specific": read_baseline(args.baseline, "specific") | collapsed_figures(specific)}
        args.baseline.parent.mkdir(parents=True, exist_ok=True)
        args.baseline.write_text(json.dumps(kept, indent=1) + "\n", encoding="utf-8")
    write_json(args.json, {
        "benchmark": "retrieval",
        "measure": MEASURE_NOTE,
        "machine_start": start_info,
        "machine_end": machine_info(),
        "built_with": built_with,
        "run_s": run.seconds,
        "sets": payload_sets,
        "summary": current,
        "baseline": baseline,
        "lost_against_baseline": lost,
        "specific_summary": collapsed_figures(specific),
        "targets": checked,
        "targets_specific": checked_specific,
    })
    return 0


def print_set(data: DataSet, by_budget: SetFigures, seconds: float) -> None:
    scorable = next(iter(by_budget.values()))[1]["collapsed"].recall.n if by_budget else 0
    dropped = f"; duplicate lines dropped: {list(data.duplicates)}" if data.duplicates else ""
    print(heading(f"{data.name}: {len(data.articles)} documents, {data.questions} questions "
                  f"({scorable} with gold content words){dropped}; {seconds:.1f} s"))
    for budget, (best, methods) in by_budget.items():
        print(f"\n{data.name} @ {budget} tokens (best flat baseline: {best})")
        print(recall_table(best, methods))


def set_payload(data: DataSet, by_budget: SetFigures, seconds: float) -> dict[str, object]:
    return {
        "file": str(data.path),
        "documents": len(data.articles),
        "questions": data.questions,
        "duplicate_lines_dropped": list(data.duplicates),
        "seconds": seconds,
        "budgets": {
            str(budget): {"best_flat": best, "methods": {name: f.as_dict() for name, f in methods.items()}}
            for budget, (best, methods) in by_budget.items()
        },
    }


if __name__ == "__main__":
    sys.exit(main())
