"""Where a channel's trees are kept: the tree pool, and the locks that make a build, a switch
and a forget of one channel take turns within a process.

Contract: trees live in one collection per channel, ``rc-<digest>-tree``: a pool of records in
``TREE_SLOTS`` slots, ids ``<slot>:<k>``. A build writes its tree into the slot that is not
served (the previous tree's), over the records a former tree left there (an upsert of an
existing id updates Chroma's vector index in place; a delete only marks it, and single-node
Chroma never reclaims a deleted record or collection: chroma-core/chroma issue 5259). Each
record names its tree by a tag, unique to the build (``<version>.<random>``): queries are
filtered to the served tag, so two builders that picked one version number never mix.
Records are never deleted from the pool but freed (:meth:`TreePool.free`), to be written over
by a later build.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from raptor_engine.store.common import (
    COSINE_CONFIG,
    ChannelCollections,
    ReopeningCollection,
    open_collection,
)
from raptor_engine.store.tree_format import FREE_METADATA, TreePlace, pool_metadata
from raptor_engine.types import Node

# The served tree and one being built. The one served before stays readable (for queries in
# flight) until the next build writes over it: a third slot kept a third copy of every tree,
# the largest part of a channel's storage, for readers that finish in milliseconds.
TREE_SLOTS = 2
# The served state is read, changed and written back by forget and by a build switching over, from
# different threads: one lock per channel keeps either from undoing the other (within one process).
_STATE_LOCKS: dict[str, threading.Lock] = {}
_STATE_LOCKS_GUARD = threading.Lock()
# A build writes its tree over the previous tree's records; a forget frees the previous tree's
# records of the forgotten source (read, then written: Chroma has no conditional update). Run at
# once, the forget could free records the build had just written, breaking the new tree (a soak
# saw it). One lock per channel makes them take turns within a process; the write is seconds
# long, and a forget's record work takes well under a second. (Two processes on one Chroma
# server can still meet so: the build is then refused as incomplete, or the served tree heals.)
_WRITE_LOCKS: dict[str, threading.Lock] = {}


class TreePool:
    """The channel's tree collections and locks, shared by the parts that read and write trees."""

    def __init__(self, collections: ChannelCollections) -> None:
        self._at = collections
        self._collection: ReopeningCollection | None = None

    def collection(self) -> Any:
        """The channel's tree pool. Its handle is kept (opening costs about half a query), and
        opens the collection again if another process or engine dropped the channel meanwhile."""
        if self._collection is None:
            at = self._at
            self._collection = ReopeningCollection(lambda: open_collection(at.client, f"{at.prefix}-tree", COSINE_CONFIG))
        return self._collection

    def forget(self) -> None:
        """Forgets the kept handle: a drop deleted its collection."""
        self._collection = None

    def put(self, place: TreePlace, nodes: Sequence[Node], embeddings: np.ndarray, start: int, end: int) -> None:
        """Writes nodes ``start:end`` of a tree of ``len(nodes)`` nodes into its place, records
        ``<slot>:<k>``, over whatever those records held. At most one batch (see ``batches``)."""
        self.collection().upsert(
            ids=[f"{place.slot}:{k}" for k in range(start, end)],
            metadatas=[pool_metadata(n, place, k, len(nodes)) for k, n in enumerate(nodes[start:end], start)],
            embeddings=embeddings[start:end],
        )

    def free_beyond(self, slot: int, count: int) -> None:
        """Frees what a larger former tree left in ``slot`` beyond the first ``count`` records
        (reused by a later build)."""
        rest = self.collection().get(where={"$and": [{"slot": slot}, {"k": {"$gte": count}}]}, include=[])["ids"]
        self.free(rest)

    def free(self, record_ids: list[str], trees: list[str] | None = None) -> None:
        """Empties records for reuse: no text, no trace of a source, a random vector.
        Updated, not deleted: Chroma's index reuses an updated record's place, never a deleted one's.
        Records a forget frees (``trees``: their tree tags) are marked ``free:<tag>``, so a
        build checking its tree before the switch tells them from records never written."""
        if not record_ids:
            return
        pool = self.collection()
        dimension = len(pool.get(ids=record_ids[:1], include=["embeddings"])["embeddings"][0])
        # Random, not one placeholder: many equal vectors leave Chroma's HNSW graph unable to
        # reach the other records (a filtered query then found nothing).
        noise = np.random.default_rng().normal(size=(len(record_ids), dimension)).astype(np.float32)
        for start, end in self._at.batches(len(record_ids)):
            part = record_ids[start:end]
            marks = [f"free:{tree}" for tree in trees[start:end]] if trees else ["free"] * len(part)
            pool.update(ids=part, metadatas=[{**FREE_METADATA, "tree": mark} for mark in marks],
                        embeddings=noise[start:end])

    def state_lock(self) -> threading.Lock:
        """Taken by whatever reads, changes and writes back the served state (see ``_STATE_LOCKS``)."""
        with _STATE_LOCKS_GUARD:
            return _STATE_LOCKS.setdefault(self._at.prefix, threading.Lock())

    def write_lock(self) -> threading.Lock:
        """Taken by whatever writes over a tree's records (see ``_WRITE_LOCKS``); before the state lock."""
        with _STATE_LOCKS_GUARD:
            return _WRITE_LOCKS.setdefault(self._at.prefix, threading.Lock())
