"""The composition root: turns a validated :class:`~bot.config.Config` into a running engine."""

from __future__ import annotations

import logging

from bot.config import Config
from raptor_engine.answering import ExtractiveAnswerer, ExtractiveSettings
from raptor_engine.clustering import ClusteringSettings
from raptor_engine.embedding import SentenceTransformerEmbedder
from raptor_engine.engine import Engine, EngineSettings
from raptor_engine.metering import SpendingLimits
from raptor_engine.llm import LLMAnswerer, LLMClient, LLMSettings, LLMSummarizer, OpenAIEmbedder
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
    embedded under ``data_dir``. Credentials are never logged, only how they are sent."""
    chroma = config.chroma
    if chroma.host:
        signed_in = ("with a token" if chroma.token.get_secret_value()
                     else "as " + chroma.username if chroma.username else "without credentials")
        log.info("using the Chroma server at %s:%d (tenant %s, database %s), %s",
                 chroma.host, chroma.port, chroma.tenant, chroma.database, signed_in)
        return ChromaStore.remote(
            chroma.host, chroma.port, chroma.ssl,
            token=chroma.token.get_secret_value(), token_header=chroma.token_header,
            username=chroma.username, password=chroma.password.get_secret_value(),
            tenant=chroma.tenant, database=chroma.database,
        )
    return ChromaStore.embedded(config.data_dir / "chroma")


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


def build_engine(config: Config) -> Engine:
    """The engine the configuration describes: the offline defaults, with the
    language model summarising and answering where ``llm.base_url`` is set, and
    embedding through its API where ``embedder.provider`` is ``api``."""
    settings = engine_settings(config)
    store = open_store(config)
    llm = llm_settings(config) if config.llm.base_url else None
    client = LLMClient(llm) if llm else None
    embedder: Embedder
    if client is not None and config.embedder.provider == "api":
        embedder = OpenAIEmbedder(client, config.embedder.model, batch_size=config.embedder.batch_size)
        counter: TokenCounter = HuggingFaceTokenCounter.from_model_dir(default_model_path())
    else:
        local = SentenceTransformerEmbedder(config.embedder.model, batch_size=config.embedder.batch_size)
        embedder, counter = local, local.token_counter()
    if client is None or llm is None:
        summarizer: Summarizer = ExtractiveSummarizer(counter, settings.summary_tokens)
        answering = ExtractiveSettings(summary_chars=config.retrieval.summary_chars)
        answerer: Answerer = ExtractiveAnswerer(embedder, answering)
    else:
        log.info("summaries and answers from %s (model %s)", llm.base_url, llm.model)
        summarizer = LLMSummarizer(client, counter, llm)
        answerer = LLMAnswerer(client, llm)
    return Engine(store, embedder, counter, summarizer, answerer, settings)
