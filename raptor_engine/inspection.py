"""What a channel's served tree looks like: its figures, a node with its neighbours, its top nodes.

Contract: functions of one channel's store, reading only (the engine's ``stats``, ``node`` and
``top_nodes`` state the public side). A channel with no tree reads as version 0 with every
source pending, no node and no top nodes.
"""

from __future__ import annotations

from collections.abc import Callable

from raptor_engine.errors import NodeNotFound
from raptor_engine.regression_gate import held_back_reason, last_check
from raptor_engine.store import ChannelStore, TreeState
from raptor_engine.types import ChannelKey, Node, NodeView, TreeStats


def tree_stats(key: ChannelKey, channel: ChannelStore, spanning: Callable[[TreeState], int] = lambda _: 0) -> TreeStats:
    """The served tree's version, size per layer, and how many sources changed since it was
    built: added, removed, or replaced by a new version (each such source counted once).
    Summaries that may be outdated are those kept when a source under them was replaced and,
    when sources were added since, those over several sources (``spanning`` counts them in a
    tree; see ``questions.dated``)."""
    state = channel.live_state()
    source_ids = {s.id for s in channel.list_sources()}
    if state is None:
        return TreeStats(key, 0, "", len(source_ids), {}, len(source_ids))
    standing_in = {new for new in state.replaced.values() if new in source_ids}
    gone_since = sum(1 for new in state.replaced.values() if new not in source_ids)
    added = len(state.added_among(source_ids))
    missing = len(set(state.source_ids) - source_ids)  # as forgotten; a forget finishing now
    pending = added + len(standing_in) + state.forgotten + gone_since + missing
    checked = last_check(channel)
    found, total = (checked.found, checked.total) if checked is not None and checked.version == state.version else (0, 0)
    return TreeStats(key, state.version, state.built_at, len(source_ids), state.nodes_per_layer, pending,
                     changed_sources=len(standing_in), approved_found=found, approved_total=total,
                     held_back=held_back_reason(channel),
                     outdated_summaries=state.outdated + (spanning(state) if added else 0))


def node_view(channel: ChannelStore, node_id: str) -> NodeView:
    """A node of the served tree with its children and parents. Raises ``NodeNotFound``."""
    state = channel.live_state()
    found = channel.get_nodes(state.version, [node_id]) if state else []
    if not found or state is None:
        raise NodeNotFound(f"no node {node_id!r} in this channel's tree")
    node = found[0]
    children = channel.get_nodes(state.version, node.children)
    parents = channel.get_nodes(state.version, node.parents)
    return NodeView(node, tuple(children), tuple(parents))


def top_nodes(channel: ChannelStore, limit: int) -> list[Node]:
    """The nodes of the served tree's highest layer (the root first), at most ``limit``."""
    state = channel.live_state()
    if state is None or not state.nodes_per_layer:
        return []
    return channel.list_layer(state.version, max(state.nodes_per_layer), limit)
