"""Building a channel's tree: writing it into the pool beside the served one, switching to it,
and freeing what builds leave behind.

Contract: a rebuild writes a whole new tree, under a tag of its own, into a slot that does not
hold the served tree (:meth:`TreeBuilds.write`), then switches by rewriting the single served
state (:meth:`TreeBuilds.switch`). The switch serves only a complete tree newer than the served
one. The previous tree stays until the next build writes over it, so a reader that has just
looked up the old version can still finish its query; older trees are freed at the switch.
Storage stays bounded: records are written over in place, never deleted (see ``tree_pool.py``).
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from raptor_engine.errors import StoreError
from raptor_engine.store.common import ChannelCollections, log, translated
from raptor_engine.store.tree_format import TreePlace, TreeState
from raptor_engine.store.tree_pool import TREE_SLOTS, TreePool
from raptor_engine.store.tree_state import TreeStates
from raptor_engine.types import Node


class TreeBuilds:
    """Writes of new trees and the switch to them. Methods raise ``StoreError``."""

    def __init__(self, collections: ChannelCollections, pool: TreePool, states: TreeStates) -> None:
        self._at = collections
        self._pool = pool
        self._states = states

    def next_version(self) -> int:
        """A version number above every tree of this channel this process can see
        (another process may pick the same one: trees are told apart by their tag)."""
        state = self._states.read()
        with translated("listing tree versions"):
            firsts = self._pool.collection().get(where={"k": 0}, include=["metadatas"])["metadatas"] or []
            versions = [int(m["version"]) for m in firsts if m.get("version") is not None]
            versions += list(self._states.written)
        return max([state.version if state else 0, *versions]) + 1

    def write(self, version: int, nodes: Sequence[Node], embeddings: np.ndarray) -> None:
        """Writes a complete tree as ``version``, beside the served one (not yet served).

        Raises ``StoreError`` if the slot it writes to is served meanwhile (another
        process switched to a tree there): it never writes on over a served tree. Looking
        and writing are two steps, so a batch may still land on a tree served between
        them; then the served tree is checked at once, and the channel heals to the newest
        complete tree if it was broken (see :meth:`TreeStates.live`).
        """
        with self._pool.write_lock(), translated("writing the new tree"):
            place = TreePlace(version, self._free_slot(), f"{version}.{uuid.uuid4().hex[:8]}")
            self._states.written[version] = place
            try:
                for start, end in self._at.batches(len(nodes)):
                    self._claim(place.slot)
                    self._pool.put(place, nodes, embeddings, start, end)
                # What a larger former tree left in this slot is freed, and reused next time.
                self._pool.free_beyond(place.slot, len(nodes))
            finally:
                self._states.recheck_if_served(place.slot)

    def _free_slot(self) -> int:
        """The first slot not holding the served tree, preferring one the previous tree is not in."""
        places = self._states.served_places()
        open_slots = [slot for slot in range(TREE_SLOTS) if slot != _served_slot(places)]
        untouched = [slot for slot in open_slots if slot not in {p.slot for p in places.values()}]
        return min(untouched or open_slots)

    def _claim(self, slot: int) -> None:
        if _served_slot(self._states.served_places()) == slot:
            raise StoreError("another rebuild of this channel finished meanwhile and its tree is served")

    def switch(self, state: TreeState) -> bool:
        """Serves ``state.version`` from now on (one write) if it is complete and newer than the
        served tree; False, with nothing changed, if a newer (or the same) version is served.
        Trees of other builds are left alone (one may be about to be served); the previous
        tree stays for readers in flight. Raises ``StoreError`` if the tree is incomplete."""
        place = self._states.place_of(state)
        with self._pool.state_lock():
            served = self._states.read()
            if served is not None and state.version <= served.version:
                log.warning("channel %s: tree v%d was built while v%d got served; v%d stays served",
                            self._at.key, state.version, served.version, served.version)
                return False
            layers = self._check_complete(place, state.nodes_per_layer)
            previous = TreePlace(served.version, served.slot, served.tag) if served else None
            self._states.write(replace(state, slot=place.slot, tag=place.tag, nodes_per_layer=layers), previous)
        self._free_dead_trees(place, previous)
        return True

    def _free_dead_trees(self, served: TreePlace, previous: TreePlace | None) -> None:
        """Frees the trees older than the one just served, but the previous one: none of them can
        be served again (a switch serves only a newer tree), and each is one more tree a query
        of the pool would search through."""
        keep = {served.tag, previous.tag if previous else ""}
        with translated("freeing old trees"):
            pool = self._pool.collection()
            firsts = pool.get(where={"k": 0}, include=["metadatas"])["metadatas"] or []
            dead = {str(m["tree"]) for m in firsts
                    if m.get("version") is not None and int(m["version"]) < served.version and m["tree"] not in keep}
            for tag in sorted(dead):
                self._pool.free(pool.get(where={"tree": tag}, include=[])["ids"])

    def _check_complete(self, place: TreePlace, layers: dict[int, int]) -> dict[int, int]:
        """The tree's nodes per layer, once it is seen complete: none of its records was written
        over by another build. A forget may have freed some meanwhile (they are left out of the
        counts). Raises ``StoreError`` if it is incomplete."""
        expected = sum(layers.values())
        with translated("checking the new tree"):
            got = self._pool.collection().get(where={"slot": place.slot}, include=["metadatas"])["metadatas"] or []
        trees = {int(m["k"]): m.get("tree") for m in got}
        mine_metas = [m for m in got if m.get("tree") == place.tag]
        # Every record it wrote is there, or was freed by a forget (which marks it so).
        others = sum(1 for k in range(expected) if trees.get(k) not in (place.tag, f"free:{place.tag}"))
        mine = len(mine_metas)
        if others:
            raise StoreError(f"tree v{place.version} is incomplete ({mine} of {expected} nodes); it is not served")
        if mine == expected:
            return layers
        return dict(Counter(int(m["layer"]) for m in mine_metas))

    def discard(self, version: int) -> None:
        """Frees the records of a tree this store wrote as ``version`` and never served
        (a failed build); nothing if it is served or the previous one."""
        place = self._states.written.pop(version, None)
        if place is None or place.tag in {p.tag for p in self._states.served_places().values()}:
            return
        with translated("dropping an unfinished tree"):
            pool = self._pool.collection()
            self._pool.free(pool.get(where={"tree": place.tag}, include=[])["ids"])

    def drop_stale(self) -> None:
        """Frees trees this store wrote that never got served (crashed or failed builds). Trees
        other processes are writing are left alone; a crashed process's leftovers are written
        over by the next build."""
        for version in list(self._states.written):
            self.discard(version)


def _served_slot(places: dict[int, TreePlace]) -> int | None:
    """The slot of the served tree (the newest of the served and previous places), if any."""
    return places[max(places)].slot if places else None
