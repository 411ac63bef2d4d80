"""Ingesting one document into a channel, all or nothing, and the channel's leaf cache.

Contract of :class:`IngestPipeline` (the engine is its one caller; ``Engine.ingest`` states
the public side):

* :meth:`~IngestPipeline.ingest` stores a document's text as a source of the channel with its
  embedded leaves. The source is listed, built from and searched only once every leaf is
  stored: if embedding fails nothing of it stays; if the process dies half-way what was
  written stays invisible, and the next ingest of the same text repairs it. The same text is
  stored once. The
  caller counts itself a writer of the channel around it (``ChannelWriters.writing``).
* :meth:`~IngestPipeline.chunk_and_embed` chunks a text and embeds it in slices of
  ``EMBED_SLICE`` chunks, reporting progress between slices.
* :meth:`~IngestPipeline.cache_leaves` caches leaves a rebuild embedded, then removes them
  again if their source was forgotten meanwhile.

Leaves are cached under :attr:`~IngestPipeline.leaf_profile` (the embedding model and chunk
size): changing either starts a new cache. Every method blocks (embedding, Chroma calls).
"""

from __future__ import annotations

import hashlib
import logging
import time
import unicodedata
from dataclasses import dataclass

import numpy as np

from raptor_engine.channel_writers import ChannelWriters, utc_now
from raptor_engine.chunking import chunk_text
from raptor_engine.errors import ChannelError, DocumentRejected, RejectReason, StoreError
from raptor_engine.protocols import Embedder, TokenCounter
from raptor_engine.store import ChannelStore, SourceState, profile_digest
from raptor_engine.tree import BuildProgress, ProgressCallback
from raptor_engine.types import ChannelKey, Chunk, Document, Source

log = logging.getLogger(__name__)

EMBED_SLICE = 256  # chunks embedded per call when ingesting: progress is reported between slices


@dataclass(frozen=True, slots=True)
class IngestResult:
    """A stored source; ``duplicate`` is True when the same content was already there,
    ``repaired`` when it was there but incomplete (an interrupted ingest) and is complete now."""

    source: Source
    duplicate: bool
    leaves: int
    repaired: bool = False


