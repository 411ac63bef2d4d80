"""The leaf cache: each source's chunks with their embeddings, per cache profile.

Contract: ``rc-<digest>-leaf-<profile>`` (cosine space) holds one record per chunk, id
``<source id>:<ordinal>``, its text under ``TEXT_KEY`` and its place in the source in the
metadata. A profile names an embedding model and chunk size (see ``profile_digest``), so a
change of either leaves the other profiles' leaves alone. Rebuilds read leaves from here
instead of chunking and embedding again; questions read the leaves of sources not yet built
from here once (``search_indexes``) and search them in memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from raptor_engine.store.common import TEXT_KEY, ChannelCollections, translated
from raptor_engine.types import Chunk, Node


class Leaves:
    """Reads and writes of the channel's leaf caches. Methods raise ``StoreError``."""

    def __init__(self, collections: ChannelCollections) -> None:
        self._at = collections

    def _cache(self, profile: str) -> Any:
        return self._at.open(f"leaf-{profile}", cosine=True)

    def put(self, profile: str, chunks: Sequence[Chunk], embeddings: np.ndarray) -> None:
        """Caches a source's chunks with their embeddings under a profile."""
        if not chunks:
            return
        collection = self._cache(profile)
        with translated("caching leaves"):
            for start, end in self._at.batches(len(chunks)):
                part = chunks[start:end]
                collection.upsert(
                    ids=[f"{c.source_id}:{c.ordinal}" for c in part],
                    metadatas=[_chunk_metadata(c) for c in part],
                    embeddings=embeddings[start:end],
                )

    def has(self, profile: str, source_id: str) -> bool:
        """Whether any leaf of the source is cached under ``profile``."""
        with translated("reading cached leaves"):
            got = self._cache(profile).get(where={"source_id": source_id}, limit=1, include=[])
        return bool(got["ids"])

    def cached(self, profile: str, source_ids: Sequence[str]) -> dict[str, tuple[list[Chunk], np.ndarray]]:
        """The cached chunks and embeddings of those sources that have them, by source id."""
        if not source_ids:
            return {}
        collection = self._cache(profile)
        with translated("reading cached leaves"):
            got = collection.get(
                where={"source_id": {"$in": list(source_ids)}},
                include=["metadatas", "embeddings"],
            )
        grouped: dict[str, list[tuple[Chunk, np.ndarray]]] = {}
        for metadata, vector in zip(got["metadatas"], got["embeddings"]):
            chunk = _chunk_from(metadata)
            grouped.setdefault(chunk.source_id, []).append((chunk, np.asarray(vector, dtype=np.float32)))
        result = {}
        for source_id, pairs in grouped.items():
            pairs.sort(key=lambda p: p[0].ordinal)
            result[source_id] = ([c for c, _ in pairs], np.vstack([v for _, v in pairs]))
        return result

    def delete(self, source_id: str, profile: str | None = None, among: list[str] | None = None) -> None:
        """Removes a source's cached leaves of one profile, or of every profile if None (found in
        ``among``, every collection's name, when listed already: see ``cache_collections``)."""
        with translated("deleting cached leaves"):
            if profile is None:
                collections = self._at.cache_collections("leaf", among)
            else:
                collections = [self._cache(profile)]
            for collection in collections:
                collection.delete(where={"source_id": source_id})


def leaf_id(source_id: str, ordinal: int) -> str:
    """The id of a leaf: the source's short id and the chunk's ordinal."""
    return f"{source_id[:12]}.{ordinal}"


def leaf_node(chunk: Chunk, title: str = "", link: str = "") -> Node:
    """The leaf node of a chunk, titled and linked as its source."""
    return Node(
        id=leaf_id(chunk.source_id, chunk.ordinal),
        layer=0,
        text=chunk.text,
        tokens=chunk.tokens,
        source_ids=(chunk.source_id,),
        title=title,
        link=link,
        ordinal=chunk.ordinal,
        start=chunk.start,
        end=chunk.end,
    )


def _chunk_metadata(chunk: Chunk) -> dict[str, Any]:
    return {
        TEXT_KEY: chunk.text,
        "source_id": chunk.source_id,
        "ordinal": chunk.ordinal,
        "start": chunk.start,
        "end": chunk.end,
        "tokens": chunk.tokens,
    }


def _chunk_from(metadata: dict[str, Any]) -> Chunk:
    return Chunk(
        source_id=str(metadata["source_id"]),
        ordinal=int(metadata["ordinal"]),
        text=str(metadata[TEXT_KEY]),
        start=int(metadata["start"]),
        end=int(metadata["end"]),
        tokens=int(metadata["tokens"]),
    )
