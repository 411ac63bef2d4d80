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
    """What retrieval asks of a tree: its nearest nodes to a vector (``ChannelStore`` has it)."""

    def query_tree(self, version: int, vector: np.ndarray, n: int, where: dict[str, Any] | None = None,
                   ids: Sequence[str] | None = None) -> list[Hit]:
        """Nodes of tree ``version`` nearest to ``vector``, best first; ``where`` a simple
        ``{"layer": n}``, ``ids`` the nodes to choose among."""
        ...


@dataclass(frozen=True, slots=True)
class TreeVectors:
    """Every node of one served tree (``tag``: its version, revision and store tag) and their unit
    vectors, row for row."""

    tag: tuple[int, int, str]
    nodes: tuple[Node, ...]
    vectors: np.ndarray
    rows: dict[str, int] = field(default_factory=dict)

    def nearest(self, vector: np.ndarray, n: int, where: dict[str, Any] | None = None,
                ids: Sequence[str] | None = None) -> list[Hit]:
        """Up to ``n`` nodes by cosine to ``vector``, best first (ties in row order); among
        ``ids`` (unknown ones skipped) and those matching ``where`` when given."""
        if ids is not None:
            candidates = np.asarray([self.rows[i] for i in dict.fromkeys(ids) if i in self.rows], dtype=np.int64)
        else:
            candidates = np.arange(len(self.nodes))
        if where is not None:
            candidates = np.asarray([row for row in candidates if _matches(self.nodes[row], where)], dtype=np.int64)
        if n <= 0 or candidates.size == 0:
            return []
        whole = ids is None and where is None  # every row: no copy of the matrix
        scores = (self.vectors if whole else self.vectors[candidates]) @ unit(vector)
        order = np.argsort(-scores, kind="stable")[:n]
        return [Hit(self.nodes[candidates[i]], float(scores[i])) for i in order]


def tree_vectors(store: ChannelStore, state: TreeState) -> TreeVectors:
    """The nodes and unit vectors of tree ``state``, read from the store (one read per layer,
    one for the vectors)."""
    nodes = [node for layer in sorted(state.nodes_per_layer) for node in store.list_layer(state.version, layer, 10**9)]
    stored = store.get_tree_embeddings(state.version, [node.id for node in nodes])
    kept = tuple(node for node in nodes if node.id in stored)
    matrix = unit_rows(np.vstack([stored[node.id] for node in kept])) if kept else np.zeros((0, 0), np.float32)
    return TreeVectors(_tag(state), kept, matrix, {node.id: row for row, node in enumerate(kept)})


class InMemoryTree:
    """A channel's :class:`TreeQueries` answered from the served tree's :class:`TreeVectors`;
    any other tree version (the previous one, one being built) is asked of the store."""

    def __init__(self, store: ChannelStore, vectors: TreeVectors) -> None:
        self._store = store
        self._vectors = vectors

    @property
    def vectors(self) -> TreeVectors:
        """The served tree's nodes and vectors this answers from."""
        return self._vectors

    def query_tree(self, version: int, vector: np.ndarray, n: int, where: dict[str, Any] | None = None,
                   ids: Sequence[str] | None = None) -> list[Hit]:
        if version != self._vectors.tag[0] or not _simple(where):
            return self._store.query_tree(version, vector, n, where, ids)
        return self._vectors.nearest(vector, n, where, ids)


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
