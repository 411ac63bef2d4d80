"""What the tree picture and its text outline show of a channel's tree, read from the engine.

:func:`tree_outline` does the reading (blocking Chroma reads: async callers run it in
a thread) and returns a plain :class:`TreeOutline`; :func:`bot.tree_picture.render_png`
draws it and :func:`bot.replies.outline_text` writes it, neither touching the engine.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bot.texts.words import short_id
from raptor_engine import ChannelKey, Node, NodeNotFound, Source, quote

if TYPE_CHECKING:
    from raptor_engine import Engine

log = logging.getLogger(__name__)

SUMMARY_CHARS = 160  # Branch.summary is the node's text cut to about this many characters
MAX_SOURCE_TITLES = 5
TOP_LIMIT = 5  # top-layer nodes kept in an outline (normally there is one root)


@dataclass(frozen=True, slots=True)
class Branch:
    """One node as shown in the picture.

    ``summary`` is the node's text with whitespace folded, cut to about 160
    characters at a word with "…". ``source_titles`` are the distinct titles
    of the sources the node covers, most-covered first, at most five.
    ``children`` is how many nodes it summarises (0 for an excerpt).
    """

    node_id: str
    layer: int
    summary: str
    source_titles: tuple[str, ...]
    children: int


@dataclass(frozen=True, slots=True)
class TreeOutline:
    """What the picture and the text outline show of one channel's tree.

    ``version`` is 0 (and ``top``, ``branches`` and ``nodes_per_layer`` empty)
    when no tree was built yet. ``top`` holds the highest layer's nodes,
    normally the one root; ``branches`` the nodes of the layer below that the
    top nodes summarise, largest first.
    """

    title: str
    version: int
    built_at: str
    sources: int
    pending_sources: int
    nodes_per_layer: dict[int, int]
    top: tuple[Branch, ...]
    branches: tuple[Branch, ...]


def tree_outline(engine: Engine, key: ChannelKey, title: str, max_branches: int = 8) -> TreeOutline:
    """The outline of ``key``'s served tree, captioned ``title``.

    Blocking (Chroma reads); callers in async code run it in a thread.
    ``branches`` are the children of the top nodes, at most ``max_branches``,
    largest (most children, then most tokens) first. A tree replaced by a
    rebuild while this reads it yields fewer branches, never an error.
    """
    stats = engine.stats(key)
    if stats.version == 0:
        return TreeOutline(title, 0, "", stats.sources, stats.pending_sources, {}, (), ())
    titles = _source_titles(engine.sources(key))
    top_nodes = engine.top_nodes(key, TOP_LIMIT)
    children = _children_of(engine, key, top_nodes)
    children.sort(key=lambda n: (-len(n.children), -n.tokens, n.id))
    return TreeOutline(
        title=title,
        version=stats.version,
        built_at=stats.built_at,
        sources=stats.sources,
        pending_sources=stats.pending_sources,
        nodes_per_layer=dict(stats.nodes_per_layer),
        top=tuple(branch_of(node, titles) for node in top_nodes),
        branches=tuple(branch_of(node, titles) for node in children[: max(0, max_branches)]),
    )


def branch_of(node: Node, titles: dict[str, str]) -> Branch:
    """``node`` as a :class:`Branch`; ``titles`` maps source ids to titles.

    A source missing from ``titles`` (removed since the build) is named by the
    node's own title if it is the node's main source, else by its short id.
    """
    names: list[str] = []
    for rank, source_id in enumerate(node.source_ids):
        name = titles.get(source_id) or (node.title if rank == 0 and node.title else f"source {short_id(source_id)}")
        if name not in names:
            names.append(name)
        if len(names) == MAX_SOURCE_TITLES:
            break
    if not names and node.title:
        names.append(node.title)
    return Branch(node.id, node.layer, quote(node.text, SUMMARY_CHARS), tuple(names), len(node.children))


def _source_titles(sources: list[Source]) -> dict[str, str]:
    return {source.id: source.title for source in sources}


def _children_of(engine: Engine, key: ChannelKey, parents: list[Node]) -> list[Node]:
    """The distinct children of ``parents``, in the order met."""
    found: dict[str, Node] = {}
    for parent in parents:
        if not parent.children:
            continue
        try:
            view = engine.node(key, parent.id)
        except NodeNotFound:
            log.info("node %s left the tree while it was being outlined", parent.id)
            continue
        for child in view.children:
            found.setdefault(child.id, child)
    return list(found.values())
