"""Building a RAPTOR tree from leaves: cluster, summarise, embed, layer after layer.

The builder is pure computation over nodes and vectors; it never touches the
store. Summaries already made for a cluster with the same members (same texts,
same summariser) come from a :class:`SummaryCache` instead of the summariser,
so an unchanged part of a channel costs nothing to rebuild.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np

from raptor_engine.clustering import ClusteringSettings, cluster_rows
from raptor_engine.errors import ProviderError
from raptor_engine.protocols import Embedder, Summarizer, TokenCounter
from raptor_engine.types import Node

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class BuildProgress:
    """A step of a build, for progress bars: ``done`` of ``total`` in ``stage``."""

    stage: str
    done: int
    total: int
    layer: int = 0


ProgressCallback = Callable[[BuildProgress], None]


class SummaryCache(Protocol):
    """Summaries already made, by cache key (see :func:`summary_key`)."""

    def get(self, keys: Sequence[str]) -> dict[str, tuple[str, np.ndarray]]: ...


@dataclass(slots=True)
class BuiltTree:
    """The result of a build: every node (leaves first) with its embedding row."""

    nodes: list[Node]
    embeddings: np.ndarray
    new_summaries: list[tuple[str, str, tuple[str, ...]]] = field(default_factory=list)
    new_summary_embeddings: np.ndarray | None = None
    used_keys: set[str] = field(default_factory=set)
    summaries_made: int = 0
    summaries_reused: int = 0
    stage_seconds: dict[str, float] = field(default_factory=dict)

    def nodes_per_layer(self) -> dict[int, int]:
        return dict(sorted(Counter(node.layer for node in self.nodes).items()))


def summary_key(identity: str, texts: Sequence[str]) -> str:
    """The cache key of a summary: a hash of the summariser's identity and its members' texts."""
    digest = hashlib.sha256(identity.encode())
    for text in texts:
        digest.update(b"\x1e")
        digest.update(text.encode())
    return digest.hexdigest()[:32]


def summary_id(layer: int, child_ids: Sequence[str]) -> str:
    """The id of a summary node: its layer and a hash of its children's ids."""
    return f"s{layer}.{hashlib.sha1('|'.join(child_ids).encode()).hexdigest()[:10]}"


@dataclass(slots=True)
class _Layer:
    nodes: list[Node]
    vectors: np.ndarray
    coverage: list[Counter[str]]


