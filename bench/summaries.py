"""Summary benchmark: the coverage selector against the old centrality selector, offline.

Trees are built by the engine (embedded Chroma in a temporary directory, the
packaged model, UMAP and Gaussian mixtures as in production) for a few
documents of L-Eval's patent and hotel-review summarisation sets, once with
each selector. Each layer-1 summary node's children are one real cluster; both
selectors summarise the same clusters, so their figures compare like for like:

- **member recall**: the share of the cluster's unique content words that the
  summary contains (content words as in ``shared/data/README.md``: lowercase
  alphanumeric tokens, minus scikit-learn's English stop list, longer than one
  character), and the same weighted by how many members use each word;
- **members covered**: the share of members with at least one sentence in the summary;
- **time per summary** (``summarize_now`` alone, in this process).

What users see is the top of the tree, so for each patent the benchmark also
takes the summaries from the top down (root first, then each layer below,
widest nodes first) up to 500 tokens and measures the recall of the patent's
gold summary (``outputs[0]``) content words: once with layers 2 and up only,
once with layer-1 summaries filling what is left.

Run with ``nice -n 10 python -m bench.summaries [--patents N] [--reviews N] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer

from bench.common import (
    Stopwatch,
    heading,
    latency_summary,
    load_embedder,
    machine_info,
    machine_line,
    start_run,
    table,
    tree_nodes,
    warm_up_clustering,
    write_json,
)
from bench.measure import content_words
from raptor_engine import (
    ChannelKey,
    ChromaStore,
    Document,
    Engine,
    EngineSettings,
    ExtractiveAnswerer,
    Node,
    TokenCounter,
)
from raptor_engine.chunking import sentences as sentences_of
from raptor_engine.summarizing import DEFAULT_SUMMARY_TOKENS, ExtractiveSummarizer
from raptor_engine.vector_cache import VectorCache

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
PATENTS = DATA / "leval-patent-summ.jsonl"
REVIEWS = DATA / "leval-review-summ.jsonl"
TOP_TOKENS = 500
EMBEDDED_TEXTS = 1_000_000  # kept by the embedder shared by both builds: more than they ever embed


# -- the old selector, kept here as the baseline ------------------------------


class CentralitySummarizer:
    """The selector before issue 12: sentences closest to the cluster's TF-IDF centroid, in
    rank order while they fit the budget (always at least one), given in reading order."""

    def __init__(self, counter: TokenCounter, max_tokens: int = DEFAULT_SUMMARY_TOKENS) -> None:
        self._counter = counter
        self._max_tokens = max_tokens

    @property
    def identity(self) -> str:
        return f"extractive-centroid-v1/{self._max_tokens}"

    async def summarize(self, texts: Sequence[str]) -> str:
        return await asyncio.to_thread(self.summarize_now, texts)

    def summarize_now(self, texts: Sequence[str]) -> str:
        sentences = list(dict.fromkeys(s for t in texts for s in sentences_of(t) if s))
        if len(sentences) <= 1:
            return sentences[0] if sentences else ""
        counts = self._counter.count_many(sentences)
        chosen: list[int] = []
        used = 0
        for index in _rank_by_centrality(sentences):
            if chosen and used + counts[index] > self._max_tokens:
                continue
            chosen.append(index)
            used += counts[index]
            if used >= self._max_tokens * 0.9:
                break
        return " ".join(sentences[i] for i in sorted(chosen))


def _rank_by_centrality(sentences: list[str]) -> list[int]:
    """Sentence indices, most central first (cosine to the TF-IDF centroid)."""
    try:
        matrix = TfidfVectorizer(sublinear_tf=True, stop_words="english").fit_transform(sentences)
    except ValueError:
        return list(range(len(sentences)))
    centroid = np.asarray(matrix.mean(axis=0)).ravel()
    norm = np.linalg.norm(centroid)
    if norm == 0:
        return list(range(len(sentences)))
    scores = matrix @ (centroid / norm)
    return [int(i) for i in np.argsort(-np.asarray(scores).ravel(), kind="stable")]


# -- measures -----------------------------------------------------------------


def member_recall(summary: str, members: Sequence[str]) -> tuple[float, float]:
    """(plain, weighted) share of the members' unique content words found in ``summary``;
    the weighted share counts each word by the number of members using it."""
    frequency = Counter(w for m in members for w in content_words(m))
    if not frequency:
        return 1.0, 1.0
    found = content_words(summary) & frequency.keys()
    plain = len(found) / len(frequency)
    weighted = sum(frequency[w] for w in found) / sum(frequency.values())
    return plain, weighted


def members_covered(summary: str, members: Sequence[str]) -> float:
    """The share of members of which at least one sentence appears in ``summary``."""
    folded = [" ".join(m.split()) for m in members]
    picked = sentences_of(summary)
    return sum(1 for m in folded if any(s in m for s in picked)) / len(members)


def gold_recall(text: str, gold: str) -> float:
    """The share of the gold summary's content words found in ``text``."""
    wanted = content_words(gold)
    return len(content_words(text) & wanted) / len(wanted) if wanted else 1.0


