"""The one facade of the engine: ingest, forget, rebuild, retrieve, answer, inspect.

Everything a caller needs goes through :class:`Engine`; it wires the loaders,
chunker, embedder, tree builder, summariser, answerer and the Chroma store
together and keeps the store's invariants (see ``store/__init__.py``).

The facade composes and delegates: ``ingest_pipeline.py`` stores a document completely
with its leaves, ``rebuild_pipeline.py`` builds and publishes a channel's tree,
``channel_writers.py`` counts each channel's writers and cleans up after forgotten
sources, ``questions.py`` retrieves and answers (with the served trees' BM25 indexes
kept in memory), ``kept_answers.py`` keeps answers and their votes, and
``inspection.py`` reads a served tree's figures and nodes. What stays here is thin:
loading files, forgetting, notes, and the public contract of each call. Engines are
composed in one place, the application's composition root.

Synchronous methods do blocking work (embedding, Chroma calls): async callers
should run them in a worker thread, such as the engine's own (``in_threads``). ``rebuild``, ``answer`` and ``answer_stream`` are
coroutines because summarisers and answerers may call a language model; their CPU-heavy
stages run in worker threads, so an event loop stays responsive. ``answer_stream`` gives
a language model's answer as it is written (``streams_answers`` says whether the answerer
can); the offline answerer's answers are not streamed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from raptor_engine import defaults
from raptor_engine.answer_check import SUPPORT_THRESHOLD
from raptor_engine.background import ForegroundGate
from raptor_engine.channel_writers import ChannelWriters
from raptor_engine.clustering import ClusteringSettings
from raptor_engine.errors import ChannelError, NothingToBuild
from raptor_engine.ingest_pipeline import IngestPipeline, IngestResult as IngestResult
from raptor_engine.inspection import node_view, top_nodes, tree_stats
from raptor_engine.kept_answers import KeptAnswers
from raptor_engine.loaders import DEFAULT_MAX_BYTES, DEFAULT_MAX_TEXT_CHARS, load_bytes, load_file
from raptor_engine.loaders.common import default_title
from raptor_engine.metering import SpendingLimits
from raptor_engine.protocols import (
    Answerer,
    AnswerStream,
    BuildGuard,
    Embedder,
    Summarizer,
    SupportJudge,
    TokenCounter,
)
from raptor_engine.questions import Questions
from raptor_engine.rebuild_pipeline import BuildSettings, RebuildPipeline
from raptor_engine.regression_gate import GateCheck, approved_questions, check_tree
from raptor_engine.removed_text import RemovedText
from raptor_engine.retrieval import RetrievalSettings
from raptor_engine.search_indexes import ChannelIndexes
from raptor_engine.store import ChannelStore, ChromaStore, SourceState
from raptor_engine.summarizing import DEFAULT_SUMMARY_TOKENS, ExtractiveSummarizer
from raptor_engine.threads import in_thread
from raptor_engine.tree import ProgressCallback
from raptor_engine.types import (
    Answer,
    AnswerRecord,
    BuildReport,
    ChannelKey,
    Document,
    Hit,
    Node,
    NodeView,
    Source,
    SourceKind,
    TreeStats,
)

log = logging.getLogger(__name__)
T = TypeVar("T")


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
    # Answers: a sentence is supported when its cited nodes hold this share of its content words.
    support_threshold: float = SUPPORT_THRESHOLD
    # Channels whose search indexes (search_indexes.py) and store handles (channel_writers.py)
    # stay in memory, least recently used out.
    indexed_channels: int = defaults.INDEXED_CHANNELS


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
        threads: Executor | None = None,
        judge: SupportJudge | None = None,
    ) -> None:
        """``build_guard``, where given, is held around every rebuild (see :class:`BuildGuard`).
        ``judge``, where given, decides whether an answer's sentences are supported by what
        they cite, in place of the lexical measure (see ``answer_check.py``).
        ``threads`` runs the blocking steps of ``answer`` and ``answer_stream`` and whatever
        :meth:`in_threads` is given (None: the running event loop's default executor); a caller
        bounds it to bound what a store that stops answering can hold."""
        self._threads = threads
        self._store = store
        self._embedder = embedder
        self._summarizer = summarizer
        self._answerer = answerer
        self.settings = settings
        # Per channel, the BM25 index and summary map of its served tree and of its fresh leaves.
        self._indexes = ChannelIndexes(settings.indexed_channels)
        # Questions run in the foreground: rebuilds step aside between their steps while one runs.
        self._gate = ForegroundGate()
        self._writers = ChannelWriters(store, self._indexes.forget, settings.indexed_channels)
        self._ingests = IngestPipeline(embedder, counter, settings.chunk_tokens, self._writers)
        self._leaf_profile = self._ingests.leaf_profile
        self._rebuilds = RebuildPipeline(
            store=store,
            embedder=embedder,
            summarizer=summarizer,
            counter=counter,
            settings=BuildSettings(settings.clustering, settings.max_concurrency, settings.spending, settings.retrieval),
            ingests=self._ingests,
            writers=self._writers,
            gate=self._gate,
            warm_indexes=self._indexes.warm,
            build_guard=build_guard,
        )
        self._questions = Questions(self._writers, embedder, answerer, self._indexes, self._gate, self._leaf_profile,
                                    settings.retrieval, settings.support_threshold, threads, judge)
        self._kept = KeptAnswers(self._writers)

    @property
    def store(self) -> ChromaStore:
        return self._store

    @property
    def threads(self) -> Executor | None:
        """The executor given as ``threads`` (None: the running loop's default is used)."""
        return self._threads

    async def in_threads(self, work: Callable[..., T], *args: Any) -> T:
        """``work(*args)`` (a blocking call of this engine) on the engine's ``threads``, awaited."""
        return await in_thread(self._threads, work, *args)

    def _channel(self, key: ChannelKey) -> ChannelStore:
        return self._writers.channel(key)

    # -- sources -------------------------------------------------------------

    def ingest(
        self, key: ChannelKey, document: Document, progress: ProgressCallback | None = None
    ) -> IngestResult:
        """Stores a document as a source of the channel and caches its embedded leaves.

        All or nothing: the source is listed, built from and searched only once
        every leaf is stored. If embedding fails (``ProviderError``) nothing of
        it stays; if the process dies half-way, what was written stays invisible
        and the next upload of the same text repairs it (``repaired``).
        The same text stored twice is stored once (``duplicate`` is then True).
        Its excerpts can be retrieved at once; its summaries come with the next
        rebuild. ``progress`` hears how embedding goes (a large file takes
        minutes). Raises ``DocumentRejected`` for a text with nothing in it.
        """
        with self._writers.writing(key):
            return self._ingests.ingest(key, document, progress)

    def ingest_bytes(
        self, key: ChannelKey, data: bytes, filename: str, link: str = "", added_by: str = "", external_id: str = "",
        size: int | None = None,
    ) -> IngestResult:
        """Loads an uploaded file's bytes and ingests it; see :meth:`ingest`. ``size`` is
        the file's full size when ``data`` may be only its beginning (a refusal names it)."""
        loaded = load_bytes(
            data, filename, self.settings.max_file_bytes, max_text_chars=self.settings.max_text_chars, size=size
        )
        document = Document(loaded.text, loaded.title, SourceKind.FILE, link, added_by, "", external_id,
                            file_name=default_title(filename))
        return self.ingest(key, document)

    def ingest_file(
        self, key: ChannelKey, path: Path, added_by: str = "", progress: ProgressCallback | None = None
    ) -> IngestResult:
        """Loads a local file and ingests it, linked by its ``file://`` URI."""
        loaded = load_file(path, self.settings.max_file_bytes, max_text_chars=self.settings.max_text_chars)
        link = path.resolve().as_uri()
        document = Document(loaded.text, loaded.title, SourceKind.FILE, link, added_by, file_name=path.name)
        return self.ingest(key, document, progress)

    def sources(self, key: ChannelKey, external_id: str | None = None) -> list[Source]:
        """The channel's sources, oldest first; with ``external_id``, only those of that
        message or file (a message pinned, edited and pinned again may be several)."""
        return self._channel(key).list_sources(external_id)

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
        ingest of it runs here any more (see ``ChannelWriters.writing``), and gives the disk
        space back on the embedded store; its next upload starts it anew.
        """
        source = self.find_source(key, reference)
        removed = self._purge(key, source.id)
        log.info("channel %s: forgot source %s (%d served nodes removed)", key, source.id[:12], removed)
        return source

    def replace_source(self, key: ChannelKey, old_id: str, successor_id: str) -> list[AnswerRecord]:
        """Replaces a source by its new version, stored already as ``successor_id`` (an edited
        message, a file uploaded again): the old version is forgotten as by :meth:`forget`
        (its excerpts, and every summary covering it, go from every tree and cache), except
        that the answers citing it are kept, passed on to the new version and marked
        ``changed``, and the served tree counts it as changed, not removed (see :meth:`stats`).
        An answer that quotes text the new version no longer has (see ``removed_text.py``)
        is not kept: it is deleted, so the removed text is shown nowhere. Returns every
        answer that cited it as it was before (``changed`` says which cited changed
        material already). Raises ``ChannelError`` when either source is not in the channel."""
        channel = self._channel(key)
        for source_id in (old_id, successor_id):
            if channel.get_source(source_id) is None:
                raise ChannelError(f"no source {source_id[:12]!r} in this channel")
        if old_id == successor_id:
            return []
        # Passed on first: if this stops before the forget, the answers already point at the
        # new version, and the old one is still there to replace again.
        removed = RemovedText(channel.source_text(old_id), channel.source_text(successor_id))
        answers = channel.pass_answers_on(old_id, successor_id, lambda answer: removed.quoted_in(answer.text))
        # A summary quoting none of the removed text stays, marked, until the next rebuild; a model's
        # summary was written from the whole old text, so it stays only when nothing was removed.
        written_by_model = not isinstance(self._summarizer, ExtractiveSummarizer)
        nodes = self._purge(key, old_id, successor_id,
                            lambda text: not removed.quoted_in(text) and (removed.nothing or not written_by_model))
        log.info("channel %s: source %s replaced by %s (%d served nodes removed, %d answers passed on or deleted)",
                 key, old_id[:12], successor_id[:12], nodes, len(answers))
        return answers

    def _purge(self, key: ChannelKey, source_id: str, successor: str = "",
               keep: Callable[[str], bool] | None = None) -> int:
        """Marks the source forgotten, then deletes everything of it (but the summaries ``keep``
        keeps, when it has a ``successor``); served nodes removed."""
        channel = self._channel(key)
        with self._writers.writing(key):
            # Marked first: from here on nothing lists, builds from or searches it, and any
            # writer finishing later sees the mark and cleans up after itself.
            channel.set_source_state(source_id, SourceState.FORGETTING)
            return self._writers.purge(key, channel, source_id, successor, keep)

    # -- building ------------------------------------------------------------

    async def rebuild(self, key: ChannelKey, progress: ProgressCallback | None = None, force: bool = False) -> BuildReport:
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

        Before it is served, the new tree passes the channel's regression gate
        (``regression_gate.py``): its approved questions must still find their sources about
        as well as with the served tree, and it must hold the excerpts its sources give.
        Otherwise it is kept aside, unserved, and ``BuildHeldBack`` says why; ``force``
        serves it anyway (the report's ``forced_over`` says what the gate found).
        """
        return await self._rebuilds.rebuild(key, progress, force)

    # -- answers and feedback ---------------------------------------------------

    def keep_answer(
        self, key: ChannelKey, answer_id: str, question: str, answer: Answer, asked_by: str, keep: int = 1000,
        thread: str = "",
    ) -> None:
        """Keeps an answer given in the channel with its question, so votes on it can be stored
        beside both, and the ``thread`` it was given in (to tell it there when what it cites
        changes). Forgetting a source it cites removes it. The channel keeps its newest
        ``keep`` answers: storage must not grow with every question for months."""
        self._kept.keep(key, answer_id, question, answer, asked_by, keep, thread)

    def vote(self, key: ChannelKey, answer_id: str, voter: str, up: bool) -> AnswerRecord:
        """Stores ``voter``'s vote on a kept answer (a later vote replaces an earlier one).
        Raises ``ChannelError`` for an answer this channel did not keep (or has forgotten)."""
        return self._kept.vote(key, answer_id, voter, up)

    def add_feedback(self, key: ChannelKey, answer_id: str, voter: str, reason: str) -> AnswerRecord:
        """Stores what ``voter`` said was wrong with a kept answer, with their 👎 (a later
        reason replaces an earlier one). Raises ``ChannelError`` as :meth:`vote` does."""
        return self._kept.add_feedback(key, answer_id, voter, reason)

    def check_questions(self, key: ChannelKey) -> GateCheck:
        """The channel's approved questions asked of its served tree, as the regression gate asks
        them (``regression_gate.py``): each one's hit@5 and first hit. Raises ``NothingToBuild``
        when no tree is served yet."""
        channel = self._channel(key)
        state = channel.live_state()
        if state is None:
            raise NothingToBuild("this channel has no tree yet: rebuild it first")
        with self._gate.foreground():
            return check_tree(channel, state, approved_questions(channel), self._embedder, self.settings.retrieval)

    def answers(self, key: ChannelKey) -> list[AnswerRecord]:
        """The answers kept in the channel, with their votes, oldest first."""
        return self._kept.listed(key)

    # -- notes ---------------------------------------------------------------

    def notes(self, key: ChannelKey) -> dict[str, str]:
        """Small named strings kept in the store with the channel (they survive restarts)."""
        return self._channel(key).notes()

    def set_note(self, key: ChannelKey, name: str, value: str | None) -> None:
        """Sets (or, with None, removes) one of the channel's notes."""
        self._channel(key).set_note(name, value)

    def store_reachable(self) -> bool:
        """Whether the store answers now; never raises (for readiness checks)."""
        return self._store.reachable()

    def channels(self) -> list[ChannelKey]:
        """Every channel the store has seen."""
        return self._store.channels()

    # -- questions -----------------------------------------------------------

    def retrieve(self, key: ChannelKey, question: str, settings: RetrievalSettings | None = None) -> list[Hit]:
        """The nodes that best answer ``question``, best first, within the token budget.
        Raises ``NoMaterial`` for a channel without sources, ``ChannelError`` for a tree built
        with another embedding model."""
        return self._questions.retrieve(key, question, settings)

    async def answer(self, key: ChannelKey, question: str, settings: RetrievalSettings | None = None) -> Answer:
        """An answer to ``question`` from the channel's material, citing the nodes it used.

        The offline answerer also hears the question's scope: whether the channel
        holds anything about it, and whether to lead with a summary.
        """
        return await self._questions.answer(key, question, settings)

    @property
    def streams_answers(self) -> bool:
        """Whether answers can be had as they are written (:meth:`answer_stream`): a language
        model's can; the offline answerer computes its answer at once and does not stream."""
        return self._questions.streams

    async def answer_stream(self, key: ChannelKey, question: str,
                            settings: RetrievalSettings | None = None) -> AnswerStream:
        """The answer to ``question`` as it is written (see :class:`~raptor_engine.protocols.AnswerStream`).

        The retrieval is done when this returns (its errors are raised here); the model is
        asked when the stream is read, and its failures are raised from the reading. Its
        finished ``answer`` is what :meth:`answer` gives for the same reply. An answerer that
        does not stream gives its whole answer as one piece.
        """
        return await self._questions.answer_stream(key, question, settings)

    # -- inspecting ------------------------------------------------------------

    def stats(self, key: ChannelKey) -> TreeStats:
        """The served tree's version, size per layer, and how many sources changed since it was
        built: added, removed, or replaced by a new version (each such source counted once)."""
        channel = self._channel(key)
        return tree_stats(key, channel, lambda state: self._indexes.tree(key, channel, state).summaries.spanning())

    def unchanged_since(self, key: ChannelKey) -> int:
        """The served tree's version when a rebuild now would build it again: no source added,
        changed or removed since, and built the way this engine builds (embedding model, chunk
        size, summariser, clustering). 0 otherwise, or before the first build. Reads the source
        list and the served state only: no model, no clustering."""
        channel = self._channel(key)
        state = channel.live_state()
        if state is None or state.recipe != self._rebuilds.recipe:
            return 0
        return state.version if tree_stats(key, channel).pending_sources == 0 else 0

    def node(self, key: ChannelKey, node_id: str) -> NodeView:
        """A node of the served tree with its children and parents. Raises ``NodeNotFound``."""
        return node_view(self._channel(key), node_id)

    def top_nodes(self, key: ChannelKey, limit: int = 5) -> list[Node]:
        """The nodes of the served tree's highest layer (the root first), at most ``limit``."""
        return top_nodes(self._channel(key), limit)

