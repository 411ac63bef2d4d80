"""The composition root: the one module that builds the engine, the bot and the adapters
from a validated :class:`~bot.config.Config`, and owns their life cycle.

* :func:`build_engine` for the one-shot commands (``python -m bot rebuild`` ...);
* :func:`open_bot` and :func:`serve` for a long-running bot: the bot is opened and
  started here, every adapter (:class:`adapters.protocol.Adapter`) is handed the
  started bot, and the bot is stopped here when the first adapter ends or a signal
  cancels the session;
* :func:`chosen_adapters`: the configured chat platforms, else the console.

Nothing else in ``bot`` imports ``adapters``; adapters never import this module.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from pathlib import Path
from typing import TYPE_CHECKING, TextIO
from urllib.parse import urlsplit, urlunsplit

from bot import replies
from bot.build_lock import MachineBuildLocks
from bot.config import MB, Config
from bot.data_lock import DataLock, lock_data_dir
from bot.errors import ConfigError
from bot.memory import limit_heap_growth
from bot.paths import machine_home, user_cache
from raptor_engine import (
    Answerer,
    BuildGuard,
    ChromaStore,
    ClusteringSettings,
    Embedder,
    Engine,
    EngineSettings,
    ExtractiveAnswerer,
    ExtractiveSettings,
    ExtractiveSummarizer,
    HuggingFaceTokenCounter,
    ProviderError,
    RetrievalMode,
    RetrievalSettings,
    SentenceTransformerEmbedder,
    SpendingLimits,
    Summarizer,
    SupportJudge,
    TokenCounter,
    default_model_path,
    use_numba_cache_dir as use_cache_dir,
)

if TYPE_CHECKING:
    from adapters.protocol import Adapter
    from bot.observability.endpoints import HealthServer
    from bot.runtime import Assistant
    from raptor_engine import LLMSettings

log = logging.getLogger(__name__)

WORKER_NICENESS = 10  # as the engine lowers a rebuild's thread in a process that also answers


def engine_settings(config: Config) -> EngineSettings:
    """The engine's settings as the configuration states them."""
    tree = config.tree
    return EngineSettings(
        chunk_tokens=config.chunking.tokens,
        max_file_bytes=int(config.files.max_mb * MB),
        max_text_chars=int(config.files.max_text_mb * MB),
        summary_tokens=tree.summary_tokens,
        max_concurrency=tree.max_concurrency,
        spending=SpendingLimits(config.llm.max_calls_per_rebuild, config.llm.max_tokens_per_rebuild),
        clustering=ClusteringSettings(
            reduction_dim=tree.reduction_dim,
            max_clusters=tree.max_clusters,
            membership_threshold=tree.membership_threshold,
            local_neighbors=tree.local_neighbors,
            max_cluster_tokens=tree.max_cluster_tokens,
            seed=tree.seed,
        ),
        retrieval=RetrievalSettings(
            mode=RetrievalMode(config.retrieval.mode),
            budget=config.retrieval.budget,
            top_k=config.retrieval.top_k,
            per_layer=config.retrieval.per_layer,
            hybrid=config.retrieval.hybrid,
        ),
        support_threshold=config.answers.support_threshold,
        indexed_channels=config.retrieval.indexed_channels,
    )


def open_store(config: Config) -> ChromaStore:
    """The Chroma server if one is configured (signed in as ``chroma`` says), else Chroma
    embedded under ``data_dir``. Credentials are never logged, only how they are sent.

    The embedded store is one process's alone: it is opened only under the data
    directory's lock (see :mod:`bot.data_lock`), held as long as the returned store
    lives. Raises ``DataDirInUse`` naming the process that holds it; nothing is written
    then. A server takes no lock: several processes may share it."""
    chroma = config.chroma
    log.info("store: %s", describe_store(config))
    if chroma.host:
        return ChromaStore.remote(
            chroma.host, chroma.port, chroma.ssl,
            token=chroma.token.get_secret_value(), token_header=chroma.token_header,
            username=chroma.username, password=chroma.password.get_secret_value(),
            tenant=chroma.tenant, database=chroma.database, timeout_s=chroma.timeout_s,
        )
    lock = lock_data_dir(config.data_dir)
    store = ChromaStore.embedded(config.data_dir / "chroma")
    # The finalizer's reference keeps the lock as long as the store lives (the lock is
    # shared by every store of this directory in the process, so it is not released here).
    weakref.finalize(store, _let_go, lock)
    return store


def _let_go(lock: DataLock) -> None:
    """Drops a store's reference to its lock (the last one gone releases it)."""