def top_down_text(layers: dict[int, list[Node]], lowest: int, budget: int, counter: TokenCounter) -> str:
    """Summaries from the top layer down to ``lowest``, whole while they fit ``budget`` tokens,
    the next one cut at a word boundary to fill what is left."""
    parts: list[str] = []
    left = budget
    for layer in sorted((k for k in layers if k >= lowest), reverse=True):
        for node in layers[layer]:
            if left <= 0:
                return " ".join(parts)
            if node.tokens <= left:
                parts.append(node.text)
                left -= node.tokens
                continue
            words = node.text.split()
            kept = 0
            for tokens in counter.count_many(words):
                if tokens > left:
                    break
                left -= tokens
                kept += 1
            parts.append(" ".join(words[:kept]))
            return " ".join(parts)
    return " ".join(parts)


# -- documents and trees ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Doc:
    """One benchmark document: where it comes from, its text, and its gold summary ('' if none)."""

    name: str
    text: str
    gold: str


def load_docs(path: Path, prefix: str, limit: int, with_gold: bool) -> list[Doc]:
    """The first ``limit`` distinct documents of an L-Eval file (the files repeat some)."""
    docs: list[Doc] = []
    seen: set[str] = set()
    with path.open(encoding="utf-8") as lines:
        for index, line in enumerate(lines):
            if len(docs) >= limit:
                break
            record = json.loads(line)
            if record["input"] in seen:
                continue
            seen.add(record["input"])
            gold = record["outputs"][0] if with_gold else ""
            docs.append(Doc(f"{prefix}-{index:02d}", record["input"], gold))
    return docs


def build_tree(engine: Engine, doc: Doc) -> dict[int, list[Node]]:
    """Builds one document's tree in its own channel; its nodes by layer."""
    key = ChannelKey("bench", "summaries", doc.name)
    engine.ingest(key, Document(doc.text, doc.name, link=doc.name, added_at="2024-01-01T00:00:00+00:00"))
    asyncio.run(engine.rebuild(key))
    state = engine.store.channel(key).live_state()
    assert state is not None
    return {layer: tree_nodes(engine, key, layer) for layer in state.nodes_per_layer}


def layer_one_clusters(layers: dict[int, list[Node]]) -> list[list[str]]:
    """The member texts of every layer-1 summary, in the tree's order of each node's children."""
    leaves = {n.id: n.text for n in layers.get(0, [])}
    return [[leaves[c] for c in node.children] for node in layers.get(1, [])]


# -- the run ------------------------------------------------------------------


@dataclass(slots=True)
class Tally:
    """One selector's figures over every cluster and every patent."""

    recall: list[float] = field(default_factory=list)
    weighted: list[float] = field(default_factory=list)
    covered: list[float] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    top_upper: list[float] = field(default_factory=list)
    top_all: list[float] = field(default_factory=list)

    def figures(self) -> dict[str, float]:
        times = latency_summary(self.seconds)
        return {
            "clusters": len(self.recall),
            "member_recall": float(np.mean(self.recall)),
            "member_recall_weighted": float(np.mean(self.weighted)),
            "members_covered": float(np.mean(self.covered)),
            "summary_tokens_mean": float(np.mean(self.tokens)),
            "ms_per_summary_mean": times["mean_ms"],
            "ms_per_summary_p95": times["p95_ms"],
            "gold_recall_top_layers_2_up": float(np.mean(self.top_upper)) if self.top_upper else float("nan"),
            "gold_recall_top_down_summaries": float(np.mean(self.top_all)) if self.top_all else float("nan"),
        }


