"""The one facade of the engine: ingest, forget, rebuild, retrieve, answer, inspect.

Everything a caller needs goes through :class:`Engine`; it wires the loaders,
chunker, embedder, tree builder, summariser, answerer and the Chroma store
together and keeps the store's invariants (see ``store.py``).

Synchronous methods do blocking work (embedding, Chroma calls): async callers
should run them in a worker thread. ``rebuild`` and ``answer`` are coroutines
because summarisers and answerers may call a language model; their CPU-heavy
stages run in worker threads, so an event loop stays responsive.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import threading
import time
import unicodedata
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from raptor_engine import defaults
from raptor_engine.answering import ExtractiveAnswerer
from raptor_engine.background import ForegroundGate, run_in_background
from raptor_engine.chunking import chunk_text
from raptor_engine.clustering import ClusteringSettings
from raptor_engine.embedding import SentenceTransformerEmbedder
from raptor_engine.errors import (
    BuildError,
    ChannelError,
    DocumentRejected,
    NodeNotFound,
    NothingToBuild,
    ProviderError,
    RejectReason,
    SpendingLimitReached,
    StoreError,
)
from raptor_engine.lexical import LexicalIndex
from raptor_engine.loaders import DEFAULT_MAX_BYTES, DEFAULT_MAX_TEXT_CHARS, load_bytes, load_file
from raptor_engine.metering import SpendingLimits, metering
from raptor_engine.protocols import Answerer, BuildGuard, Embedder, Summarizer, TokenCounter
from raptor_engine.retrieval import Query, RetrievalSettings, Retrieved, load_summary_map, retrieve_scoped
from raptor_engine.scope import SummaryMap
from raptor_engine.store import ChannelStore, ChromaStore, SourceState, TreeState, leaf_node, profile_digest
from raptor_engine.summarizing import DEFAULT_SUMMARY_TOKENS, ExtractiveSummarizer
from raptor_engine.tree import BuildProgress, BuiltTree, ProgressCallback, TreeBuilder
from raptor_engine.types import (
    Answer,
    AnswerRecord,
    BuildReport,
    ChannelKey,
    Chunk,
    Document,
    Hit,
    Node,
    NodeView,
    Source,
    SourceKind,
    TreeStats,
)

log = logging.getLogger(__name__)

EMBED_SLICE = 256  # chunks embedded per call when ingesting: progress is reported between slices
LEXICAL_CACHE_SIZE = 64  # channels whose served tree keeps its BM25 index and summary map in memory


@dataclass(frozen=True, slots=True)
class EngineSettings:
    """Everything tunable in the engine, with the paper's defaults."""

    chunk_tokens: int = defaults.CHUNK_TOKENS
    max_file_bytes: int = DEFAULT_MAX_BYTES
    max_text_chars: int = DEFAULT_MAX_TEXT_CHARS  # text extracted from one file; more is refused
    summary_tokens: int = DEFAULT_SUMMARY_TOKENS
    max_concurrency: int = defaults.MAX_CONCURRENCY
    # Per rebuild; applies to metered (language-model) summaries.
    spending: SpendingLimits = SpendingLimits(defaults.MAX_CALLS_PER_REBUILD, defaults.MAX_TOKENS_PER_REBUILD)
    clustering: ClusteringSettings = field(default_factory=ClusteringSettings)
    retrieval: RetrievalSettings = field(default_factory=RetrievalSettings)


@dataclass(frozen=True, slots=True)
class IngestResult:
    """A stored source; ``duplicate`` is True when the same content was already there,
    ``repaired`` when it was there but incomplete (an interrupted ingest) and is complete now."""

    source: Source
    duplicate: bool
    leaves: int
    repaired: bool = False