def describe_store(config: Config) -> str:
    """Which store is used, for the start-up log line; never a credential."""
    chroma = config.chroma
    if not chroma.host:
        return f"Chroma embedded in {config.data_dir.resolve() / 'chroma'}"
    signed_in = ("with a token" if chroma.token.get_secret_value()
                 else "as " + chroma.username if chroma.username else "without credentials")
    scheme = "https" if chroma.ssl else "http"
    return (f"the Chroma server at {scheme}://{chroma.host}:{chroma.port} (tenant {chroma.tenant}, "
            f"database {chroma.database}), {signed_in}")


def describe_models(config: Config) -> str:
    """Which embedding model and language model are used, for the start-up log line."""
    llm = config.llm
    endpoint = public_url(llm.base_url) if llm.base_url else ""
    if config.embedder.provider == "api" and llm.base_url:
        embedding = f"{config.embedder.model} from {endpoint}"
    else:
        embedding = config.embedder.model or "all-MiniLM-L6-v2 (packaged)"
    language = (f"{llm.model} at {endpoint}" if llm.base_url
                else "offline (extractive summaries and answers)")
    return f"embeddings: {embedding}; language model: {language}"


def public_url(url: str) -> str:
    """``url`` without what may be secret: user name, password, query and fragment."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    try:
        port = parts.port
    except ValueError:  # not a number: the endpoint fails later with its own message
        port = None
    if port is not None:
        host = f"{host}:{port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def llm_settings(config: Config) -> LLMSettings:
    """The language-model endpoint's settings (``llm.base_url`` must be set)."""
    from raptor_engine import LLMSettings  # the OpenAI client: only where an endpoint is set

    llm = config.llm
    return LLMSettings(
        base_url=llm.base_url or "",
        model=llm.model,
        api_key=llm.api_key.get_secret_value(),
        max_concurrency=llm.max_concurrency,
        timeout_s=llm.timeout_s,
        max_retries=llm.max_retries,
        summary_tokens=llm.summary_tokens,
        answer_tokens=llm.answer_tokens,
        context_tokens=llm.context_tokens,
    )


def build_engine(config: Config, *, clusters_soon: bool = False, guard: BuildGuard | None = None,
                 threads: Executor | None = None) -> Engine:
    """The engine the configuration describes: the offline defaults, with the
    language model summarising and answering where ``llm.base_url`` is set, and
    embedding through its API where ``embedder.provider`` is ``api``. With
    ``clusters_soon`` (a one-shot rebuild), the clustering worker starts at once and
    the embedding model loads on a thread, so that the worker's start, loading the
    model and the first clustering overlap instead of following one another. ``guard``
    replaces the configuration's build guard (a rebuild worker's checks the lease each job holds).
    ``threads`` is the engine's own executor (:func:`bot.engine_calls.engine_threads` for a
    process serving coroutines; None for the one-shot commands, which call the engine directly)."""
    settings = engine_settings(config)
    log.info("%s", describe_models(config))
    store = open_store(config)
    # After the data directory's lock (nothing is written without it), before anything
    # imports numba; the clustering worker process inherits the setting.
    use_cache_dir(machine_home(config))
    if clusters_soon:
        from raptor_engine import prestart_clustering  # imported only where a worker is wanted

        prestart_clustering()
    judge: SupportJudge | None = None
    if config.llm.base_url:
        embedder, counter, summarizer, answerer, judge = _with_language_model(config, settings, clusters_soon)
    else:
        embedder, counter = _local_embedder(config, clusters_soon)
        summarizer = ExtractiveSummarizer(counter, settings.summary_tokens)
        answerer = ExtractiveAnswerer(embedder, ExtractiveSettings(summary_chars=config.retrieval.summary_chars))
    if config.answers.judge == "nli":
        judge = nli_judge(config.answers.nli_model)
    return Engine(store, embedder, counter, summarizer, answerer, settings,
                  build_guard=guard or build_guard(config), threads=threads, judge=judge)


def nli_judge(directory: str) -> SupportJudge:
    """The local NLI model of ``answers.nli_model`` as the support judge. Raises ``ConfigError``
    naming the directory when it holds no NLI model (said at start, not at the first answer)."""
    from raptor_engine import NliJudge  # torch's cross-encoder, loaded only where configured

    path = Path(directory).expanduser()
    if not path.is_dir():
        raise ConfigError(f"answers.nli_model: {path} is not a directory holding an NLI model")
    try:
        return NliJudge(path)
    except ProviderError as error:
        raise ConfigError(f"answers.nli_model: {error}") from error


