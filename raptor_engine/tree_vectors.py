"""The served trees' node vectors in memory, searched exactly with numpy instead of Chroma.

A question's retrieval asks the tree for its nearest nodes, and for the cosine of a few named
nodes (those BM25 found, a document's opening). Through Chroma each ask is a query of its own;
for a tree of a few thousand nodes, one matrix product over its unit vectors answers it in a
fraction of that (``bench.query`` measures both, side by side). A served tree never changes
under its (version, revision, tag), so its vectors, read once, never go stale: a rebuild serves
another version, a forget another revision, and both are read anew at their first question.

Memory is bounded: the trees kept hold at most :data:`MEMORY_NODES` nodes together (least
recently asked out), and a tree larger than that is never kept; its questions go to Chroma as
before. A node costs its vector (384 float32: 1.5 KiB with all-MiniLM-L6-v2) and its record
(text and metadata, about as much): ``bench.query`` prints the figure.

Results are the same as Chroma's up to float rounding (Chroma's cosine space compares unit
vectors as well), except where Chroma's graph index misses a neighbour: the exact product
does not.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from raptor_engine.store import ChannelStore, TreeState
from raptor_engine.types import ChannelKey, Hit, Node
from raptor_engine.unit_vectors import unit, unit_rows

MEMORY_NODES = 100_000  # nodes of served trees kept in memory over all channels (~3 KiB each)


class TreeQueries(Protocol):
    """What retrieval asks of a tree: its nearest nodes to a vector, and what an answer's check
    reads of it: nodes by id (``ChannelStore`` has both)."""

    def query_tree(self, version: int, vector: np.ndarray, n: int, where: dict[str, Any] | None = None,
                   ids: Sequence[str] | None = None) -> list[Hit]:
        """Nodes of tree ``version`` nearest to ``vector``, best first; ``where`` a simple
        ``{"layer": n}``, ``ids`` the nodes to choose among."""
        ...

    def get_nodes(self, version: int, ids: Sequence[str]) -> list[Node]:
        """The nodes with these ids in tree ``version`` (missing ids are skipped), in the order asked."""
        ...


@dataclass(frozen=True, slots=True)
class TreeVectors:
    """Every node of one served tree (``tag``: its version, revision and store tag) and their unit
    vectors, row for row; ``layers`` each layer's rows (left empty, a layer is found by reading
    every node)."""

    tag: tuple[int, int, str]
    nodes: tuple[Node, ...]
    vectors: np.ndarray
    rows: dict[str, int] = field(default_factory=dict)
    layers: dict[int, np.ndarray] = field(default_factory=dict)

    def cosines(self, vector: np.ndarray) -> np.ndarray:
        """The cosine of every row to ``vector`` (none for a tree whose nodes were all forgotten)."""
        if not self.nodes:
            return np.zeros(0, dtype=np.float32)
        return self.vectors @ unit(vector)

    def nearest(self, vector: np.ndarray, n: int, where: dict[str, Any] | None = None,
                ids: Sequence[str] | None = None, cosines: np.ndarray | None = None) -> list[Hit]:
        """Up to ``n`` nodes by cosine to ``vector``, best first (ties in row order); among
        ``ids`` (unknown ones skipped) and those matching ``where`` when given. ``cosines``:
        :meth:`cosines` of ``vector`` when already computed."""
        candidates = self._candidates(where, ids)
        if n <= 0 or (candidates is not None and candidates.size == 0):
            return []
        if cosines is not None:
            scores = cosines if candidates is None else cosines[candidates]
        else:  # a few rows' product, not a copy of every row's
            scores = self.cosines(vector) if candidates is None else self.vectors[candidates] @ unit(vector)
        order = best_rows(scores, n)
        rows = order if candidates is None else candidates[order]
        return [Hit(self.nodes[row], score) for row, score in zip(rows.tolist(), scores[order].tolist())]

    def _candidates(self, where: dict[str, Any] | None, ids: Sequence[str] | None) -> np.ndarray | None:
        """The rows to choose among, in row order; None for every row."""
        candidates = None
        if ids is not None:
            candidates = np.asarray(sorted({self.rows[i] for i in ids if i in self.rows}), dtype=np.int64)
        if where is None:
            return candidates
        layer = where.get("layer") if len(where) == 1 else None
        if layer in self.layers:
            return self.layers[layer] if candidates is None else np.intersect1d(candidates, self.layers[layer])
        every = range(len(self.nodes)) if candidates is None else candidates.tolist()
        return np.asarray([row for row in every if _matches(self.nodes[row], where)], dtype=np.int64)


def best_rows(scores: np.ndarray, n: int) -> np.ndarray:
    """The rows of the ``n`` highest ``scores``, best first, equal scores in row order: what a
    stable sort of all of them gives, found without sorting more than ``n`` (a question asks
    for a hundred of a few thousand nodes)."""
    if n >= scores.size:
        return np.argsort(-scores, kind="stable")
    cut = scores[np.argpartition(-scores, n - 1)[n - 1]]  # the n-th highest score
    above = np.flatnonzero(scores > cut)
    chosen = np.concatenate([above, np.flatnonzero(scores == cut)[:n - above.size]])
    return chosen[np.lexsort((chosen, -scores[chosen]))]


def tree_vectors(store: ChannelStore, state: TreeState) -> TreeVectors:
    """The nodes and unit vectors of tree ``state``, read from the store (one read per layer,
    one for the vectors)."""
    nodes = [node for layer in sorted(state.nodes_per_layer) for node in store.list_layer(state.version, layer, 10**9)]
    stored = store.get_tree_embeddings(state.version, [node.id for node in nodes])
    kept = tuple(node for node in nodes if node.id in stored)
    matrix = unit_rows(np.vstack([stored[node.id] for node in kept])) if kept else np.zeros((0, 0), np.float32)
    layers: dict[int, list[int]] = {}
    for row, node in enumerate(kept):
        layers.setdefault(node.layer, []).append(row)
    return TreeVectors(_tag(state), kept, matrix, {node.id: row for row, node in enumerate(kept)},
                       {layer: np.asarray(rows, dtype=np.int64) for layer, rows in layers.items()})


class InMemoryTree:
    """A channel's :class:`TreeQueries` answered from the served tree's :class:`TreeVectors`;
    any other tree version (the previous one, one being built) is asked of the store.

    The cosines of the last vector asked about are kept: a question's retrieval asks several
    times with its one vector (its nearest leaves, then the cosines of the leaves BM25 found),
    and one product over the tree serves them all."""

    def __init__(self, store: ChannelStore, vectors: TreeVectors) -> None:
        self._store = store
        self._vectors = vectors
        self._last: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def vectors(self) -> TreeVectors:
        """The served tree's nodes and vectors this answers from."""
        return self._vectors

    def serves(self, version: int) -> bool:
        """Whether tree ``version`` is answered from memory."""
        return version == self._vectors.tag[0]

    def query_tree(self, version: int, vector: np.ndarray, n: int, where: dict[str, Any] | None = None,
                   ids: Sequence[str] | None = None) -> list[Hit]:
        if not self.serves(version) or not _simple(where):
            return self._store.query_tree(version, vector, n, where, ids)
        return self._vectors.nearest(vector, n, where, ids, self._cosines(vector))

    def get_nodes(self, version: int, ids: Sequence[str]) -> list[Node]:
        """:meth:`ChannelStore.get_nodes`, from memory for the served tree (an answer citing a
        summary reads the excerpts beneath it, layer by layer: a Chroma read each)."""
        if not self.serves(version):
            return self._store.get_nodes(version, ids)
        rows, nodes = self._vectors.rows, self._vectors.nodes
        return [nodes[rows[node_id]] for node_id in ids if node_id in rows]

    def _cosines(self, vector: np.ndarray) -> np.ndarray:
        last = self._last  # read once: threads may share this tree
        if last is not None and last[0] is vector:
            return last[1]
        cosines = self._vectors.cosines(vector)
        self._last = (vector, cosines)
        return cosines


