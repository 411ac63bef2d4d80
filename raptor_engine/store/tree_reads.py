"""Reading a channel's trees: nearest-node queries and lookups of nodes, texts and embeddings.

Contract: every read names a tree by version; the version is found in the pool by its tag, and
records of any other tree in the pool are never returned. Readers of the served or the previous tree may finish
while a build writes the next one. Node ids, not record ids, go in and come out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from raptor_engine.store.common import TEXT_KEY, translated
from raptor_engine.store.tree_format import TreePlace, all_of, node_from
from raptor_engine.store.tree_pool import TREE_SLOTS, TreePool
from raptor_engine.store.tree_state import TreeStates
from raptor_engine.types import Hit, Node


class TreeReads:
    """Reads of tree nodes, with what is cached to make them fast. Methods raise ``StoreError``."""

    def __init__(self, pool: TreePool, states: TreeStates) -> None:
        self._pool = pool
        self._states = states
        self._rids: dict[str, dict[str, str]] = {}  # per tree tag: node id -> record id
        self._tree_counts: dict[str, int] = {}  # per served tree tag: trees in the pool then

    def forget(self) -> None:
        """Forgets what is cached of trees: a drop deleted them."""
        self._rids.clear()
        self._tree_counts.clear()

    def query(
        self,
        version: int,
        vector: np.ndarray,
        n: int,
        where: dict[str, Any] | None = None,
        ids: Sequence[str] | None = None,
    ) -> list[Hit]:
        """Nodes of a tree version nearest to ``vector``, best first, through Chroma's index."""
        if n <= 0 or (ids is not None and not ids):
            return []
        with translated("searching the tree"):
            place = self._states.place(version)
            if ids is not None:
                hits = self._query_by_ids(place, vector, n, ids)
            elif where is None:
                hits = self._query_unfiltered(place, vector, n)
            else:
                hits = self._query_pool(vector, n, all_of({"tree": place.tag}, where))[0]
        return [hit for hit in hits if where is None or _matches(hit.node, where)][:n]

    def _query_pool(self, vector: np.ndarray, n: int, where: dict[str, Any] | None,
                    record_ids: list[str] | None = None, tag: str = "") -> tuple[list[Hit], int]:
        """Chroma's nearest records, as hits of the tree ``tag`` (others dropped) if given, and
        how many records Chroma returned."""
        got = self._pool.collection().query(query_embeddings=[vector], n_results=n, where=where, ids=record_ids,
                                            include=["metadatas", "distances"])
        hits = [
            Hit(node=node_from(str(m["node"]), m), score=1.0 - float(dist))
            for m, dist in zip(got["metadatas"][0], got["distances"][0])
            if not tag or m.get("tree") == tag
        ]
        return hits, len(got["ids"][0])

    def _query_unfiltered(self, place: TreePlace, vector: np.ndarray, n: int) -> list[Hit]:
        """The ``n`` nearest nodes of one tree. Chroma filters metadata before it searches, which
        made a query several times slower (measured: p50 22 ms against 1.6 ms on 3 x 1,200
        records): the pool is searched unfiltered, as deep as the trees it holds need (the
        served one and the previous one, usually; freed records lie far from any question),
        and only if that finds too few of this tree is the filtered query asked. A pool that
        returned fewer records than it holds was not searched whole: Chroma's graph index can
        lose track of a record written over in place (a server test saw 25 of 26 now and then)."""
        depth = n * self._trees_in_pool(place)
        hits, returned = self._query_pool(vector, depth, None, tag=place.tag)
        if len(hits) >= n:
            return hits[:n]
        if returned < depth and returned >= self._pool.collection().count():  # the whole pool was searched
            return hits
        return self._query_pool(vector, n, {"tree": place.tag})[0]

    def _trees_in_pool(self, place: TreePlace) -> int:
        """How many trees the pool holds, counted once per served tree (a build running
        elsewhere adds one meanwhile: the query then falls back to the filtered one)."""
        if place.tag not in self._tree_counts:
            if len(self._tree_counts) > TREE_SLOTS:
                self._tree_counts.clear()  # counts of trees no longer served
            firsts = self._pool.collection().get(where={"k": 0}, include=["metadatas"])["metadatas"] or []
            self._tree_counts[place.tag] = max(1, sum(1 for m in firsts if m.get("version") is not None))
        return self._tree_counts[place.tag]

    def _query_by_ids(self, place: TreePlace, vector: np.ndarray, n: int, ids: Sequence[str]) -> list[Hit]:
        """Nodes with these ids nearest to ``vector``, looked up by their record ids (as fast as
        Chroma gets) rather than by a metadata filter."""
        record_ids = self._record_ids(place, ids)
        if not record_ids:
            return []
        return self._query_pool(vector, min(n, len(record_ids)), None, record_ids, place.tag)[0]

    def _record_ids(self, place: TreePlace, ids: Sequence[str]) -> list[str]:
        """The pool record ids of these nodes of a tree (unknown nodes left out). A tree's records
        keep their ids until a later build writes over them, and then carry another tag."""
        if place.tag not in self._rids:
            got = self._pool.collection().get(where={"tree": place.tag}, include=["metadatas"])
            self._rids[place.tag] = {str(m["node"]): rid for rid, m in zip(got["ids"], got["metadatas"])}
            while len(self._rids) > TREE_SLOTS:
                del self._rids[next(iter(self._rids))]
        known = self._rids[place.tag]
        return [known[i] for i in dict.fromkeys(ids) if i in known]

    def nodes(self, version: int, ids: Sequence[str]) -> list[Node]:
        """The nodes with these ids in a tree version (missing ids are skipped), in the order asked."""
        if not ids:
            return []
        with translated("reading nodes"):
            node_ids, got = self._records_by_ids(version, ids, ["metadatas"])
        found = {i: node_from(i, m) for i, m in zip(node_ids, got["metadatas"])}
        return [found[i] for i in ids if i in found]

    def texts(self, version: int) -> tuple[list[str], list[str], list[str]]:
        """The ids, texts and titles of every node of a tree version (to index them lexically);
        a leaf's title is its source's, a summary's is empty."""
        with translated("reading node texts"):
            node_ids, metadatas = self._records(version, None)
        titles = [str(m["title"]) if m["layer"] == 0 else "" for m in metadatas]
        return node_ids, [str(m[TEXT_KEY]) for m in metadatas], titles

    def layer(self, version: int, layer: int, limit: int) -> list[Node]:
        """Up to ``limit`` nodes of one layer of a tree version, widest (most children) first."""
        with translated("reading a layer"):
            node_ids, metadatas = self._records(version, {"layer": layer})
        nodes = [node_from(i, m) for i, m in zip(node_ids, metadatas)]
        return sorted(nodes, key=lambda n: (-len(n.children), n.id))[:limit]

    def embeddings(self, version: int, ids: Sequence[str]) -> dict[str, np.ndarray]:
        """The stored embeddings of some nodes of a tree version, by id."""
        if not ids:
            return {}
        with translated("reading node embeddings"):
            node_ids, got = self._records_by_ids(version, ids, ["embeddings", "metadatas"])
        return {i: np.asarray(v, dtype=np.float32) for i, v in zip(node_ids, got["embeddings"])}

    def _records(self, version: int, where: dict[str, Any] | None) -> tuple[list[str], list[dict[str, Any]]]:
        """The node ids and metadatas of one tree's records (those matching ``where``)."""
        place = self._states.place(version)
        metadatas = self._pool.collection().get(where=all_of({"tree": place.tag}, where), include=["metadatas"])["metadatas"]
        return [str(m["node"]) for m in metadatas], metadatas

    def _records_by_ids(self, version: int, ids: Sequence[str], include: list[str]) -> tuple[list[str], dict[str, Any]]:
        """``get`` of some nodes of one pooled tree by record id; records of another tree dropped."""
        place = self._states.place(version)
        record_ids = self._record_ids(place, ids)
        got = self._pool.collection().get(ids=record_ids, include=include) if record_ids else {name: [] for name in include}
        keep = [i for i, m in enumerate(got["metadatas"]) if m.get("tree") == place.tag]
        picked = {name: [got[name][i] for i in keep] for name in include}
        return [str(got["metadatas"][i]["node"]) for i in keep], picked


def _matches(node: Node, where: dict[str, Any]) -> bool:
    """Whether a node passes the simple where clauses callers give (``{"layer": n}``)."""
    return all(getattr(node, key, None) == value for key, value in where.items() if not key.startswith("$"))