def score_clusters(clusters: list[list[str]], summarizer: Any, counter: TokenCounter, tally: Tally) -> None:
    """Summarises each cluster (timed) and adds its measures to ``tally``."""
    for members in clusters:
        with Stopwatch() as watch:
            summary = summarizer.summarize_now(members)
        plain, weighted = member_recall(summary, members)
        tally.seconds.append(watch.seconds)
        tally.recall.append(plain)
        tally.weighted.append(weighted)
        tally.covered.append(members_covered(summary, members))
        tally.tokens.append(counter.count(summary))


def run(patents: int, reviews: int) -> dict[str, Any]:
    """Builds the trees, scores both selectors, prints the tables; returns the figures."""
    model = load_embedder()
    # Both builds embed the same leaves: each distinct text once (far fewer than this many).
    embedder, counter = VectorCache(model, EMBEDDED_TEXTS), model.token_counter()
    warm_up_clustering()
    selectors: dict[str, Any] = {
        "centrality (old)": CentralitySummarizer(counter),
        "coverage (new)": ExtractiveSummarizer(counter),
    }
    docs = load_docs(PATENTS, "patent", patents, True) + load_docs(REVIEWS, "review", reviews, False)
    tallies = {name: Tally() for name in selectors}
    per_doc: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-summaries-") as temporary:
        engines = {
            name: Engine(ChromaStore.embedded(Path(temporary) / str(i)), embedder, counter, selector,
                         ExtractiveAnswerer(embedder), EngineSettings())
            for i, (name, selector) in enumerate(selectors.items())
        }
        for doc in docs:
            trees = {name: build_tree(engines[name], doc) for name in selectors}
            clusters = layer_one_clusters(trees["coverage (new)"])
            same = sorted(map(sorted, clusters)) == sorted(map(sorted, layer_one_clusters(trees["centrality (old)"])))
            row: dict[str, Any] = {"doc": doc.name, "leaves": len(trees["coverage (new)"].get(0, [])),
                                   "clusters": len(clusters), "same_clusters": same}
            for name, selector in selectors.items():
                score_clusters(clusters, selector, counter, tallies[name])
                if doc.gold:
                    upper = gold_recall(top_down_text(trees[name], 2, TOP_TOKENS, counter), doc.gold)
                    every = gold_recall(top_down_text(trees[name], 1, TOP_TOKENS, counter), doc.gold)
                    tallies[name].top_upper.append(upper)
                    tallies[name].top_all.append(every)
                    row[name] = {"top_layers_2_up": upper, "top_down_summaries": every,
                                 "layers": {k: len(v) for k, v in sorted(trees[name].items())}}
            per_doc.append(row)
            print(f"  {doc.name}: {row['leaves']} leaves, {row['clusters']} layer-1 clusters"
                  f"{'' if same else ' (the two builds clustered layer 1 differently)'}", flush=True)
    figures = {name: tally.figures() for name, tally in tallies.items()}
    print_tables(figures)
    return {"selectors": figures, "documents": per_doc}


def print_tables(figures: dict[str, dict[str, float]]) -> None:
    print(heading("Layer-1 summaries: the same clusters, both selectors"))
    print(table(
        ["selector", "clusters", "member recall", "weighted", "members covered", "tokens", "ms mean", "ms p95"],
        [[name, int(f["clusters"]), f["member_recall"], f["member_recall_weighted"], f["members_covered"],
          f["summary_tokens_mean"], f["ms_per_summary_mean"], f["ms_per_summary_p95"]]
         for name, f in figures.items()],
    ))
    print(heading(f"Top of each patent's tree, {TOP_TOKENS} tokens: recall of the gold summary's content words"))
    print(table(
        ["selector", "layers >= 2", "top-down summaries (layers >= 1)"],
        [[name, f["gold_recall_top_layers_2_up"], f["gold_recall_top_down_summaries"]] for name, f in figures.items()],
    ))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.summaries", description=__doc__.splitlines()[0])
    parser.add_argument("--patents", type=int, default=13, metavar="N", help="distinct patents to build (default 13, all)")
    parser.add_argument("--reviews", type=int, default=2, metavar="N", help="distinct review collections (default 2)")
    parser.add_argument("--json", type=Path, default=None, metavar="FILE", help="also write the figures as JSON")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    start = start_run()
    payload = run(args.patents, args.reviews)
    print(machine_line("machine at end"))
    write_json(args.json, {"machine_start": start, "machine_end": machine_info(), **payload})
    return 0


if __name__ == "__main__":
    sys.exit(main())