class Engine:
    """RAPTOR trees of many channels over one Chroma store. See the module docstring."""

    def __init__(
        self,
        store: ChromaStore,
        embedder: Embedder,
        counter: TokenCounter,
        summarizer: Summarizer,
        answerer: Answerer,
        settings: EngineSettings = EngineSettings(),
        build_guard: BuildGuard | None = None,
    ) -> None:
        """``build_guard``, where given, is held around every rebuild (see :class:`BuildGuard`)."""
        self._store = store
        self._build_guard = build_guard
        self._embedder = embedder
        self._counter = counter
        self._summarizer = summarizer
        self._answerer = answerer
        self.settings = settings
        self._channels: dict[ChannelKey, ChannelStore] = {}
        # The writers of each channel running now: the last one out drops an emptied channel.
        self._writers: dict[ChannelKey, _Writers] = {}
        self._writers_guard = threading.Lock()
        # Per channel, its served tree's BM25 index and summary map, under the tree's
        # (version, revision) (see _indexes).
        self._lexicons: OrderedDict[ChannelKey, tuple[tuple[int, int], LexicalIndex, SummaryMap]] = OrderedDict()
        self._lexicons_lock = threading.Lock()
        # Questions run in the foreground: rebuilds step aside between their steps while one runs.
        self._gate = ForegroundGate()
        self._leaf_profile = profile_digest(embedder.model_id, f"chunk{settings.chunk_tokens}")
        self._summary_profile = profile_digest(embedder.model_id)

    @classmethod
    def offline(
        cls, store: ChromaStore, settings: EngineSettings = EngineSettings(), model: str = "", batch_size: int = 32
    ) -> Engine:
        """An engine on the offline defaults: a local sentence-transformers model
        (``model``, empty for the packaged one), extractive summaries and answers."""
        embedder = SentenceTransformerEmbedder(model, batch_size=batch_size)
        counter = embedder.token_counter()
        summarizer = ExtractiveSummarizer(counter, settings.summary_tokens)
        return cls(store, embedder, counter, summarizer, ExtractiveAnswerer(embedder), settings)

    @property
    def store(self) -> ChromaStore:
        return self._store

    def _channel(self, key: ChannelKey) -> ChannelStore:
        if key not in self._channels:
            self._channels[key] = self._store.channel(key)
        return self._channels[key]

    # -- sources -------------------------------------------------------------

    def ingest(
        self, key: ChannelKey, document: Document, progress: ProgressCallback | None = None
    ) -> IngestResult:
        """Stores a document as a source of the channel and caches its embedded leaves.

        All or nothing: the source is listed, built from and searched only once
        every leaf is stored. If embedding fails (``ProviderError``) nothing of
        it stays; if the process dies half-way, what was written stays invisible
        and the next upload of the same text repairs it (``repaired``), as it
        does a source stored by an older version without its leaves.
        The same text stored twice is stored once (``duplicate`` is then True).
        Its excerpts can be retrieved at once; its summaries come with the next
        rebuild. ``progress`` hears how embedding goes (a large file takes
        minutes). Raises ``DocumentRejected`` for a text with nothing in it.
        """
        with self._writing(key):
            return self._ingest(key, document, progress)

    def _ingest(self, key: ChannelKey, document: Document, progress: ProgressCallback | None) -> IngestResult:
        text = unicodedata.normalize("NFC", document.text)
        if not text.strip():
            raise DocumentRejected(RejectReason.EMPTY, document.title, "there is no text in it")
        channel = self._channel(key)
        source_id = hashlib.sha256(text.encode()).hexdigest()
        record = channel.source_record(source_id)
        if record is not None and record[1] is SourceState.FORGETTING:
            self._purge(key, channel, source_id)  # an interrupted forget: finish it, then store anew
            record = None
        if record is not None and self._is_complete(channel, *record):
            return IngestResult(record[0], duplicate=True, leaves=0)
        legacy = record is not None and record[1] is SourceState.LEGACY
        source = record[0] if legacy and record else Source(
            id=source_id,
            title=document.title,
            kind=document.kind,
            link=document.link,
            added_by=document.added_by,
            added_at=document.added_at or _now(),
            chars=len(text),
            external_id=document.external_id,
        )
        leaves = self._store_completely(key, channel, source, text, record is not None, legacy, progress)
        verb = "repaired" if record else "stored"
        log.info("channel %s: %s source %s (%d leaves)", key, verb, source_id[:12], leaves)
        return IngestResult(source, duplicate=False, leaves=leaves, repaired=record is not None)

    def _is_complete(self, channel: ChannelStore, source: Source, state: SourceState) -> bool:
        """Whether a stored record needs no repair; a legacy one is complete if it has leaves."""
        if state is SourceState.LEGACY:
            return channel.has_leaves(self._leaf_profile, source.id)
        return state is SourceState.STORED

    def _store_completely(
        self,
        key: ChannelKey,
        channel: ChannelStore,
        source: Source,
        text: str,
        repairing: bool,
        legacy: bool,
        progress: ProgressCallback | None,
    ) -> int:
        """Writes the text (invisible), every leaf, then marks the source stored; the number of leaves.

        A legacy record stays listed as it was while its leaves are added. On any
        failure, a source that was not listed before is removed again. Raises
        ``ChannelError`` if the source was forgotten meanwhile (only a listed,
        legacy one can be): its leaves written here are removed then.
        """
        if not legacy:
            channel.put_source(source, text, SourceState.STORING)
        try:
            if repairing:
                channel.delete_leaves(source.id, self._leaf_profile)  # a crash's partial leaves
            chunks, vectors = self._chunk_and_embed(source.id, text, progress=progress)
            channel.put_leaves(self._leaf_profile, chunks, vectors)
        except BaseException:
            if not legacy:
                self._discard(channel, source.id)
            raise
        channel.set_source_state(source.id, SourceState.STORED)  # does nothing to a forgotten record
        if self._purge_forgotten(key, channel, [source.id]):
            raise ChannelError("that source was forgotten while it was being stored; upload it again to keep it")
        return len(chunks)

    @staticmethod
    def _discard(channel: ChannelStore, source_id: str) -> None:
        """Best effort removal of a failed ingest; the store may be the reason it failed."""
        try:
            channel.delete_source(source_id)
        except StoreError as exc:
            log.warning("could not remove the unfinished source %s (a new upload repairs it): %s", source_id[:12], exc)

    def ingest_bytes(
        self, key: ChannelKey, data: bytes, filename: str, link: str = "", added_by: str = "", external_id: str = "",
        size: int | None = None,
    ) -> IngestResult:
        """Loads an uploaded file's bytes and ingests it; see :meth:`ingest`. ``size`` is
        the file's full size when ``data`` may be only its beginning (a refusal names it)."""
        loaded = load_bytes(
            data, filename, self.settings.max_file_bytes, max_text_chars=self.settings.max_text_chars, size=size
        )
        document = Document(loaded.text, loaded.title, SourceKind.FILE, link, added_by, "", external_id)
        return self.ingest(key, document)

    def ingest_file(
        self, key: ChannelKey, path: Path, added_by: str = "", progress: ProgressCallback | None = None
    ) -> IngestResult:
        """Loads a local file and ingests it, linked by its ``file://`` URI."""
        loaded = load_file(path, self.settings.max_file_bytes, max_text_chars=self.settings.max_text_chars)
        link = path.resolve().as_uri()
        return self.ingest(key, Document(loaded.text, loaded.title, SourceKind.FILE, link, added_by), progress)

    def sources(self, key: ChannelKey) -> list[Source]:
        """The channel's sources, oldest first."""
        return self._channel(key).list_sources()

    def find_source(self, key: ChannelKey, reference: str) -> Source:
        """The source whose id starts with ``reference`` (at least 6 characters) or whose
        external id equals it. Raises ``ChannelError`` if none or several match."""
        reference = reference.strip()
        sources = self.sources(key)
        matches = [s for s in sources if reference and s.external_id == reference]
        if not matches and len(reference) >= 6:
            matches = [s for s in sources if s.id.startswith(reference.lower())]
        if not matches:
            raise ChannelError(f"no source {reference!r} in this channel (list them with 'sources')")
        if len(matches) > 1:
            raise ChannelError(f"{reference!r} matches {len(matches)} sources; give more of its id")
        return matches[0]

    def forget(self, key: ChannelKey, reference: str) -> Source:
        """Removes a source and everything built from it: its text, its leaves, the cached
        summaries covering it, the answers citing it, and every node of every stored tree
        that covers it. Returns the removed source.

        A rebuild running meanwhile removes whatever of it it writes after this returns
        (see ``store.py``), so once both are done no collection holds the text. If this
        stops half-way, the next rebuild (or upload of the same text) finishes it.

        Forgetting the channel's last source drops the channel whole, once no rebuild or
        ingest of it runs here any more (see :meth:`_writing`), and gives the disk space
        back on the embedded store; its next upload starts it anew.
        """
        source = self.find_source(key, reference)
        channel = self._channel(key)
        with self._writing(key):
            # Marked first: from here on nothing lists, builds from or searches it, and any
            # writer finishing later sees the mark and cleans up after itself.
            channel.set_source_state(source.id, SourceState.FORGETTING)
            removed = self._purge(key, channel, source.id)
        log.info("channel %s: forgot source %s (%d served nodes removed)", key, source.id[:12], removed)
        return source

    def _purge(self, key: ChannelKey, channel: ChannelStore, source_id: str) -> int:
        """Deletes everything of a source, its record last; the number of served nodes removed."""
        removed = channel.remove_source_from_trees(source_id)
        channel.delete_source(source_id)
        self._drop_indexes(key)  # the BM25 index in memory holds its text too
        return removed

    def _purge_forgotten(self, key: ChannelKey, channel: ChannelStore, source_ids: Iterable[str]) -> set[str]:
        """Purges those of ``source_ids`` forgotten meanwhile and returns them. Called by every
        writer of derived data after writing (write first, look second: see ``store.py``)."""
        gone = channel.forgotten_among(source_ids)
        for source_id in sorted(gone):
            log.info("channel %s: removing what was just written of forgotten source %s", key, source_id[:12])
            self._purge(key, channel, source_id)
        if gone:
            # A writer left running by a cancelled rebuild (its store step goes on in a thread)
            # may finish after every writer counted in: it drops an emptied channel itself.
            self._drop_if_empty(key)
        return gone

    @contextmanager
    def _writing(self, key: ChannelKey) -> Iterator[_Writing]:
        """Counts a writer of the channel (an ingest, forget or rebuild) in for the ``with``
        block; the last one out drops the channel if no source is left in it.

        Whichever of a forget and a rebuild or ingest of the same channel finishes last
        drops it, so no collection is dropped under a writer of this engine, and a writer
        starting while a drop runs waits for it (then writes to new collections). The
        yielded record says whether this writer dropped it. Writers in other processes (on
        a Chroma server) are not seen: what they write after a drop lands in collections
        made anew, from which they remove the forgotten text as after any forget (see
        ``store.py``), and the last of them drops it again.
        """
        writers = self._writers_of(key)
        with writers.lock:
            writers.count += 1
        writing = _Writing()
        try:
            yield writing
        finally:
            with writers.lock:
                writers.count -= 1
                last = writers.count == 0
            if last:
                writing.dropped = self._drop_if_empty(key)

    def _writers_of(self, key: ChannelKey) -> _Writers:
        # One small entry per channel written in this process: kept, never dropped, because
        # its lock must stay the same object while anyone waits for it.
        with self._writers_guard:
            return self._writers.setdefault(key, _Writers())

    def _drop_if_empty(self, key: ChannelKey) -> bool:
        """Drops the channel's collections (every layer, cache, tree, note and answer, and its
        registry entry) if it holds no source at all and no writer of it runs in this engine,
        then gives back their disk space (embedded store); True if it dropped them.

        Never raises: the forget or build that calls it has done its own work. A failure is
        logged, and the next writer of the channel to finish tries again.
        """
        channel = self._channel(key)
        writers = self._writers_of(key)
        try:
            with writers.lock:  # held while dropping: a writer starting now waits for the drop
                if writers.count or not channel.holds_no_source():
                    return False
                records = channel.drop()
        except StoreError as exc:
            log.warning("channel %s: no source is left, but its collections could not be dropped "
                        "(the next forget or rebuild tries again): %s", key, exc)
            return False
        self._drop_indexes(key)
        log.info("channel %s: no source left: dropped its collections (%d records)", key, records)
        if records:  # a channel that never held anything leaves nothing to reclaim
            try:
                self._store.reclaim()
            except StoreError as exc:
                log.warning("channel %s: dropped, but the disk space was not reclaimed (the next "
                            "drop or start does): %s", key, exc)
        return True

    # -- building ------------------------------------------------------------

    async def rebuild(self, key: ChannelKey, progress: ProgressCallback | None = None) -> BuildReport:
        """Builds a new tree from the channel's sources and switches to it in one step.

        Leaves of sources seen before are reused, not re-embedded; summaries of
        clusters whose members are unchanged come from the cache. If anything
        fails, the previous tree keeps being served and ``BuildError`` says why.
        Raises ``NothingToBuild`` for a channel without sources, ``BuildBusy`` (at once)
        when another process is rebuilding it and the build guard sees it. Forgets that were
        interrupted are finished first; a source forgotten while the build runs
        leaves nothing in what it writes, however the build ends.

        The build runs on a thread of its own at a lower CPU priority (see
        ``background.py``), so questions answered meanwhile keep their speed;
        ``progress`` is called from that thread's threads.
        """
        return await run_in_background(self._rebuild(key, progress), name=f"rebuild {key}")

    async def _rebuild(self, key: ChannelKey, progress: ProgressCallback | None) -> BuildReport:
        if self._build_guard is None:
            return await self._rebuild_held(key, progress)
        with self._build_guard.hold(key):
            return await self._rebuild_held(key, progress)

    async def _rebuild_held(self, key: ChannelKey, progress: ProgressCallback | None) -> BuildReport:
        with self._writing(key) as writing:
            report = await self._rebuild_channel(key, progress)
        if writing.dropped:  # a forget of the last source ended while this build ran
            raise NothingToBuild("every source of this channel was forgotten while the rebuild ran")
        return report

    async def _rebuild_channel(self, key: ChannelKey, progress: ProgressCallback | None) -> BuildReport:
        channel = self._channel(key)
        for source_id in channel.sources_in_state(SourceState.FORGETTING):
            log.info("channel %s: finishing the interrupted forget of source %s", key, source_id[:12])
            self._purge(key, channel, source_id)
        sources = channel.list_sources()
        if not sources:
            raise NothingToBuild("this channel has no sources yet: add a file or pin a message first")
        try:
            return await self._build(key, channel, sources, progress)
        finally:
            # However the build ended (failed, cancelled), a source forgotten while it ran
            # must not survive in what it wrote: summaries, leaves, an unfinished tree.
            self._purge_forgotten_quietly(key, channel, [s.id for s in sources])

    def _purge_forgotten_quietly(self, key: ChannelKey, channel: ChannelStore, source_ids: list[str]) -> None:
        """``_purge_forgotten`` that logs a store failure instead of hiding the build's own outcome."""
        try:
            self._purge_forgotten(key, channel, source_ids)
        except StoreError as exc:
            log.warning("channel %s: could not clean up after forgotten sources (the next forget "
                        "or rebuild will): %s", key, exc)

    async def _build(
        self, key: ChannelKey, channel: ChannelStore, sources: list[Source], progress: ProgressCallback | None
    ) -> BuildReport:
        version = channel.next_version()
        stages: dict[str, float] = {}
        began = time.perf_counter()
        with metering(self.settings.spending) as meter:
            try:
                groups, embedded = await self._leaves(key, channel, sources, stages)
                if not groups:
                    raise NothingToBuild("every source of this channel was forgotten while the rebuild began")
                builder = TreeBuilder(
                    self._embedder, self._summarizer, self._counter, self.settings.clustering,
                    self.settings.max_concurrency, progress, meter, self._gate,
                )
                cache = _SummaryCacheView(
                    channel, self._summary_profile, lambda ids: self._purge_forgotten(key, channel, ids)
                )
                built = await builder.build(groups, cache)
                stages.update(built.stage_seconds)
                started = time.perf_counter()
                state = await asyncio.to_thread(self._publish, key, channel, version, sources, built)
                stages["store"] = time.perf_counter() - started
                started = time.perf_counter()
                await asyncio.to_thread(self._warm_indexes, key, channel)
                stages["index"] = time.perf_counter() - started
                started = time.perf_counter()
                await asyncio.to_thread(self._tidy_store, key)
                stages["tidy"] = time.perf_counter() - started
            except SpendingLimitReached as exc:
                channel.discard_tree(version)
                raise SpendingLimitReached(
                    f"the rebuild stopped before spending more, and the previous tree still answers: {exc}. "
                    f"The summaries already made are kept for the next rebuild.",
                    kind=exc.kind, limit=exc.limit, used=exc.used,
                ) from None
            except ProviderError as exc:
                channel.discard_tree(version)
                raise BuildError(f"the rebuild stopped and the previous tree still answers: {exc}") from exc
        usage = meter.usage()
        log.info("channel %s: built tree v%d %s (%d model calls)", key, version, state.nodes_per_layer, usage.calls)
        leaves = state.nodes_per_layer.get(0, 0)
        return BuildReport(
            version=version,
            sources=len(sources),
            leaves=leaves,
            nodes_per_layer=state.nodes_per_layer,
            stage_seconds=stages,
            leaves_embedded=embedded,
            leaves_reused=leaves - embedded,
            summaries_made=built.summaries_made,
            summaries_reused=built.summaries_reused,
            built_at=state.built_at,
            model_calls=usage.calls,
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            model_seconds=usage.seconds,
            elapsed_seconds=time.perf_counter() - began,
        )

    async def _leaves(
        self, key: ChannelKey, channel: ChannelStore, sources: list[Source], stages: dict[str, float]
    ) -> tuple[list[tuple[list[Node], np.ndarray]], int]:
        """Each source's leaf nodes with their vectors, and how many leaves were embedded now."""
        started = time.perf_counter()
        cached = await asyncio.to_thread(channel.cached_leaves, self._leaf_profile, [s.id for s in sources])
        stages["load"] = time.perf_counter() - started
        groups: list[tuple[list[Node], np.ndarray]] = []
        embedded = 0
        # Sources in content order, not arrival order: the same sources give the same tree,
        # whenever and in whatever order they were added (clustering is order-sensitive).
        for source in sorted(sources, key=lambda s: s.id):
            if source.id not in cached:
                await self._gate.step_aside()
                text = await asyncio.to_thread(channel.source_text, source.id)
                chunks, vectors = await asyncio.to_thread(self._chunk_and_embed, source.id, text, stages)
                await asyncio.to_thread(self._cache_leaves, key, channel, chunks, vectors)
                cached[source.id] = (chunks, vectors)
                embedded += len(chunks)
            chunks, vectors = cached[source.id]
            if not chunks:
                continue  # forgotten since the build listed it: its text read back empty
            groups.append(([leaf_node(chunk, source.title, source.link) for chunk in chunks], vectors))
        return groups, embedded

    def _chunk_and_embed(
        self,
        source_id: str,
        text: str,
        stages: dict[str, float] | None = None,
        progress: ProgressCallback | None = None,
    ) -> tuple[list[Chunk], np.ndarray]:
        """The source's chunks and their vectors, embedded in slices so progress can be shown."""
        started = time.perf_counter()
        chunks = chunk_text(text, source_id, self._counter, self.settings.chunk_tokens)
        chunked = time.perf_counter()
        texts = [chunk.text for chunk in chunks]
        report = progress or (lambda _: None)
        parts = []
        for start in range(0, len(texts), EMBED_SLICE):
            report(BuildProgress("embed", start, len(texts)))
            parts.append(self._embedder.embed(texts[start : start + EMBED_SLICE]))
        report(BuildProgress("embed", len(texts), len(texts)))
        vectors = np.vstack(parts) if parts else self._embedder.embed([])
        if stages is not None:
            stages["chunk"] = stages.get("chunk", 0.0) + chunked - started
            stages["embed"] = stages.get("embed", 0.0) + time.perf_counter() - chunked
        return chunks, vectors

    def _cache_leaves(self, key: ChannelKey, channel: ChannelStore, chunks: list[Chunk], vectors: np.ndarray) -> None:
        """Caches a source's leaves during a build, then removes them if it was forgotten meanwhile."""
        channel.put_leaves(self._leaf_profile, chunks, vectors)
        self._purge_forgotten(key, channel, {chunk.source_id for chunk in chunks})

    def _publish(
        self, key: ChannelKey, channel: ChannelStore, version: int, sources: list[Source], built: BuiltTree
    ) -> TreeState:
        """Writes the built tree beside the served one, then switches to it.

        Runs in a worker thread that goes on even if the build is cancelled, so it
        cleans up after itself: a source forgotten while this build ran must not
        come back with the new tree, whether it was written whole or not.
        """
        try:
            channel.write_tree(version, built.nodes, built.embeddings)
            state = TreeState(
                version=version,
                built_at=_now(),
                embedder_id=self._embedder.model_id,
                source_ids=tuple(s.id for s in sources),
                nodes_per_layer=built.nodes_per_layer(),
            )
            if not channel.switch_to(state):
                # Another build's newer tree got served meanwhile: it stays; this one goes.
                channel.discard_tree(version)
                return channel.live_state() or state
            channel.prune_summaries(self._summary_profile, built.used_keys)
        except BaseException:
            self._discard_quietly(key, channel, version)
            raise
        finally:
            self._purge_forgotten(key, channel, [s.id for s in sources])
        return state

    @staticmethod
    def _discard_quietly(key: ChannelKey, channel: ChannelStore, version: int) -> None:
        """Frees an unserved tree of a failed publish; a store failure here only leaves it
        to be written over by the next build."""
        try:
            channel.discard_tree(version)
        except StoreError as exc:
            log.warning("channel %s: could not free the unfinished tree v%d: %s", key, version, exc)

    # -- answers and feedback ---------------------------------------------------

    def keep_answer(
        self, key: ChannelKey, answer_id: str, question: str, answer: Answer, asked_by: str, keep: int = 1000
    ) -> None:
        """Keeps an answer given in the channel with its question, so votes on it can be stored
        beside both. Forgetting a source it cites removes it. The channel keeps its newest
        ``keep`` answers: storage must not grow with every question for months."""
        sources: list[str] = []
        hits = {hit.node.id: hit.node for hit in answer.hits}
        for citation in answer.citations:
            node = hits.get(citation.node_id)
            for source_id in node.source_ids if node else ():
                if source_id not in sources:
                    sources.append(source_id)
        record = AnswerRecord(answer_id, question, answer.text, asked_by, _now(), tuple(sources))
        channel = self._channel(key)
        channel.put_answer(record)
        channel.prune_answers(keep)
        # An answer computed from a source forgotten meanwhile goes with it.
        self._purge_forgotten(key, channel, record.source_ids)

    def vote(self, key: ChannelKey, answer_id: str, voter: str, up: bool) -> AnswerRecord:
        """Stores ``voter``'s vote on a kept answer (a later vote replaces an earlier one).
        Raises ``ChannelError`` for an answer this channel did not keep (or has forgotten)."""
        channel = self._channel(key)
        record = channel.get_answer(answer_id)
        if record is None:
            raise ChannelError("that answer is no longer kept in this channel, so the vote was not stored")
        updated = replace(record, votes=record.votes | {voter: 1 if up else -1})
        channel.put_answer(updated)
        return updated

    def answers(self, key: ChannelKey) -> list[AnswerRecord]:
        """The answers kept in the channel, with their votes, oldest first."""
        return self._channel(key).list_answers()

    # -- notes ---------------------------------------------------------------

    def notes(self, key: ChannelKey) -> dict[str, str]:
        """Small named strings kept in the store with the channel (they survive restarts)."""
        return self._channel(key).notes()

    def set_note(self, key: ChannelKey, name: str, value: str | None) -> None:
        """Sets (or, with None, removes) one of the channel's notes."""
        self._channel(key).set_note(name, value)

    def channels(self) -> list[ChannelKey]:
        """Every channel the store has seen."""
        return self._store.channels()

    # -- questions -----------------------------------------------------------

    def retrieve(self, key: ChannelKey, question: str, settings: RetrievalSettings | None = None) -> list[Hit]:
        """The nodes that best answer ``question``, best first, within the token budget."""
        with self._gate.foreground():
            return self._retrieve(key, question, settings)

    def _retrieve(self, key: ChannelKey, question: str, settings: RetrievalSettings | None) -> list[Hit]:
        return self._retrieval(key, question, settings).hits

    def _retrieval(self, key: ChannelKey, question: str, settings: RetrievalSettings | None) -> Retrieved:
        """The hits for ``question`` (titled) and its scope in the channel."""
        settings = settings or self.settings.retrieval
        channel = self._channel(key)
        state = channel.live_state()
        if state is not None and state.embedder_id != self._embedder.model_id:
            raise ChannelError(
                f"this channel's tree was built with the embedding model {state.embedder_id!r} but "
                f"{self._embedder.model_id!r} is configured now: rebuild the channel"
            )
        sources = {s.id: s for s in channel.list_sources()}
        pending = [sid for sid in sources if state is None or sid not in state.source_ids]
        query = Query(question, self._embedder.embed([question])[0])
        # The BM25 index serves the scope's word coverage too, so it is used even without hybrid ranking.
        lexical, summaries = self._indexes(key, channel, state) if state else (None, None)
        found = retrieve_scoped(channel, state, pending, self._leaf_profile, query, settings, lexical, summaries)
        return replace(found, hits=[_titled(hit, sources) for hit in found.hits])

    def _indexes(self, key: ChannelKey, channel: ChannelStore, state: TreeState) -> tuple[LexicalIndex, SummaryMap]:
        """The BM25 index and summary map of the served tree, built on first use and kept: one
        pair per channel, its newest tree's (an older tree's pair is never asked for again
        once a newer one is served), least recently used channel out."""
        tag = (state.version, state.revision)
        with self._lexicons_lock:
            cached = self._lexicons.get(key)
            if cached is not None and cached[0] == tag:
                self._lexicons.move_to_end(key)
                return cached[1], cached[2]
        # Built outside the lock: may take a while.
        built = (LexicalIndex(*channel.node_texts(state.version)), load_summary_map(channel, state))
        with self._lexicons_lock:
            cached = self._lexicons.get(key)
            # A question that read the state just before a switch must not evict the new tree's pair.
            if cached is None or cached[0] <= tag:
                self._lexicons[key] = (tag, *built)
                self._lexicons.move_to_end(key)
            while len(self._lexicons) > LEXICAL_CACHE_SIZE:
                self._lexicons.popitem(last=False)
        return built

    def _drop_indexes(self, key: ChannelKey) -> None:
        """Forgets the channel's BM25 index and summary map (its material changed)."""
        with self._lexicons_lock:
            self._lexicons.pop(key, None)

    def _tidy_store(self, key: ChannelKey) -> None:
        """Lets the store clear what this rebuild's overwrites left (see ``ChromaStore.tidy``).
        The tree is already served: a failure is logged, and the next rebuild tries again."""
        try:
            self._store.tidy()
        except StoreError as exc:
            log.warning("channel %s: could not tidy the store after the rebuild: %s", key, exc)

    def _warm_indexes(self, key: ChannelKey, channel: ChannelStore) -> None:
        """Builds the served tree's BM25 index and summary map now, so the first question after
        a rebuild does not wait for them. The tree is already served: a store failure here only
        leaves them to be built on first use."""
        try:
            state = channel.live_state()
            if state is not None:
                self._indexes(key, channel, state)
        except StoreError as exc:
            log.warning("channel %s: the new tree's indexes will be built on first use: %s", key, exc)

    async def answer(self, key: ChannelKey, question: str, settings: RetrievalSettings | None = None) -> Answer:
        """An answer to ``question`` from the channel's material, citing the nodes it used.

        The offline answerer also hears the question's scope: whether the channel
        holds anything about it, and whether to lead with a summary.
        """
        with self._gate.foreground():
            found = await asyncio.to_thread(self._retrieval, key, question, settings)
            if isinstance(self._answerer, ExtractiveAnswerer):  # computes here: the rebuild keeps stepping aside
                return await self._answerer.answer(question, found.hits, found.scope)
        # A remote model's answer is a wait, not work on our CPU: the rebuild need not pause for it.
        return await self._answerer.answer(question, found.hits)

    # -- inspecting ------------------------------------------------------------

    def stats(self, key: ChannelKey) -> TreeStats:
        """The served tree's version, size per layer, and how many sources wait for a rebuild."""
        channel = self._channel(key)
        state = channel.live_state()
        source_ids = {s.id for s in channel.list_sources()}
        if state is None:
            return TreeStats(key, 0, "", len(source_ids), {}, len(source_ids))
        pending = len(source_ids.symmetric_difference(state.source_ids)) + state.forgotten
        return TreeStats(key, state.version, state.built_at, len(source_ids), state.nodes_per_layer, pending)

    def node(self, key: ChannelKey, node_id: str) -> NodeView:
        """A node of the served tree with its children and parents. Raises ``NodeNotFound``."""
        channel = self._channel(key)
        state = channel.live_state()
        found = channel.get_nodes(state.version, [node_id]) if state else []
        if not found:
            raise NodeNotFound(f"no node {node_id!r} in this channel's tree")
        node = found[0]
        children = channel.get_nodes(state.version, node.children) if state else []
        parents = channel.get_nodes(state.version, node.parents) if state else []
        return NodeView(node, tuple(children), tuple(parents))

    def top_nodes(self, key: ChannelKey, limit: int = 5) -> list[Node]:
        """The nodes of the served tree's highest layer (the root first), at most ``limit``."""
        channel = self._channel(key)
        state = channel.live_state()
        if state is None or not state.nodes_per_layer:
            return []
        top = max(state.nodes_per_layer)
        return channel.list_layer(state.version, top, limit)


