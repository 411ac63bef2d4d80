"""The in-memory indexes a question is searched with, kept per channel.

Two kinds, both rebuilt only when what they index changes:

- the **served tree's** BM25 word counts and :class:`~raptor_engine.scope.SummaryMap`,
  under the tree's (version, revision): a tree is immutable, so they never go stale;
- the **fresh leaves**: the leaves of sources added since that tree was built
  (``pending``), read from the leaf cache once per source. Their words join the
  tree's in one BM25 index, so a name, code or error message in a file ingested a
  second ago is found by its words at once, not at the next rebuild.

A leaf's words in the BM25 index are its text's and its source's title's (a file name,
a document's first heading): a question naming a document finds that document's
passages. A title is indexed only where it tells sources apart: in a tree whose leaves
all share one title (a channel holding one document) it is left out, since a word in
every text only shifts BM25's length normalisation. Fresh leaves always carry theirs (a
new file joins other material). Measured with ``bench.retrieval`` on the five dev sets
with every document of a set in one channel: +2.8 points for Wikipedia questions at 500
tokens, +3.2 for patents at 2,000, no set or budget lower by more than 0.1; indexed in a
one-document channel it cost patents 1.2 points at 500 tokens, hence the rule.

Nothing here is told of an ingest: the pending sources are the store's, read
by every question (``Engine._retrieval``), so a process serving the same
channel from a Chroma server finds what another process ingested, and a
forgotten source drops out of the next question's index. (An embedded store,
which only this process writes, keeps that read until this process writes
again: ``store/write_clock.py``.)
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from raptor_engine import defaults
from raptor_engine.lexical import LexicalIndex, TermCounts, count_terms, joined
from raptor_engine.scope import EMPTY_MAP, SummaryMap, summary_map
from raptor_engine.store import ChannelStore, TreeState
from raptor_engine.store.leaves import leaf_node
from raptor_engine.tree_vectors import InMemoryTree, TreeQueries, TreeVectorCache, TreeVectors
from raptor_engine.types import ChannelKey, Hit, Node, Source
from raptor_engine.unit_vectors import unit, unit_rows

FRESH_CACHE_LEAVES = 200_000  # fresh leaves kept in memory over all channels (~1 KiB each with its vector)


@dataclass(frozen=True, slots=True)
class FreshLeaves:
    """Leaves of sources not yet in the served tree: the nodes and their unit vectors, row for row."""

    nodes: tuple[Node, ...]
    vectors: np.ndarray

    def nearest(self, vector: np.ndarray, n: int) -> list[Hit]:
        """Up to ``n`` leaves by cosine to ``vector``, best first (one product over the fresh
        leaves only: a few files' worth, not the channel)."""
        if not self.nodes or n <= 0:
            return []
        scores = self.vectors @ unit(vector)
        order = np.argsort(-scores, kind="stable")[:n]
        return [Hit(self.nodes[i], float(scores[i])) for i in order]

    def scored(self, vector: np.ndarray, ids: Sequence[str]) -> list[Hit]:
        """The leaves ``ids`` (others skipped) as hits scored by cosine to ``vector``."""
        rows = {node.id: row for row, node in enumerate(self.nodes)}
        wanted = [rows[node_id] for node_id in ids if node_id in rows]
        scores = self.vectors[wanted] @ unit(vector) if wanted else []
        return [Hit(self.nodes[row], float(score)) for row, score in zip(wanted, scores)]


NO_FRESH = FreshLeaves((), np.zeros((0, 0), dtype=np.float32))


@dataclass(frozen=True, slots=True)
class SearchIndexes:
    """What one question is searched with: BM25 over the served tree and the fresh leaves
    (None when there is nothing to index), the tree's summary map, the fresh leaves, and what
    the tree's nodes are searched with (None: the channel's store)."""

    lexical: LexicalIndex | None
    summaries: SummaryMap
    fresh: FreshLeaves
    tree: TreeQueries | None = None


@dataclass(frozen=True, slots=True)
class _Tree:
    tag: tuple[int, int]  # the tree's (version, revision)
    counts: TermCounts
    lexical: LexicalIndex
    summaries: SummaryMap


@dataclass(frozen=True, slots=True)
class _Source:
    nodes: tuple[Node, ...]
    vectors: np.ndarray
    counts: TermCounts


class ChannelIndexes:
    """The indexes of many channels, least recently used out: those of at most ``channels``
    channels are kept (a served tree's, and a tree's joined with its fresh leaves), and at most
    ``FRESH_CACHE_LEAVES`` fresh leaves over all. Thread-safe: questions of several threads
    share it; a slow build runs outside the lock."""

    def __init__(self, channels: int = defaults.INDEXED_CHANNELS) -> None:
        if channels < 1:
            raise ValueError(f"channels must be at least 1, not {channels}")
        self._channels = channels
        self._trees: OrderedDict[ChannelKey, _Tree] = OrderedDict()
        self._sources: OrderedDict[tuple[ChannelKey, str, str], _Source] = OrderedDict()
        self._combined: OrderedDict[ChannelKey, tuple[tuple[object, ...], LexicalIndex, FreshLeaves]] = OrderedDict()
        self._lock = threading.Lock()
        self._vectors = TreeVectorCache()

    def for_question(
        self, key: ChannelKey, channel: ChannelStore, state: TreeState | None, pending: Sequence[Source], profile: str
    ) -> SearchIndexes:
        """The indexes for a question in ``key``: ``state`` is the served tree (None before the
        first build), ``pending`` the sources not in it, whose leaves are cached under ``profile``
        (their hits come titled and linked as their source)."""
        searched, tree = self._served(key, channel, state)
        sources = self._fresh_sources(key, channel, pending, profile)
        summaries = tree.summaries if tree else EMPTY_MAP
        if not sources:
            return SearchIndexes(tree.lexical if tree else None, summaries, NO_FRESH, searched)
        # Tagged by the sources read, not those pending: one still being ingested elsewhere (no
        # leaves yet) must join the index at the question after it has them.
        tag = (tree.tag if tree else None, profile, *sources)
        lexical, fresh = self._joined(key, tag, tree, [sources[sid] for sid in sources])
        return SearchIndexes(lexical, summaries, fresh, searched)

    def warm(self, key: ChannelKey, channel: ChannelStore, state: TreeState) -> None:
        """Reads tree ``state``'s vectors and builds its indexes now (a rebuild has just served
        it), so that the channel's next question reads nothing."""
        self._served(key, channel, state)

    def _served(self, key: ChannelKey, channel: ChannelStore, state: TreeState | None) -> tuple[TreeQueries, _Tree | None]:
        """What the served tree is searched with, and its indexes (None before any tree). The
        vectors come first: when they are kept in memory, the BM25 index and summary map are
        built from the same nodes, not read from the store again."""
        searched = self._vectors.searched(key, channel, state)
        read = searched.vectors if isinstance(searched, InMemoryTree) else None
        return searched, self.tree(key, channel, state, read) if state is not None else None

    def tree(self, key: ChannelKey, channel: ChannelStore, state: TreeState, read: TreeVectors | None = None) -> _Tree:
        """The served tree's counts, BM25 index and summary map, built on first use and kept
        (an older tree's are never asked for again once a newer one is served); from ``read``,
        the tree's nodes and vectors when they are in memory already, else read from the store."""
        tag = (state.version, state.revision)
        with self._lock:
            cached = self._trees.get(key)
            if cached is not None and cached.tag == tag:
                self._trees.move_to_end(key)
                return cached
        built = _tree_of(channel, state, read if read is not None and read.tag[:2] == tag else None)
        with self._lock:
            cached = self._trees.get(key)
            # A question that read the state just before a switch must not evict the new tree's indexes.
            if cached is None or cached.tag <= tag:
                self._trees[key] = built
                self._trees.move_to_end(key)
            while len(self._trees) > self._channels:
                self._trees.popitem(last=False)
        return built

    def served(self) -> dict[ChannelKey, tuple[int, int]]:
        """The (version, revision) of each channel's tree whose indexes are kept, least recently used first."""
        with self._lock:
            return {key: tree.tag for key, tree in self._trees.items()}

    def forget(self, key: ChannelKey) -> None:
        """Drops what is kept of the channel (its material changed in this process)."""
        with self._lock:
            self._trees.pop(key, None)
            self._combined.pop(key, None)
            for cached in [cached for cached in self._sources if cached[0] == key]:
                del self._sources[cached]

    def _fresh_sources(
        self, key: ChannelKey, channel: ChannelStore, sources: Sequence[Source], profile: str
    ) -> dict[str, _Source]:
        """The pending ``sources``' leaves, titled and linked as their source, by source id in
        ``sources``' order, read from the leaf cache once per source (a source's content never
        changes: an edit is a new source)."""
        if not sources:
            return {}
        records = {source.id: source for source in sources}
        pending = list(records)
        with self._lock:
            known = {sid: self._sources.get((key, profile, sid)) for sid in pending}
        missing = [sid for sid, cached in known.items() if cached is None]
        for sid, (chunks, vectors) in channel.cached_leaves(profile, missing).items() if missing else ():
            nodes = tuple(leaf_node(chunk, records[sid].title, records[sid].link) for chunk in chunks)
            counts = count_terms([n.id for n in nodes], [n.text for n in nodes], [n.title for n in nodes])
            known[sid] = _Source(nodes, unit_rows(vectors), counts)
        with self._lock:
            for sid in missing:
                if known[sid] is not None:
                    self._sources[(key, profile, sid)] = known[sid]  # type: ignore[assignment]
            for sid in pending:
                if (key, profile, sid) in self._sources:
                    self._sources.move_to_end((key, profile, sid))
            while sum(len(s.nodes) for s in self._sources.values()) > FRESH_CACHE_LEAVES and len(self._sources) > 1:
                self._sources.popitem(last=False)
        # A pending source with no cached leaves (still being ingested elsewhere) is skipped.
        return {sid: source for sid in pending if (source := known[sid]) is not None}

    def _joined(
        self, key: ChannelKey, tag: tuple[object, ...], tree: _Tree | None, sources: list[_Source]
    ) -> tuple[LexicalIndex, FreshLeaves]:
        """BM25 over the tree's texts and the fresh leaves together (statistics over both, so a
        new file's words rank as the tree's do), and the fresh leaves as one matrix; kept for
        the same tree and fresh sources."""
        with self._lock:
            cached = self._combined.get(key)
            if cached is not None and cached[0] == tag:
                self._combined.move_to_end(key)
                return cached[1], cached[2]
        parts = ([tree.counts] if tree else []) + [source.counts for source in sources]
        index, fresh = LexicalIndex.of_counts(joined(parts)), _fresh_leaves(sources)
        with self._lock:
            self._combined[key] = (tag, index, fresh)
            self._combined.move_to_end(key)
            while len(self._combined) > self._channels:
                self._combined.popitem(last=False)
        return index, fresh


def tree_indexes(channel: ChannelStore, state: TreeState) -> SearchIndexes:
    """The indexes of tree ``state`` alone (no fresh leaves), built now and kept nowhere: to
    search a tree that is not served yet as it would be searched once served."""
    tree = _tree_of(channel, state)
    return SearchIndexes(tree.lexical, tree.summaries, NO_FRESH)


def _tree_of(channel: ChannelStore, state: TreeState, read: TreeVectors | None = None) -> _Tree:
    """A tree version's BM25 index and summary map: from ``read`` (every node of the tree and
    its vector, in memory already), else read from the store."""
    if read is None:
        ids, texts, titles = channel.node_texts(state.version)
        summaries = load_summary_map(channel, state)
    else:
        ids = [node.id for node in read.nodes]
        texts = [node.text for node in read.nodes]
        titles = [node.title if node.layer == 0 else "" for node in read.nodes]
        above = [row for row, node in enumerate(read.nodes) if node.layer > 0]
        summaries = summary_map([read.nodes[row] for row in above], read.vectors[above]) if above else EMPTY_MAP
    # A title counts where it tells sources apart (see the module docstring).
    counts = count_terms(ids, texts, titles if len(set(titles) - {""}) > 1 else None)
    return _Tree((state.version, state.revision), counts, LexicalIndex.of_counts(counts), summaries)


def load_summary_map(store: ChannelStore, state: TreeState) -> SummaryMap:
    """The :class:`SummaryMap` of a tree version, read from the store (a few reads per layer)."""
    layers = sorted(layer for layer in state.nodes_per_layer if layer > 0)
    nodes = [node for layer in layers for node in store.list_layer(state.version, layer, 10**9)]
    if not nodes:
        return EMPTY_MAP
    vectors = store.get_tree_embeddings(state.version, [node.id for node in nodes])
    kept = [node for node in nodes if node.id in vectors]
    return summary_map(kept, np.vstack([vectors[node.id] for node in kept])) if kept else EMPTY_MAP


def _fresh_leaves(sources: Sequence[_Source]) -> FreshLeaves:
    if not sources:
        return NO_FRESH
    nodes = tuple(node for source in sources for node in source.nodes)
    return FreshLeaves(nodes, np.vstack([source.vectors for source in sources]))
