"""The composition root: turns a validated :class:`~bot.config.Config` into a running engine."""

from __future__ import annotations

import logging
import weakref
from urllib.parse import urlsplit, urlunsplit

from bot.build_lock import MachineBuildLocks
from bot.config import Config
from bot.data_lock import DataLock, lock_data_dir
from bot.paths import machine_home, user_cache
from raptor_engine.answering import ExtractiveAnswerer, ExtractiveSettings
from raptor_engine.clustering import ClusteringSettings
from raptor_engine.embedding import SentenceTransformerEmbedder
from raptor_engine.engine import Engine, EngineSettings
from raptor_engine.llm import LLMAnswerer, LLMClient, LLMSettings, LLMSummarizer, OpenAIEmbedder
from raptor_engine.metering import SpendingLimits
from raptor_engine.numba_cache import use_cache_dir
from raptor_engine.protocols import Answerer, Embedder, Summarizer, TokenCounter
from raptor_engine.retrieval import RetrievalSettings
from raptor_engine.store import ChromaStore
from raptor_engine.summarizing import ExtractiveSummarizer
from raptor_engine.tokens import HuggingFaceTokenCounter, default_model_path
from raptor_engine.types import RetrievalMode

log = logging.getLogger(__name__)


def engine_settings(config: Config) -> EngineSettings:
    """The engine's settings as the configuration states them."""
    tree = config.tree
    return EngineSettings(
        chunk_tokens=config.chunking.tokens,
        max_file_bytes=int(config.files.max_mb * 1024 * 1024),
        max_text_chars=int(config.files.max_text_mb * 1024 * 1024),
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
            tenant=chroma.tenant, database=chroma.database,
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


def build_engine(config: Config, *, clusters_soon: bool = False) -> Engine:
    """The engine the configuration describes: the offline defaults, with the
    language model summarising and answering where ``llm.base_url`` is set, and
    embedding through its API where ``embedder.provider`` is ``api``. With
    ``clusters_soon`` (a one-shot rebuild), the clustering worker starts at once and
    the embedding model loads on a thread, so that the worker's start, loading the
    model and the first clustering overlap instead of following one another."""
    settings = engine_settings(config)
    log.info("%s", describe_models(config))
    store = open_store(config)
    # After the data directory's lock (nothing is written without it), before anything
    # imports numba; the clustering worker process inherits the setting.
    use_cache_dir(machine_home(config))
    if clusters_soon:
        from raptor_engine import cluster_worker  # imported only where a worker is wanted

        cluster_worker.prestart()
    llm = llm_settings(config) if config.llm.base_url else None
    client = LLMClient(llm) if llm else None
    embedder: Embedder
    if client is not None and config.embedder.provider == "api":
        embedder = OpenAIEmbedder(client, config.embedder.model, batch_size=config.embedder.batch_size)
        counter: TokenCounter = HuggingFaceTokenCounter.from_model_dir(default_model_path())
    else:
        # A one-shot rebuild loads the model while it clusters: it embeds only the summaries.
        local = SentenceTransformerEmbedder(config.embedder.model, batch_size=config.embedder.batch_size,
                                            background=clusters_soon, cache_dir=user_cache() / "model-cache")
        embedder, counter = local, local.token_counter()
    if client is None or llm is None:
        summarizer: Summarizer = ExtractiveSummarizer(counter, settings.summary_tokens)
        answering = ExtractiveSettings(summary_chars=config.retrieval.summary_chars)
        answerer: Answerer = ExtractiveAnswerer(embedder, answering)
    else:
        summarizer = LLMSummarizer(client, counter, llm)
        answerer = LLMAnswerer(client, llm)
    return Engine(store, embedder, counter, summarizer, answerer, settings, build_guard=build_guard(config))


def build_guard(config: Config) -> MachineBuildLocks | None:
    """With a Chroma server, the build locks that keep two processes of this machine from
    rebuilding one channel at once; None for the embedded store, whose data directory's
    lock already keeps every other process out."""
    chroma = config.chroma
    if not chroma.host:
        return None
    return MachineBuildLocks.for_server(machine_home(config), chroma.host, chroma.port, chroma.tenant, chroma.database)