@dataclass(slots=True)
class _Writers:
    """How many writers of one channel run in the engine, and the lock a drop holds throughout."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    count: int = 0


@dataclass(slots=True)
class _Writing:
    """One writer of a channel; ``dropped`` is set when it finished last and dropped the channel."""

    dropped: bool = False


class _SummaryCacheView:
    """The channel's summary cache seen as the builder's ``SummaryCache``.

    After each write ``written`` hears the source ids the new entries cover, so
    that summaries of a source forgotten meanwhile are removed at once.
    """

    def __init__(self, channel: ChannelStore, profile: str, written: Callable[[set[str]], object]) -> None:
        self._channel = channel
        self._profile = profile
        self._written = written

    def get(self, keys: Sequence[str]) -> dict[str, tuple[str, np.ndarray]]:
        return self._channel.cached_summaries(self._profile, keys)

    def put(self, entries: Sequence[tuple[str, str, tuple[str, ...]]], vectors: np.ndarray) -> None:
        self._channel.put_summaries(self._profile, entries, vectors)
        self._written({source for _, _, sources in entries for source in sources})


def _titled(hit: Hit, sources: dict[str, Source]) -> Hit:
    """Fills in the title and link of hits from sources not yet in the tree."""
    if hit.node.title or not hit.node.source_ids or hit.node.source_ids[0] not in sources:
        return hit
    source = sources[hit.node.source_ids[0]]
    return replace(hit, node=replace(hit.node, title=source.title, link=source.link))


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
