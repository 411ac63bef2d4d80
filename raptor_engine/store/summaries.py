"""The summary cache: summaries by the content hash of their cluster, per cache profile.

Contract: ``rc-<digest>-sum-<profile>`` holds one record per summary, id its cache key, its
text under ``TEXT_KEY`` and the ids of the sources it covers under ``sources``, with its
embedding. A rebuild reuses every summary whose cluster did not change, and afterwards
prunes those no served tree uses; forgetting a source deletes every summary covering it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from raptor_engine.store.common import TEXT_KEY, ChannelCollections, translated


class Summaries:
    """Reads and writes of the channel's summary caches. Methods raise ``StoreError``."""

    def __init__(self, collections: ChannelCollections) -> None:
        self._at = collections

    def cache(self, profile: str) -> Any:
        """The summary cache of one profile."""
        # Looked up by id only, never by similarity: the default (L2) space stores
        # vectors exactly as given, where cosine space renormalises their last bits.
        return self._at.open(f"sum-{profile}")

    def cached(self, profile: str, keys: Sequence[str]) -> dict[str, tuple[str, np.ndarray]]:
        """Cached summary texts and embeddings by cache key, for the keys that have one."""
        if not keys:
            return {}
        collection = self.cache(profile)
        with translated("reading cached summaries"):
            got = collection.get(ids=list(keys), include=["metadatas", "embeddings"])
        return {
            key: (str(metadata[TEXT_KEY]), np.asarray(vector, dtype=np.float32))
            for key, metadata, vector in zip(got["ids"], got["metadatas"], got["embeddings"])
        }

    def put(self, profile: str, entries: Sequence[tuple[str, str, Sequence[str]]], embeddings: np.ndarray) -> None:
        """Caches summaries as (key, text, source ids) with their embeddings."""
        if not entries:
            return
        collection = self.cache(profile)
        with translated("caching summaries"):
            for start, end in self._at.batches(len(entries)):
                part = entries[start:end]
                collection.upsert(
                    ids=[key for key, _, _ in part],
                    metadatas=[{"sources": list(sources), TEXT_KEY: text} for _, text, sources in part],
                    embeddings=embeddings[start:end],
                )

    def prune(self, profile: str, keep: set[str]) -> None:
        """Drops cached summaries not in ``keep`` (those no served tree uses)."""
        collection = self.cache(profile)
        with translated("pruning cached summaries"):
            stale = [key for key in collection.get(include=[])["ids"] if key not in keep]
            for start, end in self._at.batches(len(stale)):
                collection.delete(ids=stale[start:end])

    def delete_covering(self, source_id: str, among: list[str] | None = None) -> None:
        """Deletes, in every profile, the cached summaries covering ``source_id`` (it is forgotten);
        ``among``: every collection's name, when listed already (see ``cache_collections``)."""
        with translated("deleting a source"):
            for collection in self._at.cache_collections("sum", among):
                collection.delete(where={"sources": {"$contains": source_id}})