def _local_embedder(config: Config, clusters_soon: bool) -> tuple[Embedder, TokenCounter]:
    """The sentence-transformers model (the packaged one by default). A one-shot rebuild
    (``clusters_soon``) loads it on a thread while it clusters, and embeds on one core less
    than the machine has: it embeds only the summaries, always while the clustering worker
    computes beside it. (On two cores, a warm 15-article rebuild took 9.8 and 10.6 s so,
    against 11.4 and 13.0 s with both cores: the two fought over them. An ingest, embedding
    alone, keeps every core.)"""
    threads = max(1, (os.cpu_count() or 2) - 1) if clusters_soon else None
    local = SentenceTransformerEmbedder(config.embedder.model, batch_size=config.embedder.batch_size,
                                        background=clusters_soon, cache_dir=user_cache() / "model-cache",
                                        threads=threads)
    return local, local.token_counter()


def _with_language_model(
    config: Config, settings: EngineSettings, clusters_soon: bool
) -> tuple[Embedder, TokenCounter, Summarizer, Answerer, SupportJudge | None]:
    """The endpoint's summariser and answerer, its embedder where ``embedder.provider`` is
    ``api``, and its support judge where ``answers.judge`` is ``model``. The OpenAI client is
    imported only here: the offline defaults never load it."""
    from raptor_engine import LLMAnswerer, LLMClient, LLMSummarizer, ModelJudge, OpenAIEmbedder

    llm = llm_settings(config)
    client = LLMClient(llm)
    embedder: Embedder
    if config.embedder.provider == "api":
        embedder = OpenAIEmbedder(client, config.embedder.model, batch_size=config.embedder.batch_size)
        counter: TokenCounter = HuggingFaceTokenCounter.from_model_dir(default_model_path())
    else:
        embedder, counter = _local_embedder(config, clusters_soon)
    judge = ModelJudge(client, llm) if config.answers.judge == "model" else None
    return embedder, counter, LLMSummarizer(client, counter, llm), LLMAnswerer(client, llm), judge


def build_guard(config: Config) -> BuildGuard | None:
    """With coordination, the channel leases in Redis that keep any two processes from
    rebuilding one channel at once. Else, with a Chroma server, the build locks that keep
    two processes of this machine from it; None for the embedded store, whose data
    directory's lock already keeps every other process out."""
    chroma = config.chroma
    if config.coordination.enabled:
        from bot.coordination.lease import ChannelLeases
        from bot.coordination.link import RedisLink

        return ChannelLeases(RedisLink(config.coordination), config.coordination.lease_s)
    if not chroma.host:
        return None
    return MachineBuildLocks.for_server(machine_home(config), chroma.host, chroma.port, chroma.tenant, chroma.database)


async def open_bot(config: Config) -> Assistant:
    """The bot the configuration describes, not started yet, its engine calls on a bounded pool
    of their own (``bot.engine_calls``). Building the engine loads the embedding model
    (seconds), so it happens in a worker thread."""
    from bot.engine_calls import AsyncEngine, engine_threads
    from bot.runtime import Assistant  # the chat side: not loaded by the one-shot commands

    limit_heap_growth()  # before the engine starts its threads: a bot runs for months
    built = await asyncio.to_thread(functools.partial(build_engine, config, threads=engine_threads()))
    engine = AsyncEngine(built)  # the chat side's one way to the engine
    if not config.coordination.enabled:
        return Assistant(config, engine)
    from bot.front_end import front_end

    return Assistant(config, engine, front_end=front_end(config, engine))


def chosen_adapters(config: Config, stdin: TextIO, write: Callable[[str], None],
                    channel: str | None = None, write_partial: Callable[[str], None] | None = None) -> list[Adapter]:
    """Every chat platform ``config`` has credentials for; the console (on ``stdin`` and
    ``write``, in ``channel``; a language model's answers printed as they come through
    ``write_partial``) when there is none."""
    from adapters.console.app import ConsoleAdapter
    from adapters.registry import configured_platforms

    return configured_platforms(config) or [ConsoleAdapter(stdin, write, channel, write_partial)]


