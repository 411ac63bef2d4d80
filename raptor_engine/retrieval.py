"""Choosing the nodes that answer a question, through Chroma's index.

Three modes, as in the paper:

- *collapsed* (default, the paper's best): every layer searched together,
  nodes taken best first while they fit the token budget;
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

from raptor_engine.store import ChannelStore, TreeState
from raptor_engine.types import Hit, RetrievalMode

DEFAULT_BUDGET = 2000  # tokens: the paper's best collapsed-tree context
DEFAULT_TOP_K = 40  # at most this many nodes, whatever the budget
DEFAULT_PER_LAYER = 5  # traversal: nodes kept at each layer


@dataclass(frozen=True, slots=True)
class RetrievalSettings:
    """How many nodes and tokens a retrieval may return."""

    mode: RetrievalMode = RetrievalMode.COLLAPSED
    budget: int = DEFAULT_BUDGET
    top_k: int = DEFAULT_TOP_K
    per_layer: int = DEFAULT_PER_LAYER


def retrieve(
    store: ChannelStore,
    state: TreeState | None,
    pending: Sequence[str],
    leaf_profile: str,
    vector: np.ndarray,
    settings: RetrievalSettings,
) -> list[Hit]:
    """The hits for a query vector, best first, within ``settings.budget`` tokens.

    ``state`` is the served tree (None before the first build); ``pending`` the
    ids of sources not yet in it, searched in the leaf cache under ``leaf_profile``.
    """
    pool = settings.top_k * 2
    if state is None:
        candidates = []
    elif settings.mode is RetrievalMode.TRAVERSAL:
        candidates = _traverse(store, state, vector, settings.per_layer)
    elif settings.mode is RetrievalMode.LEAVES:
        candidates = store.query_tree(state.version, vector, pool, where={"layer": 0})
    else:
        candidates = store.query_tree(state.version, vector, pool)
    candidates += store.query_leaves(leaf_profile, vector, pending, pool)
    return fill_budget(candidates, settings.budget, settings.top_k)


def _traverse(store: ChannelStore, state: TreeState, vector: np.ndarray, per_layer: int) -> list[Hit]:
    """Top-down: the best nodes of the top layer, then the best of their children, to the leaves."""
    top = max(state.nodes_per_layer, default=0)
    chosen = store.query_tree(state.version, vector, per_layer, where={"layer": top})
    selected = list(chosen)
    for layer in range(top - 1, -1, -1):
        children = sorted({child for hit in chosen for child in hit.node.children})
        if not children:
            break
        chosen = store.query_tree(state.version, vector, per_layer, where={"layer": layer}, ids=children)
        selected += chosen
    return selected


def fill_budget(candidates: Sequence[Hit], budget: int, top_k: int) -> list[Hit]:
    """The best distinct candidates, best first, whose tokens add up to at most ``budget``.

    Unlike the reference code, which stops at the first node that does not fit,
    a node that does not fit is skipped and smaller ones after it still count.
    """
    chosen: list[Hit] = []
    seen: set[str] = set()
    used = 0
    for hit in sorted(candidates, key=lambda h: (-h.score, h.node.id)):
        if hit.node.id in seen or used + hit.node.tokens > budget:
            continue
        chosen.append(hit)
        seen.add(hit.node.id)
        used += hit.node.tokens
        if len(chosen) >= top_k:
            break
    return chosen