class TreeBuilder:
    """Builds a tree from leaves; see :meth:`build`."""

    def __init__(
        self,
        embedder: Embedder,
        summarizer: Summarizer,
        counter: TokenCounter,
        clustering: ClusteringSettings,
        max_concurrency: int = 8,
        progress: ProgressCallback | None = None,
    ) -> None:
        self._embedder = embedder
        self._summarizer = summarizer
        self._counter = counter
        self._clustering = clustering
        self._max_concurrency = max(1, max_concurrency)
        self._progress = progress or (lambda _: None)

    async def build(self, leaves: Sequence[Node], vectors: np.ndarray, cache: SummaryCache) -> BuiltTree:
        """Builds every layer above ``leaves`` (rows of ``vectors``), then a root.

        Layers are added while clustering reduces the node count; the top layer,
        if it holds more than one node, gets a single root summary. Each
        iteration strictly reduces the number of nodes, so the loop ends.
        Raises ``ProviderError`` if the summariser or embedder fails.
        """
        result = BuiltTree(nodes=list(leaves), embeddings=vectors)
        titles = {node.source_ids[0]: (node.title, node.link) for node in leaves if node.source_ids}
        layer = _Layer(list(leaves), vectors, [Counter(node.source_ids[:1]) for node in leaves])
        vector_rows = [vectors]
        number = 0
        while len(layer.nodes) > 1:
            clusters = await self._clusters_of(layer, result, number + 1)
            number += 1
            layer = await self._summarise_layer(layer, clusters, number, titles, cache, result)
            vector_rows.append(layer.vectors)
            result.nodes.extend(layer.nodes)
        result.embeddings = np.vstack(vector_rows) if vector_rows else vectors
        result.nodes = _with_parents(result.nodes)
        return result

    async def _clusters_of(self, layer: _Layer, result: BuiltTree, number: int) -> list[list[int]]:
        """The clusters of the next layer; one cluster of everything makes the root."""
        everything = [list(range(len(layer.nodes)))]
        if len(layer.nodes) <= self._clustering.reduction_dim + 1:
            return everything  # too few to cluster: the paper's stop rule; summarise as root
        self._progress(BuildProgress("cluster", 0, 1, number))
        started = time.perf_counter()
        tokens = [node.tokens for node in layer.nodes]
        clusters = await asyncio.to_thread(cluster_rows, layer.vectors, tokens, self._clustering)
        _add_time(result, "cluster", started)
        self._progress(BuildProgress("cluster", 1, 1, number))
        if len(clusters) >= len(layer.nodes):
            log.info("layer %d: clustering did not reduce %d nodes; making the root", number, len(layer.nodes))
            return everything
        return clusters

    async def _summarise_layer(
        self,
        below: _Layer,
        clusters: list[list[int]],
        number: int,
        titles: dict[str, tuple[str, str]],
        cache: SummaryCache,
        result: BuiltTree,
    ) -> _Layer:
        members = [[below.nodes[i] for i in cluster] for cluster in clusters]
        keys = [summary_key(self._summarizer.identity, [n.text for n in group]) for group in members]
        started = time.perf_counter()
        cached = cache.get(keys)
        texts = await self._summaries(members, keys, cached, number)
        _add_time(result, "summarise", started)

        fresh = [k for k in dict.fromkeys(keys) if k not in cached]
        started = time.perf_counter()
        fresh_vectors = await asyncio.to_thread(self._embedder.embed, [texts[keys.index(k)] for k in fresh])
        _add_time(result, "embed summaries", started)
        vector_of = {k: v for k, (_, v) in cached.items()} | dict(zip(fresh, fresh_vectors))
        token_counts = self._counter.count_many(texts)

        coverage = [sum((below.coverage[i] for i in cluster), Counter()) for cluster in clusters]
        nodes = []
        for group, text, tokens, cover in zip(members, texts, token_counts, coverage):
            sources = tuple(source for source, _ in cover.most_common())
            title, link = titles.get(sources[0], ("", "")) if sources else ("", "")
            child_ids = [n.id for n in group]
            nodes.append(Node(summary_id(number, child_ids), number, text, tokens, tuple(child_ids),
                              (), sources, title, link))
        result.used_keys.update(keys)
        result.summaries_reused += sum(1 for k in keys if k in cached)
        result.summaries_made += len(fresh)
        for key, vector in zip(fresh, fresh_vectors):
            node = nodes[keys.index(key)]
            result.new_summaries.append((key, node.text, node.source_ids))
            result.new_summary_embeddings = _append_row(result.new_summary_embeddings, vector)
        return _Layer(nodes, np.vstack([vector_of[k] for k in keys]).astype(np.float32), coverage)

    async def _summaries(
        self,
        members: list[list[Node]],
        keys: list[str],
        cached: dict[str, tuple[str, np.ndarray]],
        number: int,
    ) -> list[str]:
        """The text of each cluster's summary: cached, or made concurrently under a bound."""
        bound = asyncio.Semaphore(self._max_concurrency)
        todo = [i for i, key in enumerate(keys) if key not in cached]
        done = 0
        self._progress(BuildProgress("summarise", 0, len(todo), number))

        async def make(index: int) -> str:
            nonlocal done
            async with bound:
                text = await self._summarizer.summarize([n.text for n in members[index]])
            if not text or not text.strip():
                raise ProviderError("the summariser returned an empty summary")
            done += 1
            self._progress(BuildProgress("summarise", done, len(todo), number))
            return text.strip()

        made = await asyncio.gather(*(make(i) for i in todo))
        texts = [cached[key][0] if key in cached else "" for key in keys]
        for index, text in zip(todo, made):
            texts[index] = text
        return texts


def _with_parents(nodes: list[Node]) -> list[Node]:
    parents: dict[str, list[str]] = {}
    for node in nodes:
        for child in node.children:
            parents.setdefault(child, []).append(node.id)
    return [replace(node, parents=tuple(parents.get(node.id, ()))) for node in nodes]


def _append_row(matrix: np.ndarray | None, row: np.ndarray) -> np.ndarray:
    row = np.asarray(row, dtype=np.float32)[None, :]
    return row if matrix is None else np.vstack([matrix, row])


def _add_time(result: BuiltTree, stage: str, started: float) -> None:
    result.stage_seconds[stage] = result.stage_seconds.get(stage, 0.0) + time.perf_counter() - started