async def serve(config: Config, adapters: Sequence[Adapter], say: Callable[[str], None]) -> None:
    """Opens and starts the bot, serves it on every adapter until the first one ends (the
    console's ``/quit``) or fails, or until cancelled (a signal); then stops the bot and
    cancels the adapters. An adapter's failure is raised after the bot has stopped.

    The bot stops before the adapters close, so that people whose rebuild was interrupted
    are told while the platforms can still carry the message. ``say`` tells the operator
    at the terminal what happens (starting, serving, stopped)."""
    from bot.runtime import THREADS_GRACE_S

    if all(adapter.ends_on_its_own for adapter in adapters):
        say(replies.SESSION_STARTING)
    else:
        say(replies.serving_text([adapter.name for adapter in adapters]))
    bot = await open_bot(config)
    await bot.start()
    health = await _serve_health(config, bot)
    tasks = {asyncio.ensure_future(adapter.serve(bot)): adapter for adapter in adapters}
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            task.result()  # an adapter that failed: raised once the bot has stopped
            adapter = tasks[task]
            log.log(logging.INFO if adapter.ends_on_its_own else logging.ERROR,
                    "%s stopped serving; stopping the bot", adapter.name)
    finally:
        await bot.stop()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if health is not None:
            await health.stop()
        await bot.calls.finish(THREADS_GRACE_S)  # an upload being stored should be stored
        say(replies.SESSION_ENDED)


async def _serve_health(config: Config, bot: Assistant) -> HealthServer | None:
    """``/metrics``, ``/healthz`` and ``/readyz`` of a serving process, if ``observability.port`` is set."""
    if not config.observability.port:
        return None
    from bot.observability.endpoints import HealthServer
    from bot.observability.probes import add_probes

    server = HealthServer(bot.metrics)
    link = bot.front_end.link if bot.front_end is not None else None
    add_probes(server, config, bot.engine, link)
    if bot.front_end is not None:
        bot.metrics.watch_queue(bot.front_end.rebuilds.depth)
    port = await server.start(config.observability.host, config.observability.port)
    log.info("metrics and health checks on %s:%d", config.observability.host, port)
    return server


def _yield_cpu_to_front_ends() -> None:
    """Lowers the CPU priority of every thread the worker has, and so of every thread it starts.

    A worker sharing cores with a front-end (one box, the compose file) would otherwise take
    them from questions: the engine lowers a rebuild's own thread, but the embedding model's
    thread pool is started when the model loads, and imports start threads of their own. On
    Linux niceness is per thread and a new thread inherits its creator's, so lowering every
    thread there is now (``/proc/self/task``) lowers all that follow. On a box of its own a
    worker loses nothing: niceness only matters when processes compete."""
    tasks = Path("/proc/self/task")
    try:
        if not tasks.is_dir():  # not Linux: there the whole process has one priority
            os.nice(WORKER_NICENESS)
            return
        for task in tasks.iterdir():
            with contextlib.suppress(ProcessLookupError):  # a thread that just ended
                tid = int(task.name)
                os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + WORKER_NICENESS)
    except OSError as exc:  # a container may forbid it: the worker still works, at normal priority
        log.warning("could not lower the worker's CPU priority (%s): questions on this box may slow while it builds",
                    exc)


def run_worker(config: Config) -> int:
    """``python -m bot worker``: takes rebuild jobs from the coordination server's queue until
    SIGTERM or SIGINT. Raises ``ConfigError`` without ``coordination.redis_url``."""
    if not config.coordination.enabled:
        raise ConfigError("the worker takes rebuild jobs from a coordination server: set coordination.redis_url "
                          "(and chroma.host); with neither, `python -m bot serve` rebuilds in its own process")
    from bot.coordination.lease import ChannelLeases, HeldLeases
    from bot.coordination.link import RedisLink
    from bot.engine_calls import AsyncEngine, engine_threads
    from bot.observability.endpoints import HealthServer
    from bot.observability.metrics import Metrics
    from bot.observability.probes import add_probes
    from bot.rebuilds.job_queue import RebuildQueue
    from bot.rebuilds.worker import serve_worker

    _yield_cpu_to_front_ends()
    link = RedisLink(config.coordination)
    # A build stuck past coordination.stall_s lets its lease run out, so another worker may build.
    leases = ChannelLeases(link, config.coordination.lease_s, stall_s=config.coordination.stall_s)
    # Each job holds the lease; the engine's calls run on a bounded pool of their own.
    engine = AsyncEngine(build_engine(config, clusters_soon=True, guard=HeldLeases(leases), threads=engine_threads()))
    metrics = Metrics()
    server = None
    if config.observability.port:
        server = HealthServer(metrics)
        add_probes(server, config, engine.engine, link)
        metrics.watch_queue(RebuildQueue(link, config.coordination.job_timeout_s).depth)
        port = server.start_in_thread(config.observability.host, config.observability.port)
        log.info("metrics and health checks on %s:%d", config.observability.host, port)
    try:
        return serve_worker(config, engine, link, leases, metrics)
    finally:
        if server is not None:
            server.stop_thread()

