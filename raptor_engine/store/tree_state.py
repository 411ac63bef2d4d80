"""Which tree a channel serves, where its trees are, and healing a served tree that is gone.

Contract: the ``state`` record of ``rc-<digest>-meta`` names the served tree (version, slot,
tag, layer sizes, sources) and the previous one, kept for readers in flight. A switch to a new
tree rewrites that one record: one write, so a crash leaves either the old tree or the new one
served, never a mixture. A state naming a tree that is gone or broken (a racing build on
another process wrote over it, or an older version left it so) heals when read: the newest
complete tree is served instead, and a warning says so. Read, change and write of the state happen under the
channel's state lock (:meth:`TreePool.state_lock`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any

from raptor_engine.errors import StoreError
from raptor_engine.store.common import PLACEHOLDER_VECTOR, ChannelCollections, log, translated
from raptor_engine.store.tree_format import TreePlace, TreeState, place_from_json, state_from, state_metadata
from raptor_engine.store.tree_pool import TreePool


class TreeStates:
    """The served state and the places of the trees this store knows. Methods raise ``StoreError``."""

    def __init__(self, collections: ChannelCollections, pool: TreePool) -> None:
        self._at = collections
        self._pool = pool
        self.known: dict[int, TreePlace] = {}  # trees served now or before, by version (never change)
        self.written: dict[int, TreePlace] = {}  # trees this store wrote, by version
        self._present: set[str] = set()  # served trees seen to exist (checked once)
        self._parsed: tuple[dict[str, Any], TreeState] | None = None  # the last record read, parsed

    def forget(self) -> None:
        """Forgets every place known: a drop deleted the trees."""
        self.known.clear()
        self.written.clear()
        self._present.clear()
        self._parsed = None

    def live(self) -> TreeState | None:
        """The served tree's state, or None if no tree was ever built; a missing tree healed first."""
        state = self.read()
        if state is not None and self._is_missing(state):
            return self._heal(state)
        return state

    def read(self) -> TreeState | None:
        """The served state as stored (not healed), noting where it and the previous tree are.
        Parsed once per record read: every question reads it, and a remembered record is the
        same object until this process writes again (``write_clock.py``)."""
        kept = self._kept_meta()
        if kept is None:
            return None
        parsed = self._parsed
        if parsed is not None and parsed[0] is kept:
            return parsed[1]
        meta = dict(kept)
        state = state_from(meta)
        self.known[state.version] = TreePlace(state.version, state.slot, state.tag)
        previous = place_from_json(meta["previous"])
        if previous is not None:
            self.known[previous.version] = previous
        self._parsed = (kept, state)
        return state

    def _read_meta(self) -> dict[str, Any] | None:
        """A copy of the state record as stored."""
        kept = self._kept_meta()
        return dict(kept) if kept is not None else None

    def _kept_meta(self) -> dict[str, Any] | None:
        """The state record as stored; every question reads it, so it is kept until this
        process writes to the store again (``write_clock.py``): not to be changed."""
        return self._at.remembered.get("state", self._read_stored_meta)

    def _read_stored_meta(self) -> dict[str, Any] | None:
        with translated("reading the tree state"):
            got = self._at.kept("meta").get(ids=["state"], include=["metadatas"])
        return dict(got["metadatas"][0]) if got["metadatas"] else None

    def write(self, state: TreeState, previous: TreePlace | None) -> None:
        """Serves ``state`` from now on, ``previous`` kept for readers in flight: one write."""
        meta = state_metadata(state, previous)
        with translated("switching to the new tree"):
            self._at.open("meta").upsert(ids=["state"], metadatas=[meta], embeddings=[PLACEHOLDER_VECTOR])
        self.known[state.version] = TreePlace(state.version, state.slot, state.tag)

    def served_places(self) -> dict[int, TreePlace]:
        """Where the served tree and the previous one are, by version (read now)."""
        meta = self._read_meta()
        if meta is None:
            return {}
        served = TreePlace(int(meta["version"]), int(meta["slot"]), str(meta["tag"]))
        previous = place_from_json(meta["previous"])
        return {p.version: p for p in (previous, served) if p is not None}

    def place(self, version: int) -> TreePlace:
        """Where tree ``version`` is: the served or previous tree (or one written here).
        Raises ``StoreError`` for any other: it is no longer stored, or never was."""
        if version not in self.known:
            self.known.update(self.served_places())
        if version in self.known:
            return self.known[version]
        if version in self.written:
            return self.written[version]
        raise StoreError(f"tree v{version} is no longer stored (a newer tree is served)")

    def place_of(self, state: TreeState) -> TreePlace:
        """Where the tree of a state about to be served is: its own tag, or one written here.
        Raises ``StoreError`` for a tree this store did not write."""
        if state.tag:
            return TreePlace(state.version, state.slot, state.tag)
        if state.version in self.written:
            return self.written[state.version]
        raise StoreError(f"tree v{state.version} was not written by this store; it cannot be served")

    def recheck_if_served(self, slot: int) -> None:
        """After writing to ``slot``: if a tree there got served meanwhile, this build may have
        written over it; the served state is checked afresh (and healed if broken)."""
        served = self.read()
        if served is None or served.slot != slot:
            return
        log.info("channel %s: another build's tree v%d was served from the slot this build wrote to; "
                 "checking it", self._at.key, served.version)
        self._present.discard(f"{served.version}.{served.tag}")
        self.live()

    def _is_missing(self, state: TreeState) -> bool:
        """Whether the served tree is gone or broken: fewer of its records are there (its own,
        or freed by a forget) than it had. Another builder that chose the same slot can write
        over it (two processes on one Chroma server; nothing there makes the choice and the
        write one step). Checked once per tree and process: one read."""
        key = f"{state.version}.{state.tag}"
        if key in self._present or not sum(state.nodes_per_layer.values()):
            return False
        with translated("checking the served tree"):
            found = self._whole(state.tag, sum(state.nodes_per_layer.values()))
        if found:
            self._present.add(key)
        return not found

    def _whole(self, tag: str, at_least: int) -> bool:
        """Whether the pool holds at least ``at_least`` records of the tree ``tag``, counting
        those a forget freed (marked ``free:<tag>``; the served state's counts drop only
        after they are freed, so a reader in between must not see a broken tree)."""
        got = self._pool.collection().get(where={"tree": {"$in": [tag, f"free:{tag}"]}}, include=[])["ids"]
        return len(got) >= at_least > 0

    def _heal(self, missing: TreeState) -> TreeState:
        """Serves the newest complete tree instead of the missing one, and says so."""
        with self._pool.state_lock():
            state = self.read()
            if state is None or not self._is_missing(state):
                return state  # type: ignore[return-value]  # healed meanwhile
            found = self._newest_complete()
            if found is None:
                log.warning("channel %s: the served tree v%d is missing and no other complete tree is "
                            "stored; a rebuild makes a new one", self._at.key, missing.version)
                return state
            place, layers, source_ids = found
            healed = replace(state, version=place.version, slot=place.slot, tag=place.tag,
                             nodes_per_layer=layers, source_ids=source_ids, revision=state.revision + 1)
            self.write(healed, None)
        log.warning("channel %s: the served tree v%d is missing; serving v%d, the newest complete tree, "
                    "instead (a rebuild brings it up to date)", self._at.key, missing.version, place.version)
        return healed

    def _newest_complete(self) -> tuple[TreePlace, dict[int, int], tuple[str, ...]] | None:
        """The newest stored tree whose every node is there, with its layer sizes and sources."""
        with translated("looking for a complete tree"):
            pool = self._pool.collection()
            firsts = pool.get(where={"k": 0}, include=["metadatas"])["metadatas"] or []
            candidates = [TreePlace(int(m["version"]), int(m["slot"]), str(m["tree"]))
                          for m in firsts if m.get("version") is not None]
            for place in sorted(candidates, key=lambda p: -p.version):
                metas = pool.get(where={"tree": place.tag}, include=["metadatas"])["metadatas"] or []
                if metas and self._whole(place.tag, int(metas[0]["count"])):
                    return place, dict(Counter(int(m["layer"]) for m in metas)), _sources_of(metas)
        return None


def _sources_of(metadatas: list[dict[str, Any]]) -> tuple[str, ...]:
    return tuple(sorted({str(s) for m in metadatas if int(m["layer"]) == 0 for s in m.get("sources") or []}))