def nearest_leaves(tree: TreeQueries, version: int, vector: np.ndarray, n: int) -> list[Hit]:
    """The ``n`` leaves of tree ``version`` nearest to ``vector``, best first. In memory, the
    nearest leaves; from Chroma, the leaves among the ``2n`` nearest nodes: one unfiltered query
    twice as deep costs half a query filtered to layer 0 (Chroma filters metadata first)."""
    if isinstance(tree, InMemoryTree) and tree.serves(version):
        return tree.query_tree(version, vector, n, where={"layer": 0})
    return [hit for hit in tree.query_tree(version, vector, 2 * n) if hit.node.layer == 0][:n]


class TreeVectorCache:
    """Served trees' :class:`TreeVectors` of many channels, within :data:`MEMORY_NODES` nodes
    together, least recently asked out. Thread-safe; a read from the store runs outside the lock."""

    def __init__(self, limit: int | None = None) -> None:
        """``limit``: the nodes kept at most (None: :data:`MEMORY_NODES` as it is now)."""
        self._limit = MEMORY_NODES if limit is None else limit
        self._kept: OrderedDict[ChannelKey, TreeVectors] = OrderedDict()
        self._lock = threading.Lock()

    def searched(self, key: ChannelKey, store: ChannelStore, state: TreeState | None) -> TreeQueries:
        """What to search tree ``state`` of channel ``key`` with: its vectors in memory (read
        now if not kept), or ``store`` itself for a tree over the limit or no tree at all."""
        if state is None or sum(state.nodes_per_layer.values()) > self._limit:
            return store
        with self._lock:
            kept = self._kept.get(key)
            if kept is not None and kept.tag == _tag(state):
                self._kept.move_to_end(key)
                return InMemoryTree(store, kept)
        read = tree_vectors(store, state)
        with self._lock:
            self._kept[key] = read
            self._kept.move_to_end(key)
            while self.nodes() > self._limit and len(self._kept) > 1:
                self._kept.popitem(last=False)
        return InMemoryTree(store, read)

    def nodes(self) -> int:
        """How many nodes are kept now, over all channels."""
        return sum(len(kept.nodes) for kept in self._kept.values())

    def kept(self) -> dict[ChannelKey, tuple[int, int, str]]:
        """The (version, revision, tag) of each channel's tree kept, least recently asked first."""
        with self._lock:
            return {key: kept.tag for key, kept in self._kept.items()}


def _tag(state: TreeState) -> tuple[int, int, str]:
    return (state.version, state.revision, state.tag)


def _simple(where: dict[str, Any] | None) -> bool:
    """Whether ``where`` is one this module filters on (none, or plain field equalities)."""
    return where is None or not any(key.startswith("$") for key in where)


def _matches(node: Node, where: dict[str, Any]) -> bool:
    return all(getattr(node, key, None) == value for key, value in where.items())
