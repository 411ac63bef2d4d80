"""How trees are written down: the served state, tree places, and nodes as Chroma records.

Contract: pure conversions, no Chroma call. A node is one record: its text under
``TEXT_KEY``, the rest in metadata (:func:`node_metadata`), and in the pool also its tree's
tag, version, slot, index ``k`` and node count (:func:`pool_metadata`). These layouts are
what stores on disk hold: a change of them comes with a step of ``migrations.py`` that
rewrites what was written before (and a new ``STORE_FORMAT``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from raptor_engine.store.common import TEXT_KEY
from raptor_engine.types import Node

_NODE_KEYS = (TEXT_KEY, "node", "layer", "tokens", "title", "link", "ordinal", "start", "end", "children", "parents", "sources")
# The metadata update that frees a pool record: it keeps only its slot and index (Chroma's
# update merges keys; None removes one), and is marked free (``TreePool.free`` may tag it).
FREE_METADATA: dict[str, Any] = {"tree": "free", "version": None, "count": None, **{k: None for k in _NODE_KEYS}}


@dataclass(frozen=True, slots=True)
class TreeState:
    """What is served for a channel: which tree version, built how and from what."""

    version: int
    built_at: str
    embedder_id: str
    source_ids: tuple[str, ...]  # forgotten sources are taken out: no trace of them is kept
    nodes_per_layer: dict[int, int]
    revision: int = 0  # bumped when nodes are removed from the served tree (forget)
    forgotten: int = 0  # sources of this build forgotten since: their summaries wait for a rebuild
    slot: int = -1  # where in the channel's tree pool it is; -1 until placed (a build's state, before its switch)
    tag: str = ""  # the build's unique name of the tree (its records carry it); "" until placed
    # Sources of this build replaced by a new version since (an edited message, a file uploaded
    # again): the build's id -> the id of the version now standing for it. Counted apart from
    # ``forgotten``, so status can say how many sources *changed*, not just came and went.
    replaced: dict[str, str] = field(default_factory=dict)
    # Summaries of this build kept when a source under them was replaced, because they quote none
    # of the text it lost: shown marked "may be outdated" until the next rebuild.
    outdated: int = 0
    # What the build was made with (embedding model, chunk size, summariser, clustering): a digest
    # to tell whether a rebuild with nothing changed would build the same tree. "" before it was kept.
    recipe: str = ""

    def added_among(self, source_ids: Iterable[str]) -> set[str]:
        """Those of ``source_ids`` added to the channel since this build: in none of its
        sources, and no new version standing for one of them (see ``replaced``)."""
        return set(source_ids) - set(self.source_ids) - set(self.replaced.values())


@dataclass(frozen=True, slots=True)
class TreePlace:
    """Where a tree is: its slot in the channel's tree pool and its tag. A tree's place never
    changes (a later tree has a version and tag of its own)."""

    version: int
    slot: int
    tag: str


def node_metadata(node: Node) -> dict[str, Any]:
    """Chroma metadata of a node (empty lists are left out: Chroma refuses them)."""
    metadata: dict[str, Any] = {
        "layer": node.layer,
        "tokens": node.tokens,
        "title": node.title,
        "link": node.link,
        "ordinal": node.ordinal,
        "start": node.start,
        "end": node.end,
    }
    for name, values in (("children", node.children), ("parents", node.parents), ("sources", node.source_ids)):
        if values:
            metadata[name] = list(values)
    return metadata


def node_from(node_id: str, metadata: dict[str, Any]) -> Node:
    """A node rebuilt from its Chroma record's metadata (lists left out when empty, as written)."""
    return Node(
        id=node_id,
        layer=int(metadata["layer"]),
        text=str(metadata[TEXT_KEY]),
        tokens=int(metadata["tokens"]),
        children=tuple(metadata.get("children") or ()),
        parents=tuple(metadata.get("parents") or ()),
        source_ids=tuple(metadata.get("sources") or ()),
        title=str(metadata["title"]),
        link=str(metadata["link"]),
        ordinal=int(metadata["ordinal"]),
        start=int(metadata["start"]),
        end=int(metadata["end"]),
    )


def pool_metadata(node: Node, place: TreePlace, k: int, count: int) -> dict[str, Any]:
    """A pool record's metadata: the node's, with every key it lacks set to None (a record
    written over keeps no key of the tree before), its tree, and its place in the pool."""
    metadata: dict[str, Any] = {name: None for name in _NODE_KEYS}
    metadata.update(node_metadata(node), node=node.id, tree=place.tag, version=place.version,
                    slot=place.slot, k=k, count=count)
    metadata[TEXT_KEY] = node.text
    return metadata


def state_metadata(state: TreeState, previous: TreePlace | None) -> dict[str, Any]:
    """The ``state`` record's metadata: ``state`` served, ``previous`` kept for readers in flight."""
    return {
        "version": state.version,
        "built_at": state.built_at,
        "embedder": state.embedder_id,
        "layers": json.dumps({str(k): v for k, v in sorted(state.nodes_per_layer.items())}),
        "revision": state.revision,
        "forgotten": state.forgotten,
        "replaced": json.dumps(state.replaced, sort_keys=True),
        "outdated": state.outdated,
        "recipe": state.recipe,
        "slot": state.slot,
        "tag": state.tag,
        # One JSON field, never left out: Chroma's upsert merges metadata keys.
        "previous": _place_json(previous),
        "sources": list(state.source_ids) if state.source_ids else None,
    }


def state_from(meta: dict[str, Any]) -> TreeState:
    """The served state from the ``state`` record's metadata (``sources`` left out when none)."""
    return TreeState(
        version=int(meta["version"]),
        built_at=str(meta["built_at"]),
        embedder_id=str(meta["embedder"]),
        source_ids=tuple(meta.get("sources") or ()),
        nodes_per_layer={int(k): int(v) for k, v in json.loads(str(meta["layers"])).items()},
        revision=int(meta["revision"]),
        forgotten=int(meta["forgotten"]),
        replaced={str(k): str(v) for k, v in json.loads(str(meta["replaced"])).items()},
        outdated=int(meta.get("outdated") or 0),  # states written before it was counted hold none
        recipe=str(meta.get("recipe") or ""),  # nor a recipe: such a tree is always rebuilt
        slot=int(meta["slot"]),
        tag=str(meta["tag"]),
    )


def _place_json(place: TreePlace | None) -> str:
    return json.dumps({"version": place.version, "slot": place.slot, "tag": place.tag} if place else None)


def place_from_json(raw: Any) -> TreePlace | None:
    """The place a ``previous`` field of the ``state`` record names (JSON), or None for none."""
    data = json.loads(str(raw))
    return TreePlace(int(data["version"]), int(data["slot"]), str(data["tag"])) if data else None


def all_of(*clauses: dict[str, Any] | None) -> dict[str, Any]:
    """One Chroma where clause requiring every given clause (None and empty ones left out)."""
    present = [clause for clause in clauses if clause]
    return present[0] if len(present) == 1 else {"$and": present}
