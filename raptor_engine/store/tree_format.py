"""How trees are written down: the served state, tree places, and nodes as Chroma records.

Contract: pure conversions, no Chroma call. A node is one record: its text under
``TEXT_KEY``, the rest in metadata (:func:`node_metadata`), and in the pool also its tree's
tag, version, slot, index ``k`` and node count (:func:`_pool_metadata`). These layouts are
what stores on disk hold: they change only with a way to read what was written before.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

from raptor_engine.store.common import TEXT_KEY, _text_of
from raptor_engine.types import Node

_LEGACY = -1  # the slot of a tree kept in a collection of its own, as older stores did
_NODE_KEYS = (TEXT_KEY, "node", "layer", "tokens", "title", "link", "ordinal", "start", "end", "children", "parents", "sources")
# A freed record keeps only its slot and index (Chroma's update merges keys; None removes one).
_FREE_METADATA: dict[str, Any] = {"tree": "free", "version": None, "count": None, **{k: None for k in _NODE_KEYS}}


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
    slot: int = -1  # where in the channel's tree pool it is; -1: a collection of its own (older stores)
    tag: str = ""  # the build's unique name of the tree (its records carry it); "" for older stores
    # Sources of this build replaced by a new version since (an edited message, a file uploaded
    # again): the build's id -> the id of the version now standing for it. Counted apart from
    # ``forgotten``, so status can say how many sources *changed*, not just came and went.
    replaced: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Place:
    """Where a tree is: its pool slot and tag, or (slot -1) the collection ``-t<version>``."""

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


def node_from(node_id: str, document: str | None, metadata: dict[str, Any]) -> Node:
    """A node rebuilt from its Chroma record."""
    return Node(
        id=node_id,
        layer=int(metadata["layer"]),
        text=_text_of(document, metadata),
        tokens=int(metadata["tokens"]),
        children=tuple(metadata.get("children") or ()),
        parents=tuple(metadata.get("parents") or ()),
        source_ids=tuple(metadata.get("sources") or ()),
        title=str(metadata.get("title", "")),
        link=str(metadata.get("link", "")),
        ordinal=int(metadata.get("ordinal", -1)),
        start=int(metadata.get("start", -1)),
        end=int(metadata.get("end", -1)),
    )


def _pool_metadata(node: Node, place: _Place, k: int, count: int) -> dict[str, Any]:
    """A pool record's metadata: the node's, with every key it lacks set to None (a record
    written over keeps no key of the tree before), its tree, and its place in the pool."""
    metadata: dict[str, Any] = {name: None for name in _NODE_KEYS}
    metadata.update(node_metadata(node), node=node.id, tree=place.tag, version=place.version,
                    slot=place.slot, k=k, count=count)
    metadata[TEXT_KEY] = node.text
    return metadata


def _state_metadata(state: TreeState, previous: _Place | None) -> dict[str, Any]:
    """The ``state`` record's metadata: ``state`` served, ``previous`` kept for readers in flight."""
    return {
        "version": state.version,
        "built_at": state.built_at,
        "embedder": state.embedder_id,
        "layers": json.dumps({str(k): v for k, v in sorted(state.nodes_per_layer.items())}),
        "revision": state.revision,
        "forgotten": state.forgotten,
        "replaced": json.dumps(state.replaced, sort_keys=True),
        "slot": state.slot,
        "tag": state.tag,
        # One JSON field, never left out: Chroma's upsert merges metadata keys.
        "previous": _place_json(previous),
        "sources": list(state.source_ids) if state.source_ids else None,
    }


def _state_from(meta: dict[str, Any]) -> TreeState:
    """The served state from the ``state`` record's metadata (older stores' lack slot and tag)."""
    return TreeState(
        version=int(meta["version"]),
        built_at=str(meta["built_at"]),
        embedder_id=str(meta["embedder"]),
        source_ids=tuple(meta.get("sources") or ()),
        nodes_per_layer={int(k): int(v) for k, v in json.loads(str(meta["layers"])).items()},
        revision=int(meta.get("revision", 0)),
        forgotten=int(meta.get("forgotten", 0)),
        replaced={str(k): str(v) for k, v in json.loads(str(meta.get("replaced") or "{}")).items()},
        slot=int(meta.get("slot", _LEGACY)),
        tag=str(meta.get("tag", "")),
    )


def _place_json(place: _Place | None) -> str:
    return json.dumps({"version": place.version, "slot": place.slot, "tag": place.tag} if place else None)


def _place_from_json(raw: Any) -> _Place | None:
    data = json.loads(str(raw)) if raw else None
    return _Place(int(data["version"]), int(data["slot"]), str(data["tag"])) if data else None


def _served_slot(places: dict[int, _Place]) -> int | None:
    """The slot of the served tree (the newest of the served and previous places), if any."""
    return places[max(places)].slot if places else None


def _matches(node: Node, where: dict[str, Any]) -> bool:
    """Whether a node passes the simple where clauses callers give (``{"layer": n}``)."""
    return all(getattr(node, key, None) == value for key, value in where.items() if not key.startswith("$"))


def _all_of(*clauses: dict[str, Any] | None) -> dict[str, Any]:
    """One Chroma where clause requiring every given clause."""
    present = [clause for clause in clauses if clause]
    return present[0] if len(present) == 1 else {"$and": present}


def _sources_of(metadatas: list[dict[str, Any]]) -> tuple[str, ...]:
    return tuple(sorted({str(s) for m in metadatas if int(m.get("layer", 0)) == 0 for s in m.get("sources") or []}))


def _without_source(state: TreeState, source_id: str, removed: Counter[int], successor: str = "") -> TreeState:
    """The served state after ``source_id`` was forgotten and ``removed`` nodes (per layer) went.
    With a ``successor`` (the id of the source's new version), a source of the build is
    counted as replaced rather than forgotten, and a replacement that stood for it now
    points at the successor (a message edited twice is one changed source)."""
    left = {layer: count - removed[layer] for layer, count in state.nodes_per_layer.items()}
    of_build = source_id in state.source_ids
    replaced = {old: (successor if new == source_id and successor else new) for old, new in state.replaced.items()}
    if of_build and successor:
        replaced[source_id] = successor
    return replace(
        state,
        source_ids=tuple(i for i in state.source_ids if i != source_id),
        # Readers key what they derive from the tree (the BM25 index) on the revision;
        # the counts per layer follow what is left, so status tells the truth.
        revision=state.revision + (1 if removed else 0),
        nodes_per_layer={k: v for k, v in left.items() if v > 0},
        # The id goes, but the count stays: the summaries above it still want a rebuild.
        forgotten=state.forgotten + (1 if of_build and not successor else 0),
        replaced=replaced,
    )


def _without_links(metadata: dict[str, Any], removed: set[str]) -> dict[str, Any]:
    updated = dict(metadata)
    for name in ("children", "parents"):
        kept = [i for i in metadata.get(name) or [] if i not in removed]
        # Chroma refuses empty lists; an update with None removes the key.
        updated[name] = kept or None
    return updated
