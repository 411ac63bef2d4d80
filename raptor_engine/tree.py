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
from collections.abc import Callable, Coroutine, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeVar

import numpy as np

from raptor_engine import cluster_worker
from raptor_engine.background import ForegroundGate
from raptor_engine.clustering import ClusteringSettings
from raptor_engine.errors import ProviderError
from raptor_engine.metering import Meter
from raptor_engine.protocols import Embedder, LeafSummarizer, MeteredSummarizer, Summarizer, TokenCounter
from raptor_engine.types import Node

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class BuildProgress:
    """A step of a build, for progress bars: ``done`` of ``total`` in ``stage``.

    In the ``subtrees`` stage ``summaries`` counts the summaries written so far: a subtree
    can take minutes, and this is what moves while it grows."""

    stage: str
    done: int
    total: int
    layer: int = 0
    summaries: int = 0


ProgressCallback = Callable[[BuildProgress], None]
T = TypeVar("T")
CACHE_WRITE_BATCH = 64  # new summaries written to the cache together


class SummaryCache(Protocol):
    """Summaries already made, by cache key (see :func:`summary_key`)."""

    def get(self, keys: Sequence[str]) -> dict[str, tuple[str, np.ndarray]]:
        """The cached (text, vector) of those keys that have one."""
        ...

    def put(self, entries: Sequence[tuple[str, str, tuple[str, ...]]], vectors: np.ndarray) -> None:
        """Caches (key, text, source ids) with their vectors, bit for bit: a later
        build clusters what it reads back, and must see what this one clustered."""
        ...


