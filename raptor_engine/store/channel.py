"""All storage of one channel, as one object: :class:`ChannelStore`.

Contract: a thin aggregate. Each method hands its call to the part that owns the record kind
(``sources.py``, ``leaves.py``, ``summaries.py``, ``answers.py``, ``notes.py`` and the tree
modules ``tree_*.py``), whose docstrings give the details. Only what spans kinds is done here:
deleting a source's derived records in a safe order, and dropping the whole channel. The parts
share one :class:`ChannelCollections` (client and collection names), and the tree parts one
:class:`TreePool` and :class:`TreeStates` (handles, locks and what is known of the trees).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from raptor_engine.store.answers import Answers
from raptor_engine.store.common import ChannelCollections, translated
from raptor_engine.store.leaves import Leaves
from raptor_engine.store.notes import Notes
from raptor_engine.store.sources import Sources, SourceState
from raptor_engine.store.summaries import Summaries
from raptor_engine.store.tree_builds import TreeBuilds
from raptor_engine.store.tree_forget import Keep, TreeForget
from raptor_engine.store.tree_format import TreeState
from raptor_engine.store.tree_pool import TreePool
from raptor_engine.store.tree_reads import TreeReads
from raptor_engine.store.tree_state import TreeStates
from raptor_engine.store.write_clock import WriteClock
from raptor_engine.types import AnswerRecord, ChannelKey, Chunk, Hit, Node, Source


class ChannelStore:
    """All storage of one channel. Methods raise ``StoreError`` on Chroma failures."""

    def __init__(self, client: Any, key: ChannelKey, digest: str, clock: WriteClock | None = None) -> None:
        """``clock``: the embedded store's count of this process's writes (see ``write_clock.py``),
        None on a Chroma server."""
        self.key = key
        self._collections = ChannelCollections(client, key, digest, clock)
        self._sources = Sources(self._collections)
        self._leaves = Leaves(self._collections)
        self._summaries = Summaries(self._collections)
        self._answers = Answers(self._collections)
        self._notes = Notes(self._collections)
        self._tree_pool = TreePool(self._collections)
        self._tree_states = TreeStates(self._collections, self._tree_pool)
        self._tree_builds = TreeBuilds(self._collections, self._tree_pool, self._tree_states)
        self._tree_reads = TreeReads(self._tree_pool, self._tree_states)
        self._tree_forget = TreeForget(self._tree_pool, self._tree_states)

    # -- the whole channel ---------------------------------------------------

    def holds_no_source(self) -> bool:
        """Whether the channel holds no source at all, in any state (storing, stored or
        forgetting): nothing is left to build from or to finish."""
        return self._sources.holds_none()

    def drop(self) -> int:
        """Deletes every collection of the channel (``rc-<digest>-*``: sources, leaf and summary
        caches, trees of every layout, state and notes, answers) and then its registry entry;
        returns how many records they held (0: nothing worth reclaiming). Idempotent.

        The caller makes sure the channel holds no source and that no writer of it runs in
        this process (the engine does both). A writer in another process re-creates what it
        writes to afterwards, and removes the forgotten text from it as after any forget (see
        the package docstring). On a Chroma server this is all a client can do: the server
        keeps the deleted collections' files (chroma issue 5259).
        """
        records = self._collections.drop()
        # Every handle and fact cached about the collections the drop deleted goes too.
        self._tree_pool.forget()
        self._tree_states.forget()
        self._tree_reads.forget()
        return records

    # -- sources -----------------------------------------------------------

    def put_source(self, source: Source, text: str, state: SourceState = SourceState.STORED) -> None:
        """Stores a source's text and description in one write, in ``state``."""
        self._sources.put(source, text, state)

    def get_source(self, source_id: str) -> Source | None:
        """The listed (stored) source with this id, or None."""
        record = self.source_record(source_id)
        return record[0] if record and record[1] is SourceState.STORED else None

    def source_record(self, source_id: str) -> tuple[Source, SourceState] | None:
        """The source with this id and its state, whatever the state; None if there is no record."""
        return self._sources.record(source_id)

    def set_source_state(self, source_id: str, state: SourceState) -> None:
        """Changes a source's state in one write; does nothing if the source has no record."""
        self._sources.set_state(source_id, state)

    def list_sources(self, external_id: str | None = None) -> list[Source]:
        """Every listed (stored) source of the channel, oldest first; with
        ``external_id``, only the sources of that message or file (one lookup)."""
        return self._sources.listed(external_id)

    def sources_in_state(self, state: SourceState) -> list[str]:
        """The ids of the sources in ``state``, e.g. forgets that were interrupted."""
        return self._sources.in_state(state)

    def forgotten_among(self, source_ids: Iterable[str]) -> set[str]:
        """Those of ``source_ids`` that are being or have been forgotten (no record, or ``FORGETTING``).

        Called after writing data derived from sources: see the package docstring.
        """
        return self._sources.forgotten_among(source_ids)

    def source_text(self, source_id: str) -> str:
        """The full text of a stored source."""
        return self._sources.text(source_id)

    def delete_source(self, source_id: str) -> None:
        """Removes a source's cached leaves (every profile), the cached summaries covering it,
        the answers citing it, and last its text: if this stops half-way, the record is still
        there to find. Trees are not touched (see :meth:`remove_source_from_trees`)."""
        # Both caches' profiles are found by name in one listing of the database's collections:
        # on a server it grows with every channel (about a second at 3,000 collections).
        with translated("listing the cached leaves and summaries"):
            listed = self._collections.names()
        self._leaves.delete(source_id, among=listed)
        self._summaries.delete_covering(source_id, among=listed)
        # Answers quote their sources: they go with them.
        self._answers.delete_citing(source_id)
        self._sources.delete(source_id)

    # -- answers and votes ----------------------------------------------------

    def put_answer(self, record: AnswerRecord) -> None:
        """Keeps an answer with its question (replacing one with the same id)."""
        self._answers.put(record)

    def pass_answers_on(self, source_id: str, successor: str,
                        quoting: Callable[[AnswerRecord], bool] = lambda _: False) -> list[AnswerRecord]:
        """Makes the answers citing ``source_id`` cite ``successor`` (its new version) instead,
        marked as citing material that changed after they were given; those ``quoting`` says
        quote what the successor no longer says are deleted instead. Returns them all as they
        were before (``changed`` says which were marked already). Forgetting the successor
        later removes them as it would its own answers."""
        return self._answers.pass_on(source_id, successor, quoting)

    def prune_answers(self, keep: int) -> int:
        """Deletes the oldest kept answers beyond the newest ``keep``; returns how many went."""
        return self._answers.prune(keep)

    def get_answer(self, answer_id: str) -> AnswerRecord | None:
        """The kept answer with this id, or None."""
        return self._answers.get(answer_id)

    def list_answers(self) -> list[AnswerRecord]:
        """Every kept answer, oldest first."""
        return self._answers.listed()

    # -- leaf cache --------------------------------------------------------

    def put_leaves(self, profile: str, chunks: Sequence[Chunk], embeddings: np.ndarray) -> None:
        """Caches a source's chunks with their embeddings under a profile."""
        self._leaves.put(profile, chunks, embeddings)

    def has_leaves(self, profile: str, source_id: str) -> bool:
        """Whether any leaf of the source is cached under ``profile``."""
        return self._leaves.has(profile, source_id)

    def cached_leaves(self, profile: str, source_ids: Sequence[str]) -> dict[str, tuple[list[Chunk], np.ndarray]]:
        """The cached chunks and embeddings of those sources that have them, by source id."""
        return self._leaves.cached(profile, source_ids)

    def delete_leaves(self, source_id: str, profile: str | None = None) -> None:
        """Removes a source's cached leaves of one profile, or of every profile if None."""
        self._leaves.delete(source_id, profile)

    # -- summary cache -----------------------------------------------------

    def cached_summaries(self, profile: str, keys: Sequence[str]) -> dict[str, tuple[str, np.ndarray]]:
        """Cached summary texts and embeddings by cache key, for the keys that have one."""
        return self._summaries.cached(profile, keys)

    def put_summaries(
        self, profile: str, entries: Sequence[tuple[str, str, Sequence[str]]], embeddings: np.ndarray
    ) -> None:
        """Caches summaries as (key, text, source ids) with their embeddings."""
        self._summaries.put(profile, entries, embeddings)

    def prune_summaries(self, profile: str, keep: set[str]) -> None:
        """Drops cached summaries not in ``keep`` (those no served tree uses)."""
        self._summaries.prune(profile, keep)

    # -- notes ---------------------------------------------------------------

    def notes(self) -> dict[str, str]:
        """The channel's notes: small named strings kept with its tree (e.g. a pending rebuild request)."""
        return self._notes.read()

    def set_note(self, name: str, value: str | None) -> None:
        """Sets the note ``name`` to ``value``; None removes it. Read, change, write: callers
        changing the same channel's notes from several processes must coordinate."""
        self._notes.set(name, value)

    # -- trees -------------------------------------------------------------

    def live_state(self) -> TreeState | None:
        """The served tree's state, or None if no tree was ever built. A state naming a tree
        that is missing is healed first: the newest complete tree is served (and a warning logged)."""
        return self._tree_states.live()

    def next_version(self) -> int:
        """A version number above every tree of this channel this process can see
        (another process may pick the same one: trees are told apart by their tag)."""
        return self._tree_builds.next_version()

    def write_tree(self, version: int, nodes: Sequence[Node], embeddings: np.ndarray) -> None:
        """Writes a complete tree as ``version``, beside the served one (not yet served).
        Raises ``StoreError`` if the slot it writes to is served meanwhile."""
        self._tree_builds.write(version, nodes, embeddings)

    def switch_to(self, state: TreeState) -> bool:
        """Serves ``state.version`` from now on (one write) if it is complete and newer than the
        served tree; False, with nothing changed, if a newer (or the same) version is served.
        Raises ``StoreError`` if the tree is incomplete."""
        return self._tree_builds.switch(state)

    def discard_tree(self, version: int) -> None:
        """Frees the records of a tree this store wrote as ``version`` and never served
        (a failed build); nothing if it is served or the previous one."""
        self._tree_builds.discard(version)

    def drop_stale_trees(self) -> None:
        """Frees trees this store wrote that never got served (crashed or failed builds)."""
        self._tree_builds.drop_stale()

    def query_tree(
        self,
        version: int,
        vector: np.ndarray,
        n: int,
        where: dict[str, Any] | None = None,
        ids: Sequence[str] | None = None,
    ) -> list[Hit]:
        """Nodes of a tree version nearest to ``vector``, best first, through Chroma's index."""
        return self._tree_reads.query(version, vector, n, where, ids)

    def get_nodes(self, version: int, ids: Sequence[str]) -> list[Node]:
        """The nodes with these ids in a tree version (missing ids are skipped), in the order asked."""
        return self._tree_reads.nodes(version, ids)

    def node_texts(self, version: int) -> tuple[list[str], list[str], list[str]]:
        """The ids, texts and titles of every node of a tree version (to index them lexically);
        a leaf's title is its source's, a summary's is empty."""
        return self._tree_reads.texts(version)

    def list_layer(self, version: int, layer: int, limit: int) -> list[Node]:
        """Up to ``limit`` nodes of one layer of a tree version, widest (most children) first."""
        return self._tree_reads.layer(version, layer, limit)

    def get_tree_embeddings(self, version: int, ids: Sequence[str]) -> dict[str, np.ndarray]:
        """The stored embeddings of some nodes of a tree version, by id."""
        return self._tree_reads.embeddings(version, ids)

    def remove_source_from_trees(self, source_id: str, successor: str = "", keep: Keep | None = None) -> int:
        """Deletes, from every stored tree (served, previous or unfinished), the nodes that
        cover ``source_id``, and takes its id out of the served state.

        References to the deleted nodes are removed from the remaining nodes'
        children and parents, so the tree stays consistent until the next
        rebuild restores the summaries of the other sources. Returns the number
        of nodes deleted from the served tree. ``successor`` and ``keep``: see
        ``TreeForget.remove_source``.
        """
        return self._tree_forget.remove_source(source_id, successor, keep)
