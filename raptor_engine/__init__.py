"""RAPTOR trees over Chroma, as a plain library: no chat, YAML or scheduling.

This package's names below are its public API; code outside ``raptor_engine`` imports
them from here (``from raptor_engine import Engine, ChannelKey``), never from a module
path, so the modules can move without their users noticing. Each name is imported on
first use (PEP 562): ``from raptor_engine import ChannelKey`` stays light, and only
``Engine`` and the models load Chroma, scikit-learn or ONNX Runtime.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# name -> the module that defines it
_EXPORTS: dict[str, str] = {
    # the facade and its settings
    "Engine": "engine", "EngineSettings": "engine", "IngestResult": "engine",
    "ChromaStore": "store", "channel_digest": "store",
    "ClusteringSettings": "clustering", "RetrievalSettings": "retrieval", "SpendingLimits": "metering",
    "ModelUsage": "metering", "metered": "metering:metering",
    "BuildProgress": "tree", "ProgressCallback": "tree",
    # what goes in and comes out
    "ChannelKey": "types", "Document": "types", "Source": "types", "SourceKind": "types", "Node": "types",
    "NodeView": "types", "Hit": "types", "Citation": "types", "Answer": "types", "BuildReport": "types",
    "TreeStats": "types", "RetrievalMode": "types", "AnswerRecord": "types",
    # the parts an engine is composed of
    "Answerer": "protocols", "SupportJudge": "protocols", "NliJudge": "nli_judge", "ModelJudge": "llm", "JudgeFailed": "errors", "AnswerStream": "protocols", "StreamingAnswerer": "protocols", "BuildGuard": "protocols", "Embedder": "protocols", "Summarizer": "protocols", "TokenCounter": "protocols",
    "SentenceTransformerEmbedder": "embedding", "HuggingFaceTokenCounter": "tokens",
    "default_model_path": "tokens", "ExtractiveSummarizer": "summarizing", "ExtractiveAnswerer": "answering",
    "ExtractiveSettings": "answering", "quote": "answering",
    "LLMSettings": "llm", "LLMClient": "llm", "LLMSummarizer": "llm", "LLMAnswerer": "llm",
    "OpenAIEmbedder": "llm", "SUPPORTED_SUFFIXES": "loaders",
    # the clustering worker and numba's kernel cache, for processes that manage them
    "warm_up_clustering": "cluster_worker:warm_up", "prestart_clustering": "cluster_worker:prestart",
    "stop_worker_processes": "worker_process",
    # the regression gate's check of a tree, for the commands that show it
    "GateCheck": "regression_gate",
    "use_numba_cache_dir": "numba_cache:use_cache_dir",
    # the error tree
    "RaptorError": "errors", "RejectReason": "errors", "DocumentRejected": "errors", "ChannelError": "errors",
    "NothingToBuild": "errors", "NoMaterial": "errors", "NodeNotFound": "errors", "BuildError": "errors", "BuildBusy": "errors", "BuildSuperseded": "errors", "BuildHeldBack": "errors",
    "SpendingLimitReached": "errors", "ProviderError": "errors", "StoreError": "errors",
    "StoreUnavailable": "errors", "StoreTimeout": "errors", "ModelRequestRejected": "errors", "ModelBadResponse": "errors",
    "ModelUnavailable": "errors", "ModelTimeout": "errors",
}
__all__ = [
    "Answer", "AnswerRecord", "AnswerStream", "Answerer", "JudgeFailed", "ModelJudge", "NliJudge", "SupportJudge", "BuildBusy", "BuildError", "BuildHeldBack", "BuildSuperseded", "BuildProgress", "BuildReport", "ChannelError", "ChannelKey",
    "BuildGuard", "ChromaStore", "Citation", "ClusteringSettings", "Document", "DocumentRejected", "Embedder", "Engine",
    "EngineSettings", "ExtractiveAnswerer", "ExtractiveSettings", "ExtractiveSummarizer", "GateCheck", "Hit",
    "HuggingFaceTokenCounter", "IngestResult", "LLMAnswerer", "LLMClient", "LLMSettings", "LLMSummarizer",
    "ModelBadResponse", "ModelRequestRejected", "ModelTimeout", "ModelUnavailable", "ModelUsage", "NoMaterial", "Node", "NodeNotFound",
    "NodeView", "NothingToBuild", "OpenAIEmbedder", "ProgressCallback", "ProviderError", "RaptorError",
    "RejectReason", "RetrievalMode", "RetrievalSettings", "SUPPORTED_SUFFIXES", "SentenceTransformerEmbedder",
    "Source", "SourceKind", "SpendingLimitReached", "StreamingAnswerer", "SpendingLimits", "StoreError", "StoreTimeout",
    "StoreUnavailable", "Summarizer", "TokenCounter", "TreeStats", "channel_digest", "default_model_path", "prestart_clustering",
    "metered", "quote", "stop_worker_processes", "use_numba_cache_dir", "warm_up_clustering",
]  # the same names as _EXPORTS (tests/raptor_engine/test_public_api.py checks)


def __getattr__(name: str) -> Any:
    """Imports an exported name's module on first use (PEP 562)."""
    where = _EXPORTS.get(name)
    if where is None:
        raise AttributeError(f"module 'raptor_engine' has no attribute {name!r}")
    module_name, _, attribute = where.partition(":")
    value = getattr(importlib.import_module(f"raptor_engine.{module_name}"), attribute or name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


if TYPE_CHECKING:  # what type checkers see: the same names, imported eagerly
    from raptor_engine.answering import ExtractiveAnswerer, ExtractiveSettings, quote
    from raptor_engine.cluster_worker import prestart as prestart_clustering, warm_up as warm_up_clustering
    from raptor_engine.clustering import ClusteringSettings
    from raptor_engine.embedding import SentenceTransformerEmbedder
    from raptor_engine.engine import Engine, EngineSettings, IngestResult
    from raptor_engine.errors import (
        BuildBusy,
        BuildError,
        BuildHeldBack,
        BuildSuperseded,
        ChannelError,
        DocumentRejected,
        ModelBadResponse,
        ModelRequestRejected,
        ModelTimeout,
        ModelUnavailable,
        NodeNotFound,
        NoMaterial,
        NothingToBuild,
        ProviderError,
        RaptorError,
        RejectReason,
        SpendingLimitReached,
        StoreError,
        StoreTimeout,
        StoreUnavailable,
    )
    from raptor_engine.llm import LLMAnswerer, LLMClient, LLMSettings, LLMSummarizer, OpenAIEmbedder
    from raptor_engine.loaders import SUPPORTED_SUFFIXES
    from raptor_engine.metering import ModelUsage, SpendingLimits, metering as metered
    from raptor_engine.numba_cache import use_cache_dir as use_numba_cache_dir
    from raptor_engine.protocols import (
        Answerer,
        AnswerStream,
        BuildGuard,
        Embedder,
        StreamingAnswerer,
        Summarizer,
        TokenCounter,
    )
    from raptor_engine.regression_gate import GateCheck
    from raptor_engine.retrieval import RetrievalSettings
    from raptor_engine.store import ChromaStore, channel_digest
    from raptor_engine.summarizing import ExtractiveSummarizer
    from raptor_engine.tokens import HuggingFaceTokenCounter, default_model_path
    from raptor_engine.tree import BuildProgress, ProgressCallback
    from raptor_engine.types import (
        Answer,
        AnswerRecord,
        BuildReport,
        ChannelKey,
        Citation,
        Document,
        Hit,
        Node,
        NodeView,
        RetrievalMode,
        Source,
        SourceKind,
        TreeStats,
    )
    from raptor_engine.worker_process import stop_worker_processes