class IngestPipeline:
    """Chunks, embeds and stores sources completely. See the module docstring."""

    def __init__(self, embedder: Embedder, counter: TokenCounter, chunk_tokens: int, writers: ChannelWriters) -> None:
        self._embedder = embedder
        self._counter = counter
        self._chunk_tokens = chunk_tokens
        self._writers = writers
        self.leaf_profile = profile_digest(embedder.model_id, f"chunk{chunk_tokens}")

    def ingest(self, key: ChannelKey, document: Document, progress: ProgressCallback | None) -> IngestResult:
        """Stores ``document`` in the channel completely, or repairs an incomplete copy of it.
        Raises ``DocumentRejected`` for a text with nothing in it."""
        text = unicodedata.normalize("NFC", document.text)
        if not text.strip():
            raise DocumentRejected(RejectReason.EMPTY, document.title, "there is no text in it")
        channel = self._writers.channel(key)
        source_id = hashlib.sha256(text.encode()).hexdigest()
        record = self._settled_record(key, channel, source_id)
        if record is not None and record[1] is SourceState.STORED:
            return IngestResult(record[0], duplicate=True, leaves=0)
        source = _new_source(document, text, source_id)
        known = self._earlier_vectors(channel, document.external_id)
        leaves = self._store_completely(key, channel, source, text, record is not None, progress, known)
        verb = "repaired" if record else "stored"
        log.info("channel %s: %s source %s (%d leaves)", key, verb, source_id[:12], leaves)
        return IngestResult(source, duplicate=False, leaves=leaves, repaired=record is not None)

    def chunk_and_embed(
        self,
        source_id: str,
        text: str,
        stages: dict[str, float] | None = None,
        progress: ProgressCallback | None = None,
        known: dict[str, np.ndarray] | None = None,
    ) -> tuple[list[Chunk], np.ndarray]:
        """The source's chunks and their vectors, embedded in slices so progress can be shown.
        ``stages``, where given, has the seconds spent chunking and embedding added to it;
        ``known`` maps chunk texts to vectors embedded before (an earlier version of the same
        message or file): those chunks are not embedded again."""
        started = time.perf_counter()
        chunks = chunk_text(text, source_id, self._counter, self._chunk_tokens)
        chunked = time.perf_counter()
        known = known or {}
        fresh = list(dict.fromkeys(chunk.text for chunk in chunks if chunk.text not in known))
        embedded = dict(zip(fresh, self._embed_in_slices(fresh, progress or (lambda _: None)), strict=True))
        rows = [known[chunk.text] if chunk.text in known else embedded[chunk.text] for chunk in chunks]
        vectors = np.vstack(rows) if rows else self._embedder.embed([])
        if stages is not None:
            stages["chunk"] = stages.get("chunk", 0.0) + chunked - started
            stages["embed"] = stages.get("embed", 0.0) + time.perf_counter() - chunked
        return chunks, vectors

    def cache_leaves(self, key: ChannelKey, channel: ChannelStore, chunks: list[Chunk], vectors: np.ndarray) -> None:
        """Caches a source's leaves during a build, then removes them if it was forgotten meanwhile."""
        channel.put_leaves(self.leaf_profile, chunks, vectors)
        self._writers.purge_forgotten(key, channel, {chunk.source_id for chunk in chunks})

    def _embed_in_slices(self, texts: list[str], report: ProgressCallback) -> np.ndarray:
        """The texts' vectors; a large file takes minutes, so progress is reported per slice."""
        parts = []
        for start in range(0, len(texts), EMBED_SLICE):
            report(BuildProgress("embed", start, len(texts)))
            parts.append(self._embedder.embed(texts[start : start + EMBED_SLICE]))
        report(BuildProgress("embed", len(texts), len(texts)))
        # np.vstack refuses no parts: the embedder shapes an empty result itself (its dimension).
        return np.vstack(parts) if parts else self._embedder.embed([])

    def _earlier_vectors(self, channel: ChannelStore, external_id: str) -> dict[str, np.ndarray]:
        """The leaf vectors of the channel's other versions of the message or file ``external_id``
        (an edit re-embeds only the chunks it changed), by chunk text; empty without an id."""
        if not external_id:
            return {}
        earlier = [source.id for source in channel.list_sources(external_id)]
        cached = channel.cached_leaves(self.leaf_profile, earlier) if earlier else {}
        return {chunk.text: vectors[row] for chunks, vectors in cached.values() for row, chunk in enumerate(chunks)}

    def _settled_record(
        self, key: ChannelKey, channel: ChannelStore, source_id: str
    ) -> tuple[Source, SourceState] | None:
        """The source's stored record, or None; an interrupted forget of it is finished first
        (then None): the text is being uploaded again, so it is stored anew."""
        record = channel.source_record(source_id)
        if record is not None and record[1] is SourceState.FORGETTING:
            self._writers.purge(key, channel, source_id)
            return None
        return record

    def _store_completely(
        self,
        key: ChannelKey,
        channel: ChannelStore,
        source: Source,
        text: str,
        repairing: bool,
        progress: ProgressCallback | None,
        known: dict[str, np.ndarray],
    ) -> int:
        """Writes the text (invisible), every leaf, then marks the source stored; the number of leaves.

        On any failure the source is removed again. Raises ``ChannelError`` if the source was
        forgotten meanwhile: its leaves written here are removed then.
        """
        channel.put_source(source, text, SourceState.STORING)
        try:
            if repairing:
                channel.delete_leaves(source.id, self.leaf_profile)  # a crash's partial leaves
            chunks, vectors = self.chunk_and_embed(source.id, text, progress=progress, known=known)
            channel.put_leaves(self.leaf_profile, chunks, vectors)
        except BaseException:
            _discard(channel, source.id)
            raise
        channel.set_source_state(source.id, SourceState.STORED)  # does nothing to a forgotten record
        if self._writers.purge_forgotten(key, channel, [source.id]):
            raise ChannelError("that source was forgotten while it was being stored; upload it again to keep it")
        return len(chunks)


def _new_source(document: Document, text: str, source_id: str) -> Source:
    """The record of a text stored for the first time (``text`` is the normalised one)."""
    return Source(
        id=source_id,
        title=document.title,
        kind=document.kind,
        link=document.link,
        added_by=document.added_by,
        added_at=document.added_at or utc_now(),
        chars=len(text),
        external_id=document.external_id,
        file_name=document.file_name,
    )


def _discard(channel: ChannelStore, source_id: str) -> None:
    """Best effort removal of a failed ingest; the store may be the reason it failed."""
    try:
        channel.delete_source(source_id)
    except StoreError as exc:
        log.warning("could not remove the unfinished source %s (a new upload repairs it): %s", source_id[:12], exc)
