"""Forgetting a source in a channel's trees: its nodes go from every stored tree at once.

Contract: the nodes covering the source are freed in the pool, whatever tree they belong to
(served, previous or unfinished), and unlinked
from their trees' other nodes, so each tree stays consistent until the next rebuild restores
the summaries of the other sources. The served state then loses the source's id, and its
counts the nodes that went. The pool is written under the channel's write lock, so a build of
the same channel in this process never has its new records freed by a forget's earlier read.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from raptor_engine.store.common import TEXT_KEY, translated
from raptor_engine.store.tree_format import TreeState, all_of
from raptor_engine.store.tree_pool import TreePool
from raptor_engine.store.tree_state import TreeStates

Keep = Callable[[str], bool]
"""Whether a summary (given its text) may stay when a source under it is replaced."""


class TreeForget:
    """Removal of a forgotten source's nodes from the channel's trees. Raises ``StoreError``."""

    def __init__(self, pool: TreePool, states: TreeStates) -> None:
        self._pool = pool
        self._states = states

    def remove_source(self, source_id: str, successor: str = "", keep: Keep | None = None) -> int:
        """Deletes, from every stored tree, the nodes that cover ``source_id``, and takes its id
        out of the served state; the number of nodes deleted from the served tree. A
        ``successor`` is the id of the source's new version: the state counts the source as
        replaced by it, not as forgotten (see ``TreeState.replaced``). With a successor,
        ``keep`` says which summaries may stay (given a summary's text): those stay, standing
        for the successor instead (so forgetting it takes them too), counted ``outdated``."""
        with self._pool.write_lock(), translated("removing a source from the tree"):
            removed, kept = self._remove_from_pool(source_id, successor, keep if successor else None)
        with self._pool.state_lock():
            # Read now, not before: a build may have switched over while the nodes went.
            state = self._states.read()
            if state is None:
                return 0
            removed_live = removed.get(state.tag, Counter())
            if removed_live or source_id in state.source_ids or source_id in state.replaced.values():
                previous = self._states.served_places()
                previous.pop(state.version, None)
                updated = _without_source(state, source_id, removed_live, successor)
                updated = replace(updated, outdated=updated.outdated + kept.get(state.tag, 0))
                self._states.write(updated, next(iter(previous.values()), None))
        return sum(removed_live.values())

    def _remove_from_pool(self, source_id: str, successor: str,
                          keep: Keep | None) -> tuple[dict[str, Counter[int]], Counter[str]]:
        """Frees the pool's records covering ``source_id`` (whatever tree they belong to) and
        unlinks them from their trees' other nodes; how many went per tree tag and layer, and
        how many summaries ``keep`` kept per tree tag (they now cover ``successor``)."""
        pool = self._pool.collection()
        found = pool.get(where={"sources": {"$contains": source_id}}, include=["metadatas"])
        records = list(zip(found["ids"], found["metadatas"] or []))
        staying = [(i, m) for i, m in records if keep is not None and int(m["layer"]) > 0 and keep(str(m[TEXT_KEY]))]
        stay_ids = {i for i, _ in staying}
        doomed = [(i, m) for i, m in records if i not in stay_ids]
        if staying:
            pool.update(ids=[i for i, _ in staying], metadatas=[_standing_for(m, source_id, successor) for _, m in staying])
        by_tree: dict[str, list[dict[str, Any]]] = {}
        for _, metadata in doomed:
            by_tree.setdefault(str(metadata["tree"]), []).append(metadata)
        self._pool.free([i for i, _ in doomed], [str(m["tree"]) for _, m in doomed])
        removed: dict[str, Counter[int]] = {}
        for tag, metadatas in by_tree.items():
            removed[tag] = Counter(int(m["layer"]) for m in metadatas)
            gone = {str(m["node"]) for m in metadatas}
            neighbours = {i for m in metadatas for name in ("children", "parents") for i in m.get(name) or []}
            survivors = sorted(neighbours - gone)
            if not survivors:
                continue
            affected = pool.get(where=all_of({"tree": tag}, {"node": {"$in": survivors}}), include=["metadatas"])
            if affected["ids"]:
                pool.update(ids=affected["ids"], metadatas=[_without_links(m, gone) for m in affected["metadatas"]])
        return removed, Counter(str(m["tree"]) for _, m in staying)


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


def _standing_for(metadata: dict[str, Any], source_id: str, successor: str) -> dict[str, Any]:
    """A kept summary's metadata with ``successor`` in place of ``source_id`` among its sources."""
    sources = [successor if s == source_id else s for s in metadata.get("sources") or []]
    return {**metadata, "sources": list(dict.fromkeys(sources))}


def _without_links(metadata: dict[str, Any], removed: set[str]) -> dict[str, Any]:
    updated = dict(metadata)
    for name in ("children", "parents"):
        kept = [i for i in metadata.get(name) or [] if i not in removed]
        # Chroma refuses empty lists; an update with None removes the key.
        updated[name] = kept or None
    return updated