@dataclass(slots=True)
class BuiltTree:
    """The result of a build: every node (leaves first) with its embedding row."""

    nodes: list[Node]
    embeddings: np.ndarray
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
    leaf_texts: list[tuple[str, ...]]  # the texts of the leaves under each node (a leaf: its own)


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
        meter: Meter | None = None,
        gate: ForegroundGate | None = None,
    ) -> None:
        self._embedder = embedder
        self._meter = meter
        self._gate = gate or ForegroundGate()
        self._summarizer = summarizer
        self._counter = counter
        self._clustering = clustering
        self._max_concurrency = max(1, max_concurrency)
        self._progress = progress or (lambda _: None)

    async def build(self, groups: Sequence[tuple[Sequence[Node], np.ndarray]], cache: SummaryCache) -> BuiltTree:
        """Builds one subtree per group, then the channel's layers over the subtrees' tops.

        Each group is one source's leaves with their vectors (rows in order).
        A subtree grows layers while clustering reduces its node count and ends
        in a single top node (its root, or its only leaf). The channel's layers
        grow the same way over those tops, up to one root for the channel.
        Keeping the sources apart below their roots is what makes a rebuild's
        cost follow the change: a new source disturbs its own subtree and the
        few channel-level clusters above, while every other summary comes from
        the cache. (The paper builds one tree per document; this is that tree,
        with a channel above.) A node's layer is one more than its highest child.

        Subtrees are built concurrently; summaries run at most
        ``max_concurrency`` at a time; clustering runs one at a time in a worker
        process (see ``cluster_worker.py``). Between steps the build steps aside
        while ``gate`` says foreground work (a question) runs. Every loop
        strictly reduces its node count, so the build ends.
        Raises ``ProviderError`` if the summariser or embedder fails; work in
        flight is cancelled then.
        """
        run = _Run(
            result=BuiltTree(nodes=[], embeddings=np.zeros((0, 0), dtype=np.float32)),
            cache=cache,
            titles={n.source_ids[0]: (n.title, n.link) for leaves, _ in groups for n in leaves if n.source_ids},
            bound=asyncio.Semaphore(self._max_concurrency),
            cpu=asyncio.Lock(),
            clock=_StageClock(),
        )
        run.subtrees_total = len(groups)
        self._report_subtrees(run)

        async def subtree(leaves: Sequence[Node], vectors: np.ndarray) -> list[_Layer]:
            layers = await self._grow(_leaf_layer(leaves, vectors), run, report=False)
            run.subtrees_done += 1
            self._report_subtrees(run)
            return layers

        try:
            per_source = await _all_or_nothing([subtree(leaves, vectors) for leaves, vectors in groups])
            layers = [layer for source_layers in per_source for layer in source_layers]
            if len(per_source) > 1:
                tops = _joined([source_layers[-1] for source_layers in per_source])
                layers += (await self._grow(tops, run, report=True))[1:]  # the tops are already in
        finally:
            await run.flush()  # a build that fails keeps the summaries it paid for
        run.result.nodes = _with_parents([node for layer in layers for node in layer.nodes])
        run.result.embeddings = np.vstack([layer.vectors for layer in layers]).astype(np.float32)
        run.result.stage_seconds = dict(run.clock.seconds)
        return run.result

    def _report_subtrees(self, run: _Run) -> None:
        self._progress(BuildProgress("subtrees", run.subtrees_done, run.subtrees_total,
                                     summaries=run.subtree_summaries))

    async def _grow(self, layer: _Layer, run: _Run, report: bool) -> list[_Layer]:
        """``layer`` and every layer built above it, the last holding a single node."""
        layers = [layer]
        while len(layer.nodes) > 1:
            number = 1 + max(node.layer for node in layer.nodes)
            clusters = await self._clusters_of(layer, run, number if report else 0)
            layer = await self._summarise_layer(layer, clusters, run, number if report else 0)
            layers.append(layer)
        return layers

    async def _clusters_of(self, layer: _Layer, run: _Run, number: int) -> list[list[int]]:
        """The clusters of the next layer; one cluster of everything makes the root.

        ``number`` names the layer in progress reports; 0 reports nothing.
        """
        everything = [list(range(len(layer.nodes)))]
        if len(layer.nodes) <= self._clustering.reduction_dim + 1:
            return everything  # too few to cluster: the paper's stop rule; summarise as root
        if number:
            self._progress(BuildProgress("cluster", 0, 1, number))
        tokens = [node.tokens for node in layer.nodes]
        # One CPU-bound step at a time: clustering tunes BLAS threads process-wide, and
        # on few cores concurrent clustering and embedding only fight for them.
        async with run.cpu:
            await self._gate.step_aside()
            with run.clock.timing("cluster"):
                clusters = await cluster_worker.cluster(layer.vectors, tokens, self._clustering)
        if number:
            self._progress(BuildProgress("cluster", 1, 1, number))
        if len(clusters) >= len(layer.nodes):
            log.info("clustering did not reduce %d nodes; making their root", len(layer.nodes))
            return everything
        return clusters

    async def _summarise_layer(self, below: _Layer, clusters: list[list[int]], run: _Run, number: int) -> _Layer:
        """The layer of summaries of ``clusters`` of ``below``: cached or made, then embedded."""
        result = run.result
        members = [[below.nodes[i] for i in cluster] for cluster in clusters]
        under = [tuple(text for i in cluster for text in below.leaf_texts[i]) for cluster in clusters]
        reads_leaves = _reads_leaves(self._summarizer)
        inputs = under if reads_leaves else [tuple(n.text for n in group) for group in members]
        # One cluster makes a root: the whole of a source, or of the channel.
        whole = reads_leaves and len(clusters) == 1
        identity = self._summarizer.identity + ("/whole" if whole else "")
        keys = [summary_key(identity, texts) for texts in inputs]
        with run.clock.timing("summarise"):
            cached = await run.cached(keys)
            layer = 1 + max(node.layer for node in members[0])
            texts = await self._summaries(inputs, keys, cached, run, (number, layer), whole)

        coverage = [sum((below.coverage[i] for i in cluster), Counter()) for cluster in clusters]
        sources = [tuple(source for source, _ in cover.most_common()) for cover in coverage]
        fresh = [k for k in dict.fromkeys(keys) if k not in cached]
        await self._gate.step_aside()
        with run.clock.timing("embed summaries"):
            fresh_vectors = await asyncio.to_thread(self._embedder.embed, [texts[keys.index(k)] for k in fresh])
        entries = [(k, texts[keys.index(k)], sources[keys.index(k)]) for k in fresh]
        await run.keep(entries, fresh_vectors)
        vector_of = {k: v for k, (_, v) in cached.items()} | dict(zip(fresh, fresh_vectors))
        token_counts = self._counter.count_many(texts)

        nodes = []
        for group, text, tokens, covered in zip(members, texts, token_counts, sources):
            title, link = run.titles.get(covered[0], ("", "")) if covered else ("", "")
            child_ids = [n.id for n in group]
            height = 1 + max(n.layer for n in group)
            nodes.append(Node(summary_id(height, child_ids), height, text, tokens, tuple(child_ids),
                              (), covered, title, link))
        result.used_keys.update(keys)
        result.summaries_reused += sum(1 for k in keys if k in cached)
        result.summaries_made += len(fresh)
        return _Layer(nodes, np.vstack([vector_of[k] for k in keys]).astype(np.float32), coverage, under)

    async def _summaries(
        self,
        inputs: list[tuple[str, ...]],
        keys: list[str],
        cached: dict[str, tuple[str, np.ndarray]],
        run: _Run,
        position: tuple[int, int],
        whole: bool,
    ) -> list[str]:
        """The text of each cluster's summary from its ``inputs`` (the texts the summariser
        reads): cached, or made concurrently under the run's bound. ``position`` is the layer
        number to report (0: none) and the layer made; ``whole`` asks a :class:`LeafSummarizer`
        for the summary of a whole source or channel (a root)."""
        number, layer = position
        todo = [i for i, key in enumerate(keys) if key not in cached]
        await self._reserve([inputs[i] for i in todo], layer)
        done = 0
        if number:
            self._progress(BuildProgress("summarise", 0, len(todo), number))

        async def make(index: int) -> str:
            nonlocal done
            async with run.bound:
                await self._gate.step_aside()
                summarizer = self._summarizer
                if whole and isinstance(summarizer, LeafSummarizer):
                    text = await summarizer.summarize_whole(inputs[index])
                else:
                    text = await summarizer.summarize(inputs[index])
            if not text or not text.strip():
                raise ProviderError("the summariser returned an empty summary")
            done += 1
            if number:
                self._progress(BuildProgress("summarise", done, len(todo), number))
            else:  # inside a subtree, whose layers are not reported one by one
                run.subtree_summaries += 1
                self._report_subtrees(run)
            return text.strip()

        made = await _all_or_nothing([make(i) for i in todo])
        texts = [cached[key][0] if key in cached else "" for key in keys]
        for index, text in zip(todo, made):
            texts[index] = text
        return texts


    async def _reserve(self, clusters: list[tuple[str, ...]], layer: int) -> None:
        """Books the summaries about to be asked for against the build's spending ceiling;
        raises ``SpendingLimitReached`` before any of them is asked if they would pass it."""
        meter, summarizer = self._meter, self._summarizer
        if not clusters or meter is None or not meter.limits.bounded or not isinstance(summarizer, MeteredSummarizer):
            return
        tokens = 0
        if meter.limits.max_tokens:  # counting prompts costs tokenising them: only when tokens are capped
            costs = await asyncio.to_thread(lambda: [summarizer.cost(texts) for texts in clusters])
            tokens = sum(costs)
        meter.reserve(len(clusters), tokens, f"{len(clusters)} new summaries of layer {layer}")


