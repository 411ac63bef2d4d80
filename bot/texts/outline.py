"""The tree outline: a few lines of text, and every label drawn in the tree picture.

:func:`outline_text` is the text sent with the picture; the other functions and
constants are the picture's words, which :mod:`bot.tree_picture` only fits into
boxes. Both say the same things the same way (one meta line, one hint, one
children count), so the text and the picture never disagree.
"""

from __future__ import annotations

from bot.texts.tree import layers_text
from bot.texts.words import capitalised, count, when
from bot.tree_outline import SUMMARY_CHARS, Branch, TreeOutline
from raptor_engine import quote

TITLE_CHARS = 200  # the channel title in outline_text
SOURCE_TITLE_CHARS = 80  # each source title in outline_text
OPEN_HINT = "Send `node ID` to read a node in full."
SINGLE_LAYER = "No branches: the tree has a single layer of excerpts."
NO_TREE_HEADLINE = "No tree built yet"
LAYERS_HEADING = "Layers"
NO_NODES = "The tree has no nodes."
NO_BRANCHES = "No branches to show."
UNTITLED = "(untitled channel)"
PICTURE_FOOTER = f"Layer 0 holds excerpts of the sources; each layer above summarises the one below. {OPEN_HINT}"


def outline_text(outline: TreeOutline) -> str:
    """A few plain-text lines: the tree's version and layers with counts, the root's
    summary, then one line per branch with its node id, children count and source
    titles. Node ids are shown so a person can run ``node ID`` on them. Summaries
    and titles are folded onto one line and cut, so each item stays one line."""
    title = quote(outline.title, TITLE_CHARS)
    if outline.version == 0:
        return f"{title}: no tree built yet. {no_tree_hint(outline.sources)}"
    lines = [f"{title}: {meta_line(outline)}.", f"{LAYERS_HEADING}: {layers_text(outline.nodes_per_layer)}."]
    lines += _top_lines(outline.top)
    if outline.branches:
        lines.append(f"Branches (layer {outline.branches[0].layer}, largest first):")
        lines += [f"- {b.node_id}: {children_text(b)}{_from_text(b.source_titles)}" for b in outline.branches]
    elif outline.top and outline.top[0].layer == 0:
        lines.append(SINGLE_LAYER)
    lines.append(OPEN_HINT)
    return "\n".join(lines)


def _top_lines(top: tuple[Branch, ...]) -> list[str]:
    if not top:
        return []
    if len(top) == 1:
        root = top[0]
        return [f"Root {root.node_id} (layer {root.layer}, {children_text(root)}): {quote(root.summary, SUMMARY_CHARS)}"]
    lines = [f"Top layer {top[0].layer} has {count(len(top), 'node')} shown:"]
    return lines + [f"- {b.node_id} ({children_text(b)}): {quote(b.summary, SUMMARY_CHARS)}" for b in top]


def _from_text(titles: tuple[str, ...]) -> str:
    return ", from " + "; ".join(f"“{quote(t, SOURCE_TITLE_CHARS)}”" for t in titles) if titles else ""


# -- shared by the text and the picture ------------------------------------------------


def meta_line(outline: TreeOutline) -> str:
    """``tree v3, built 2024-05-01 14:03 UTC from 2 sources; up to date`` (or how many changes wait)."""
    pending = outline.pending_sources
    waiting = f"{count(pending, 'change')} {'waits' if pending == 1 else 'wait'} for a rebuild"
    state = waiting if pending else "up to date"
    return f"tree v{outline.version}, built {when(outline.built_at)} from {count(outline.sources, 'source')}; {state}"


def no_tree_hint(sources: int) -> str:
    """What to do when no tree was built yet, with ``sources`` already added."""
    if sources:
        return f"{count(sources, 'source')} added; run rebuild to build the summary tree."
    return "Add files or pin messages, then run rebuild to build the summary tree."


def children_text(branch: Branch) -> str:
    """``excerpt`` for a leaf, else ``1 child`` or ``N children``."""
    return "excerpt" if branch.layer == 0 else count(branch.children, "child", "children")


# -- the picture's labels ---------------------------------------------------------------


def picture_header(outline: TreeOutline) -> tuple[str, str]:
    """The picture's title and the muted line under it."""
    meta = meta_line(outline) if outline.version else f"{count(outline.sources, 'source')}, no tree built yet"
    return outline.title or UNTITLED, capitalised(meta)


def layer_label(layer: int) -> str:
    """``Layer 0 · excerpts``, ``Layer 2 · summaries`` (the count is drawn beside it)."""
    return f"Layer {layer} · {'excerpts' if layer == 0 else 'summaries'}"


def hidden_layers_note(hidden: int) -> str:
    """Under a layer panel too tall to draw whole."""
    return f"({count(hidden, 'middle layer')} not shown)"


def top_heading(top: tuple[Branch, ...]) -> tuple[str, str]:
    """The heading and note of the top box: the root, or the first of several top nodes."""
    root = top[0]
    if len(top) == 1:
        return f"Root {root.node_id}", f"layer {root.layer} · {children_text(root)}"
    return f"Top node {root.node_id}", f"1 of {len(top)} at layer {root.layer} · {children_text(root)}"


def branches_heading(layer: int, shown: int, in_layer: int) -> str:
    """Above the branch boxes: which layer, in what order, and how many of how many."""
    return f"Branches · layer {layer} · largest first · showing {shown:,} of {in_layer:,}"


def branch_note(branch: Branch) -> str:
    """Under a branch box's node id: its layer (for summaries) and children count."""
    return children_text(branch) if branch.layer == 0 else f"layer {branch.layer} · {children_text(branch)}"


def no_branches_text(outline: TreeOutline) -> str:
    """Where the branches would be, when there are none."""
    return SINGLE_LAYER if outline.top and outline.top[0].layer == 0 else NO_BRANCHES
