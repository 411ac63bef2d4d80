"""Rebuilding a channel's tree: gather its leaves, build, publish, tidy.

Contract of :meth:`RebuildPipeline.rebuild` (``Engine.rebuild`` states the public side):

* It runs on a thread of its own at a lower CPU priority (see ``background.py``), holds the
  build guard of the channel, where one is given, for the whole build (``BuildBusy`` at once
  when another process builds it), and counts itself a writer of the channel
  (``ChannelWriters.writing``) inside that.
* Interrupted forgets are finished first. ``NothingToBuild`` is raised for a channel without
  sources, and when every source was forgotten while the build ran.
* Leaves cached by an ingest are reused, the others embedded and cached now (see
  ``ingest_pipeline.py``); summaries of clusters whose members are unchanged come from the
  channel's summary cache.
* The new tree is written beside the served one, then served in one step; whatever fails,
  the previous tree keeps being served (``BuildError``, ``SpendingLimitReached``).
* However the build ends (done, failed, cancelled), a source forgotten while it ran leaves
  nothing in what it wrote: summaries, leaves, an unfinished tree.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import ParamSpec, TypeVar

import numpy as np

from raptor_engine.background import ForegroundGate, run_in_background
from raptor_engine.channel_writers import ChannelWriters, utc_now
from raptor_engine.clustering import ClusteringSettings
from raptor_engine.errors import (
    BuildError,
    BuildHeldBack,
    NothingToBuild,
    ProviderError,
    SpendingLimitReached,
    StoreError,
)
from raptor_engine.ingest_pipeline import IngestPipeline
from raptor_engine.metering import Meter, ModelUsage, SpendingLimits, metering
from raptor_engine.protocols import BuildGuard, Embedder, Summarizer, TokenCounter
from raptor_engine.regression_gate import GateVerdict, RegressionGate, expected_leaves, leaves_per_source
from raptor_engine.retrieval import RetrievalSettings
from raptor_engine.store import ChannelStore, ChromaStore, SourceState, TreeState, leaf_node, profile_digest
from raptor_engine.tree import BuiltTree, ProgressCallback, TreeBuilder
from raptor_engine.types import BuildReport, ChannelKey, Node, Source

log = logging.getLogger(__name__)

P = ParamSpec("P")
T = TypeVar("T")

LeafGroups = list[tuple[list[Node], np.ndarray]]  # per source, its leaf nodes and their vectors


@dataclass(frozen=True, slots=True)
class BuildSettings:
    """What shapes one rebuild: the clustering, how many summaries are asked for at once, and
    the spending ceiling of the language-model summaries it makes."""

    clustering: ClusteringSettings
    max_concurrency: int
    spending: SpendingLimits
    retrieval: RetrievalSettings = RetrievalSettings()  # the channel's: the regression gate asks as questions will


class RebuildPipeline:
    """Builds and publishes channels' trees. See the module docstring."""

    def __init__(
        self,
        *,
        store: ChromaStore,
        embedder: Embedder,
        summarizer: Summarizer,
        counter: TokenCounter,
        settings: BuildSettings,
        ingests: IngestPipeline,
        writers: ChannelWriters,
        gate: ForegroundGate,
        warm_indexes: Callable[[ChannelKey, ChannelStore, TreeState], object],
        build_guard: BuildGuard | None = None,
    ) -> None:
        """``gate`` is the one questions hold (a build steps aside between its steps while one
        runs); ``warm_indexes`` builds a served tree's in-memory indexes; ``build_guard``, where
        given, is held around every rebuild (see :class:`BuildGuard`)."""
        self._store = store
        self._embedder = embedder
        self._summarizer = summarizer
        self._counter = counter
        self._settings = settings
        self._ingests = ingests
        self._writers = writers
        self._gate = gate
        self._warm = warm_indexes
        self._build_guard = build_guard
        # A summary's key already hashes its members' texts (see tree.summary_key): only the
        # model embedding it is left to tell one cache from another.
        self._summary_profile = profile_digest(embedder.model_id)
        self._regression_gate = RegressionGate(embedder, settings.retrieval)
        self.recipe = profile_digest(ingests.leaf_profile, summarizer.identity, repr(settings.clustering))

    async def rebuild(self, key: ChannelKey, progress: ProgressCallback | None = None, force: bool = False) -> BuildReport:
        """Builds a new tree of the channel and serves it if it passes the regression gate (or
        ``force``); ``progress`` is called from the build's own threads."""
        return await run_in_background(self._guarded(key, progress, force), name=f"rebuild {key}")

    async def _guarded(self, key: ChannelKey, progress: ProgressCallback | None, force: bool) -> BuildReport:
        # Held on the build's own thread: ``BuildBusy`` comes at once, before any work.
        if self._build_guard is None:
            return await self._counted(key, progress, force)
        with self._build_guard.hold(key):
            return await self._counted(key, progress, force)

    async def _counted(self, key: ChannelKey, progress: ProgressCallback | None, force: bool) -> BuildReport:
        with self._writers.writing(key) as writing:
            report = await self._rebuild_channel(key, progress, force)
        if writing.dropped:  # a forget of the last source ended while this build ran
            raise NothingToBuild("every source of this channel was forgotten while the rebuild ran")
        return report

    async def _rebuild_channel(self, key: ChannelKey, progress: ProgressCallback | None, force: bool) -> BuildReport:
        channel = self._writers.channel(key)
        for source_id in channel.sources_in_state(SourceState.FORGETTING):
            log.info("channel %s: finishing the interrupted forget of source %s", key, source_id[:12])
            self._writers.purge(key, channel, source_id)
        sources = channel.list_sources()
        if not sources:
            raise NothingToBuild("this channel has no sources yet: add a file or pin a message first")
        try:
            return await self._build(key, channel, sources, progress, force)
        finally:
            # However the build ended (failed, cancelled), a source forgotten while it ran
            # must not survive in what it wrote: summaries, leaves, an unfinished tree.
            self._writers.purge_forgotten_quietly(key, channel, [s.id for s in sources])

    async def _build(
        self, key: ChannelKey, channel: ChannelStore, sources: list[Source], progress: ProgressCallback | None,
        force: bool,
    ) -> BuildReport:
        """Builds the channel's next tree and serves it; a model's failure or the spending
        ceiling frees the unserved tree and says the previous one still answers."""
        version = channel.next_version()
        stages: dict[str, float] = {}
        began = time.perf_counter()
        with metering(self._settings.spending) as meter:
            try:
                built, state, embedded, verdict = await self._build_and_publish(
                    key, channel, version, sources, progress, meter, stages, force
                )
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
        report = _report(version, len(sources), state, built, embedded, stages, usage, time.perf_counter() - began)
        return replace(report, approved_found=verdict.check.found, approved_total=verdict.check.total,
                       forced_over=verdict.reason if verdict.forced else "")

    async def _build_and_publish(
        self,
        key: ChannelKey,
        channel: ChannelStore,
        version: int,
        sources: list[Source],
        progress: ProgressCallback | None,
        meter: Meter,
        stages: dict[str, float],
        force: bool,
    ) -> tuple[BuiltTree, TreeState, int, GateVerdict]:
        """The built tree, the state now served, how many leaves were embedded now and the
        regression gate's verdict; each stage's seconds go into ``stages``."""
        served = channel.live_state()
        # Its leaves are what this build should hold only if it was cut the same way (another
        # chunk size cuts another number of excerpts): else the ingest's counts stand.
        comparable = served if served is not None and served.recipe == self.recipe else None
        served_leaves = await asyncio.to_thread(leaves_per_source, channel, comparable)
        groups, embedded = await self._leaves(key, channel, sources, stages)
        cut = Counter({nodes[0].source_ids[0]: len(nodes) for nodes, _ in groups if nodes})
        expected = expected_leaves(served_leaves, [(source.id, cut[source.id]) for source in sources])
        if not groups:
            raise NothingToBuild("every source of this channel was forgotten while the rebuild began")
        builder = TreeBuilder(
            self._embedder, self._summarizer, self._counter, self._settings.clustering,
            self._settings.max_concurrency, progress, meter, self._gate,
        )
        cache = _SummaryCacheView(
            channel, self._summary_profile, lambda ids: self._writers.purge_forgotten(key, channel, ids)
        )
        built = await builder.build(groups, cache)
        stages.update(built.stage_seconds)
        state, verdict = await _timed(stages, "store", self._publish, key, channel, version, sources, built,
                                      (served, expected, force))
        await _timed(stages, "index", self._warm_indexes, key, channel)
        await _timed(stages, "tidy", self._tidy_store, key)
        return built, state, embedded, verdict

    async def _leaves(
        self, key: ChannelKey, channel: ChannelStore, sources: list[Source], stages: dict[str, float]
    ) -> tuple[LeafGroups, int]:
        """Each source's leaf nodes with their vectors, and how many leaves were embedded now."""
        started = time.perf_counter()
        profile = self._ingests.leaf_profile
        cached = await asyncio.to_thread(channel.cached_leaves, profile, [s.id for s in sources])
        stages["load"] = time.perf_counter() - started
        groups: LeafGroups = []
        embedded = 0
        # Sources in content order, not arrival order: the same sources give the same tree,
        # whenever and in whatever order they were added (clustering is order-sensitive).
        for source in sorted(sources, key=lambda s: s.id):
            if source.id not in cached:
                await self._gate.step_aside()
                text = await asyncio.to_thread(channel.source_text, source.id)
                chunks, vectors = await asyncio.to_thread(self._ingests.chunk_and_embed, source.id, text, stages)
                await asyncio.to_thread(self._ingests.cache_leaves, key, channel, chunks, vectors)
                cached[source.id] = (chunks, vectors)
                embedded += len(chunks)
            chunks, vectors = cached[source.id]
            if not chunks:
                continue  # forgotten since the build listed it: its text read back empty
            groups.append(([leaf_node(chunk, source.title, source.link) for chunk in chunks], vectors))
        return groups, embedded

    def _publish(
        self, key: ChannelKey, channel: ChannelStore, version: int, sources: list[Source], built: BuiltTree,
        gate: tuple[TreeState | None, int, bool],
    ) -> tuple[TreeState, GateVerdict]:
        """Writes the built tree beside the served one, checks it (``gate``: the served state,
        the leaves expected, whether forced) and switches to it; a tree the regression gate
        refuses is kept aside, unserved, and ``BuildHeldBack`` raised.

        Runs in a worker thread that goes on even if the build is cancelled, so it
        cleans up after itself: a source forgotten while this build ran must not
        come back with the new tree, whether it was written whole or not.
        """
        served, expected, force = gate
        try:
            if self._build_guard is not None:
                # Before writing too: a builder cut off while it built must not write beside (or,
                # with the same version number, over) the tree its successor serves.
                self._build_guard.confirm(key)
            channel.write_tree(version, built.nodes, built.embeddings)
            state = TreeState(
                version=version,
                built_at=utc_now(),
                embedder_id=self._embedder.model_id,
                source_ids=tuple(s.id for s in sources),
                nodes_per_layer=built.nodes_per_layer(),
                recipe=self.recipe,
            )
            verdict = self._regression_gate.verdict(channel, state, served, expected,
                                                    built.nodes_per_layer().get(0, 0), force)
            if not verdict.passed:
                repeated = self._regression_gate.held_back(channel, verdict, [s.id for s in sources], state.built_at)
                log.warning("channel %s: tree v%d held back by the regression gate: %s", key, version, verdict.reason)
                raise BuildHeldBack(verdict.reason, found=verdict.check.found, total=verdict.check.total,
                                    repeated=repeated)
            if self._build_guard is not None:
                self._build_guard.confirm(key)  # the last moment: a builder cut off must not switch
            if not channel.switch_to(state):
                # Another build's newer tree got served meanwhile: it stays; this one goes.
                channel.discard_tree(version)
                return channel.live_state() or state, verdict
            self._regression_gate.served_now(channel, verdict, state.built_at)
            channel.prune_summaries(self._summary_profile, built.used_keys)
        except BuildHeldBack:
            raise  # kept aside, with its reason, until the next build
        except BaseException:
            _discard_quietly(key, channel, version)
            raise
        finally:
            self._writers.purge_forgotten(key, channel, [s.id for s in sources])
        return state, verdict

    def _warm_indexes(self, key: ChannelKey, channel: ChannelStore) -> None:
        """Reads the served tree's vectors and builds its BM25 index and summary map now, so the
        first question after a rebuild does not wait for them. The tree is already served: a
        store failure here only leaves them to be built on first use."""
        try:
            state = channel.live_state()
            if state is not None:
                self._warm(key, channel, state)
        except StoreError as exc:
            log.warning("channel %s: the new tree's indexes will be built on first use: %s", key, exc)

    def _tidy_store(self, key: ChannelKey) -> None:
        """Lets the store clear what this rebuild's overwrites left (see ``ChromaStore.tidy``).
        The tree is already served: a failure is logged, and the next rebuild tries again."""
        try:
            self._store.tidy()
        except StoreError as exc:
            log.warning("channel %s: could not tidy the store after the rebuild: %s", key, exc)


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


async def _timed(stages: dict[str, float], stage: str, work: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """Runs blocking ``work`` in a worker thread (the event loop keeps serving the build's
    other steps) and records its seconds as ``stage``, once it has succeeded."""
    started = time.perf_counter()
    result = await asyncio.to_thread(work, *args, **kwargs)
    stages[stage] = time.perf_counter() - started
    return result


def _discard_quietly(key: ChannelKey, channel: ChannelStore, version: int) -> None:
    """Frees an unserved tree of a failed publish; a store failure here only leaves it
    to be written over by the next build."""
    try:
        channel.discard_tree(version)
    except StoreError as exc:
        log.warning("channel %s: could not free the unfinished tree v%d: %s", key, version, exc)


def _report(
    version: int, sources: int, state: TreeState, built: BuiltTree, embedded: int, stages: dict[str, float], usage: ModelUsage,
    elapsed: float,
) -> BuildReport:
    """What the rebuild of tree ``version`` did; every leaf not embedded now was reused. ``state``
    is the tree served after it: another build's newer one, when that got served meanwhile."""
    leaves = state.nodes_per_layer.get(0, 0)
    return BuildReport(
        version=version,
        sources=sources,
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
        elapsed_seconds=elapsed,
    )