@dataclass(slots=True)
class _Run:
    """What one build shares across its subtrees."""

    result: BuiltTree
    cache: SummaryCache
    titles: dict[str, tuple[str, str]]
    bound: asyncio.Semaphore
    cpu: asyncio.Lock
    clock: _StageClock
    unsaved: list[tuple[tuple[str, str, tuple[str, ...]], np.ndarray]] = field(default_factory=list)
    made: dict[str, tuple[str, np.ndarray]] = field(default_factory=dict)  # this build's new summaries
    subtrees_total: int = 0
    subtrees_done: int = 0
    subtree_summaries: int = 0  # summaries written inside subtrees so far, for progress

    async def cached(self, keys: Sequence[str]) -> dict[str, tuple[str, np.ndarray]]:
        """The summaries of ``keys`` made earlier in this build or found in the cache.

        A summary can be asked for twice in one build: a cluster of one summary covers the
        same leaves as that summary, so a summariser reading leaves gives both one key."""
        known = {key: self.made[key] for key in keys if key in self.made}
        rest = [key for key in keys if key not in known]
        return known | (await asyncio.to_thread(self.cache.get, rest) if rest else {})

    async def keep(self, entries: Sequence[tuple[str, str, tuple[str, ...]]], vectors: np.ndarray) -> None:
        """Queues new summaries for the cache, each key once; writes them once enough have gathered."""
        for entry, vector in zip(entries, vectors):
            if entry[0] not in self.made:
                self.made[entry[0]] = (entry[1], vector)
                self.unsaved.append((entry, vector))
        if len(self.unsaved) >= CACHE_WRITE_BATCH:
            await self.flush()

    async def flush(self) -> None:
        """Writes the queued summaries to the cache (one store write, not one per layer)."""
        batch, self.unsaved = self.unsaved, []
        if batch:
            vectors = np.vstack([vector for _, vector in batch]).astype(np.float32)
            await asyncio.to_thread(self.cache.put, [entry for entry, _ in batch], vectors)


