"""The sources of a channel: their text, in segments, in ``rc-<digest>-src``.

Contract: a source is records ``<source id>#<segment>``, each holding up to ``SEGMENT_CHARS``
characters of its text; the first also carries its description and its :class:`SourceState`.
Only a stored source is listed, built from or searched: ingest writes the text as
``storing``, then its leaves, then flips it to ``stored``; forget flips it to ``forgetting``
first and deletes the text last. Whatever writes data derived from sources looks afterwards
whether one of them is forgotten meanwhile (:meth:`Sources.forgotten_among`) and then removes
what it wrote: write first, look second, so no forgotten text survives either order.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum
from typing import Any

from raptor_engine.store.common import PLACEHOLDER_VECTOR, TEXT_KEY, ChannelCollections, translated
from raptor_engine.types import Source, SourceKind

SEGMENT_CHARS = 100_000  # source text is stored in segments of this many characters


class SourceState(str, Enum):
    """Where a source is in its life; only ``STORED`` sources are listed."""

    STORING = "storing"  # text written, leaves not all: invisible; a new upload of it repairs it
    STORED = "stored"  # text and every leaf written
    FORGETTING = "forgetting"  # being removed: invisible; the next rebuild finishes an interrupted forget


class Sources:
    """Reads and writes of the channel's ``src`` collection. Methods raise ``StoreError``."""

    def __init__(self, collections: ChannelCollections) -> None:
        self._at = collections

    def _src(self) -> Any:
        return self._at.open("src")

    def holds_none(self) -> bool:
        """Whether the channel holds no source at all, in any state."""
        with translated("looking for sources"):
            return not self._src().get(limit=1, include=[])["ids"]

    def put(self, source: Source, text: str, state: SourceState) -> None:
        """Stores a source's text and description in one write, in ``state``."""
        segments = [text[i : i + SEGMENT_CHARS] for i in range(0, len(text), SEGMENT_CHARS)] or [""]
        metadatas: list[dict[str, Any]] = [{"source_id": source.id, "segment": i, TEXT_KEY: segment}
                                           for i, segment in enumerate(segments)]
        metadatas[0].update(_source_metadata(source), segments=len(segments), state=state.value)
        self._at.register()  # again after a drop (see ChannelStore.drop)
        with translated("storing a source"):
            self._src().upsert(
                ids=[f"{source.id}#{i}" for i in range(len(segments))],
                metadatas=metadatas,
                embeddings=[PLACEHOLDER_VECTOR] * len(segments),
            )

    def record(self, source_id: str) -> tuple[Source, SourceState] | None:
        """The source with this id and its state, whatever the state; None if there is no record."""
        with translated("reading a source"):
            got = self._src().get(ids=[f"{source_id}#0"], include=["metadatas"])
        metadatas = got["metadatas"] or []
        return (_source_from_metadata(metadatas[0]), _state_of(metadatas[0])) if metadatas else None

    def set_state(self, source_id: str, state: SourceState) -> None:
        """Changes a source's state in one write; does nothing if the source has no record."""
        with translated("changing a source's state"):
            # Chroma merges updated metadata keys and ignores unknown ids: a forgotten source stays gone.
            self._src().update(ids=[f"{source_id}#0"], metadatas=[{"state": state.value}])

    def listed(self, external_id: str | None = None) -> list[Source]:
        """Every listed (stored) source of the channel, oldest first; only those with
        ``external_id`` when it is given (one lookup, not a listing)."""
        if external_id is not None:
            return self._read_listed([{"external_id": external_id}])
        # Every question lists them: kept until this process writes to the store again (write_clock.py).
        return list(self._at.remembered.get("sources", lambda: tuple(self._read_listed([]))))

    def _read_listed(self, clauses: list[dict[str, Any]]) -> list[Source]:
        stored: list[dict[str, Any]] = [{"segment": 0}, {"state": SourceState.STORED.value}, *clauses]
        with translated("listing sources"):
            got = self._at.kept("src").get(where={"$and": stored}, include=["metadatas"])
        sources = [_source_from_metadata(m) for m in got["metadatas"] or []]
        return sorted(sources, key=lambda s: (s.added_at, s.id))

    def in_state(self, state: SourceState) -> list[str]:
        """The ids of the sources in ``state``, e.g. forgets that were interrupted."""
        with translated("listing sources by state"):
            got = self._src().get(where={"state": state.value}, include=["metadatas"])
        return sorted({str(m["source_id"]) for m in got["metadatas"] or []})

    def forgotten_among(self, source_ids: Iterable[str]) -> set[str]:
        """Those of ``source_ids`` that are being or have been forgotten (no record, or ``FORGETTING``)."""
        wanted = sorted(set(source_ids))
        if not wanted:
            return set()
        with translated("checking for forgotten sources"):
            got = self._src().get(ids=[f"{i}#0" for i in wanted], include=["metadatas"])
        alive = {str(m["source_id"]) for m in got["metadatas"] or [] if _state_of(m) is not SourceState.FORGETTING}
        return set(wanted) - alive

    def text(self, source_id: str) -> str:
        """The full text of a stored source."""
        with translated("reading a source's text"):
            got = self._src().get(where={"source_id": source_id}, include=["metadatas"])
        parts = sorted(got["metadatas"] or [], key=lambda m: int(m["segment"]))
        return "".join(str(metadata[TEXT_KEY]) for metadata in parts)

    def delete(self, source_id: str) -> None:
        """Deletes a source's text records: the last step of removing a source."""
        with translated("deleting a source"):
            self._src().delete(where={"source_id": source_id})


def _state_of(metadata: dict[str, Any]) -> SourceState:
    """The state of a source's first segment record."""
    return SourceState(str(metadata["state"]))


def _source_metadata(source: Source) -> dict[str, Any]:
    return {
        "title": source.title,
        "kind": source.kind.value,
        "link": source.link,
        "added_by": source.added_by,
        "added_at": source.added_at,
        "chars": source.chars,
        "external_id": source.external_id,
        "file_name": source.file_name,
    }


def _source_from_metadata(metadata: dict[str, Any]) -> Source:
    return Source(
        id=str(metadata["source_id"]),
        title=str(metadata["title"]),
        kind=SourceKind(str(metadata["kind"])),
        link=str(metadata["link"]),
        added_by=str(metadata["added_by"]),
        added_at=str(metadata["added_at"]),
        chars=int(metadata["chars"]),
        external_id=str(metadata["external_id"]),
        file_name=str(metadata["file_name"]),
    )
