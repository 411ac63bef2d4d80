"""Choosing the nodes that answer a question, through Chroma's index.

Three modes, as in the paper:

- *collapsed* (default, the paper's best): every layer searched together,
  nodes taken best first while they fit the token budget; with ``hybrid``
  on, the dense ranking is fused with a BM25 ranking of the same nodes
  (reciprocal-rank fusion), so exact words count as well as meaning;
- *traversal*: the top layer first, then only the children of the nodes
  chosen, ``per_layer`` nodes at each layer down to the leaves;
- *leaves*: leaves only, the flat baseline.

Leaves of sources added since the served build (not yet in any tree) are
searched too, so new material is found before the next rebuild.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from raptor_engine.chunking import sentences
from raptor_engine.lexical import LexicalIndex
from raptor_engine.store import ChannelStore, TreeState
from raptor_engine.tokens import token_floor
from raptor_engine.types import Hit, Node, RetrievalMode

DEFAULT_BUDGET = 2000  # tokens: the paper's best collapsed-tree context
DEFAULT_TOP_K = 40  # at most this many nodes, whatever the budget
DEFAULT_PER_LAYER = 5  # traversal: nodes kept at each layer
MAX_SUMMARY_OVERLAP = 0.5  # collapsed: a summary repeating more of chosen sentences is skipped
RRF_K = 60  # reciprocal-rank fusion's damping constant (Cormack et al., 2009)


@dataclass(frozen=True, slots=True)
class RetrievalSettings:
    """How many nodes and tokens a retrieval may return."""

    mode: RetrievalMode = RetrievalMode.COLLAPSED
    budget: int = DEFAULT_BUDGET
    top_k: int = DEFAULT_TOP_K
    per_layer: int = DEFAULT_PER_LAYER
    hybrid: bool = True


@dataclass(frozen=True, slots=True)
class Query:
    """A question as retrieval needs it: its text (for BM25) and its embedding."""

    text: str
    vector: np.ndarray


def retrieve(
    store: ChannelStore,
    state: TreeState | None,
    pending: Sequence[str],
    leaf_profile: str,
    query: Query,
    settings: RetrievalSettings,
    lexical: LexicalIndex | None = None,
) -> list[Hit]:
    """The hits for a query, in rank order, within ``settings.budget`` tokens.

    ``state`` is the served tree (None before the first build); ``pending`` the
    ids of sources not yet in it, searched in the leaf cache under ``leaf_profile``;
    ``lexical`` the served tree's BM25 index, used in hybrid collapsed mode.
    Each hit's score is its cosine similarity to the question; the rank is the
    dense one, or the fused one in hybrid mode.
    """
    pool = settings.top_k * 2
    vector = query.vector
    if state is None:
        ranked: list[Hit] = []
    elif settings.mode is RetrievalMode.TRAVERSAL:
        ranked = _by_score(_traverse(store, state, vector, settings.per_layer))
    elif settings.mode is RetrievalMode.LEAVES:
        ranked = store.query_tree(state.version, vector, pool, where={"layer": 0})
    else:
        ranked = store.query_tree(state.version, vector, pool)
        if settings.hybrid and lexical is not None:
            ranked = _fuse(store, state, query, ranked, lexical.top(query.text, pool))
    # Leaves of sources not yet built in are merged by cosine, ahead of tree nodes they beat.
    fresh = store.query_leaves(leaf_profile, vector, pending, pool)
    # Collapsed mode mixes layers, so a summary may repeat leaves already taken;
    # traversal keeps its path through the layers whole.
    overlap = MAX_SUMMARY_OVERLAP if settings.mode is RetrievalMode.COLLAPSED else None
    return fill_budget(_merge_by_score(ranked, fresh), settings.budget, settings.top_k, overlap)


def _fuse(
    store: ChannelStore, state: TreeState, query: Query, dense: list[Hit], lexical: list[tuple[str, float]]
) -> list[Hit]:
    """Dense and BM25 rankings of the same nodes fused by reciprocal rank.

    Nodes found only lexically get their cosine from Chroma (one query
    restricted to their ids), so every hit keeps a comparable score.
    """
    known = {hit.node.id: hit for hit in dense}
    missing = [node_id for node_id, _ in lexical if node_id not in known]
    for hit in store.query_tree(state.version, query.vector, len(missing), ids=missing):
        known[hit.node.id] = hit
    fused: dict[str, float] = {}
    for ranking in ([hit.node.id for hit in dense], [node_id for node_id, _ in lexical]):
        for rank, node_id in enumerate(ranking):
            fused[node_id] = fused.get(node_id, 0.0) + 1.0 / (RRF_K + rank + 1)
    order = sorted((node_id for node_id in fused if node_id in known), key=lambda i: (-fused[i], i))
    return [known[node_id] for node_id in order]


def _by_score(hits: Sequence[Hit]) -> list[Hit]:
    return sorted(hits, key=lambda h: (-h.score, h.node.id))


def _merge_by_score(ranked: list[Hit], fresh: list[Hit]) -> list[Hit]:
    """``ranked`` in its order, with each of ``fresh`` (best first) placed before the
    first ranked hit it scores higher than."""
    if not fresh:
        return ranked
    merged: list[Hit] = []
    pending = _by_score(fresh)
    for hit in ranked:
        while pending and pending[0].score > hit.score:
            merged.append(pending.pop(0))
        merged.append(hit)
    return merged + pending


def _traverse(store: ChannelStore, state: TreeState, vector: np.ndarray, per_layer: int) -> list[Hit]:
    """Top-down: the best nodes of the top layer, then the best of their children, to the leaves.

    Subtrees of different heights hang under the channel's layers, so children
    are chosen by id, whatever their layer; each step goes at least one layer
    down, so there are at most as many steps as layers.
    """
    top = max(state.nodes_per_layer, default=0)
    chosen = store.query_tree(state.version, vector, per_layer, where={"layer": top})
    selected = list(chosen)
    for _ in range(top):
        children = sorted({child for hit in chosen for child in hit.node.children})
        if not children:
            break
        chosen = store.query_tree(state.version, vector, per_layer, ids=children)
        selected += chosen
    return selected


def fill_budget(ranked: Sequence[Hit], budget: int, top_k: int, max_overlap: float | None = None) -> list[Hit]:
    """The first distinct hits of ``ranked`` whose tokens add up to at most ``budget``.

    Unlike the reference code, which stops at the first node that does not fit,
    a node that does not fit is skipped and smaller ones after it still count.
    With ``max_overlap`` set, a summary whose sentences are already, for more
    than that share of them, in the nodes chosen before it is skipped too: extractive summaries
    repeat their leaves' sentences, and a repeat spends the budget on nothing
    new. Leaves are never skipped for overlap: they are the evidence cited.
    A node costs its :func:`cost`, so the hits hold at most
    ``budget * MAX_CHARS_PER_TOKEN`` characters whatever counts are stored.
    """
    chosen: list[Hit] = []
    seen_ids: set[str] = set()
    seen_sentences: set[str] = set()
    used = 0
    for hit in ranked:
        tokens = cost(hit.node)
        if hit.node.id in seen_ids or used + tokens > budget:
            continue
        sentences = _sentence_set(hit.node.text)
        repeated = len(sentences & seen_sentences)
        if max_overlap is not None and hit.node.layer > 0 and repeated > max_overlap * len(sentences):
            continue
        chosen.append(hit)
        seen_ids.add(hit.node.id)
        seen_sentences |= sentences
        used += tokens
        if len(chosen) >= top_k:
            break
    return chosen


def cost(node: Node) -> int:
    """The tokens ``node`` spends of a budget: its stored count, never under the token floor
    of its length. Nodes stored before the counter charged long unbroken runs by length
    carry counts like 1 for a megabyte of hex; this keeps them from filling a context."""
    return max(node.tokens, token_floor(node.text))


def _sentence_set(text: str) -> set[str]:
    """The node's sentences, whitespace-folded and lower-cased, for overlap tests."""
    return {sentence.lower() for sentence in sentences(text)}
