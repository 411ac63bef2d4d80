"""The composition root: turns a validated :class:`~bot.config.Config` into a running engine."""

from __future__ import annotations

import logging

from bot.config import Config
from raptor_engine.clustering import ClusteringSettings
from raptor_engine.engine import Engine, EngineSettings
from raptor_engine.retrieval import RetrievalSettings
from raptor_engine.store import ChromaStore
from raptor_engine.types import RetrievalMode

log = logging.getLogger(__name__)


def engine_settings(config: Config) -> EngineSettings:
    """The engine's settings as the configuration states them."""
    tree = config.tree
    return EngineSettings(
        chunk_tokens=config.chunking.tokens,
        max_file_bytes=int(config.files.max_mb * 1024 * 1024),
        summary_tokens=tree.summary_tokens,
        max_concurrency=tree.max_concurrency,
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
    """The Chroma server if one is configured, else Chroma embedded under ``data_dir``."""
    if config.chroma.host:
        log.info("using the Chroma server at %s:%d", config.chroma.host, config.chroma.port)
        return ChromaStore.remote(config.chroma.host, config.chroma.port, config.chroma.ssl)
    return ChromaStore.embedded(config.data_dir / "chroma")


def build_engine(config: Config) -> Engine:
    """An engine on the offline defaults over the configured store and model."""
    return Engine.offline(
        open_store(config), engine_settings(config), model=config.embedder.model, batch_size=config.embedder.batch_size
    )