def _leaf_layer(leaves: Sequence[Node], vectors: np.ndarray) -> _Layer:
    return _Layer(
        list(leaves),
        np.asarray(vectors, dtype=np.float32),
        [Counter(n.source_ids[:1]) for n in leaves],
        [(n.text,) for n in leaves],
    )


def _reads_leaves(summarizer: Summarizer) -> bool:
    """Whether ``summarizer`` summarises the leaves under a cluster rather than its members' texts
    (see :class:`~raptor_engine.protocols.LeafSummarizer`)."""
    return isinstance(summarizer, LeafSummarizer) and summarizer.reads_leaves


def _joined(layers: Sequence[_Layer]) -> _Layer:
    """One layer holding the nodes of several, in order."""
    return _Layer(
        [node for layer in layers for node in layer.nodes],
        np.vstack([layer.vectors for layer in layers]),
        [cover for layer in layers for cover in layer.coverage],
        [texts for layer in layers for texts in layer.leaf_texts],
    )


async def _all_or_nothing(coroutines: Sequence[Coroutine[Any, Any, T]]) -> list[T]:
    """Runs ``coroutines`` concurrently; their results in order, or the first failure
    after cancelling the others (``asyncio.gather`` would leave them running)."""
    tasks = [asyncio.ensure_future(c) for c in coroutines]
    if not tasks:
        return []
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in tasks:
            if task.done() and not task.cancelled() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]
        return [task.result() for task in tasks]
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _with_parents(nodes: list[Node]) -> list[Node]:
    parents: dict[str, list[str]] = {}
    for node in nodes:
        for child in node.children:
            parents.setdefault(child, []).append(node.id)
    return [replace(node, parents=tuple(parents.get(node.id, ()))) for node in nodes]


class _StageClock:
    """Wall time per stage, counted while at least one step of that stage runs.

    Subtrees build concurrently, so summing each step's duration would count
    overlapping steps twice; different stages may still overlap each other.
    Used from the event loop's thread only.
    """

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._running: dict[str, int] = {}
        self._since: dict[str, float] = {}

    @contextmanager
    def timing(self, stage: str) -> Iterator[None]:
        if not self._running.get(stage):
            self._since[stage] = time.perf_counter()
        self._running[stage] = self._running.get(stage, 0) + 1
        try:
            yield
        finally:
            self._running[stage] -= 1
            if not self._running[stage]:
                elapsed = time.perf_counter() - self._since[stage]
                self.seconds[stage] = self.seconds.get(stage, 0.0) + elapsed
