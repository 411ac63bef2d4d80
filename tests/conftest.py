"""Shared fixtures: the real packaged model, embedded Chroma, and a real `chroma run` server.

Nothing here fakes our own code: the embedder is the packaged all-MiniLM-L6-v2,
the store is Chroma itself, and the server is Chroma's own `chroma run` on
127.0.0.1, started once per test session and stopped at its end.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import Executor
from functools import cache
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

from raptor_engine.embedding import SentenceTransformerEmbedder  # noqa: E402
from raptor_engine.engine import Engine, EngineSettings  # noqa: E402
from raptor_engine.errors import ProviderError  # noqa: E402
from raptor_engine.protocols import SupportJudge  # noqa: E402
from raptor_engine.reclaim import chroma_command  # noqa: E402
from raptor_engine.store import ChromaStore  # noqa: E402
from raptor_engine.types import ChannelKey  # noqa: E402
from testkit.openai_stub import OpenAIStub, running_stub  # noqa: E402
from testkit.valkey import free_port  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
# `make test-fast` leaves out the "heavy" tests: those using these fixtures (the embedding
# model, Chroma), and these modules, which start processes, bots or UMAP's compiled kernels.
HEAVY_FIXTURES = frozenset({"embedder", "counter", "store", "engine", "any_store", "chroma_server"})
HEAVY_MODULES = frozenset({
    "test_background", "test_cli", "test_clustering", "test_clustering_small", "test_composition", "test_console",
    "test_data_lock", "test_embedding", "test_entry", "test_llm_config", "test_numba_cache", "test_numba_cache_dir",
    "test_operator_logs", "test_process_lifecycle", "test_tree_storage", "test_soak", "test_bench_smoke",
    "test_worker_process",
})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        module = getattr(item, "module", None)
        name = module.__name__.rpartition(".")[2] if module is not None else ""
        if name in HEAVY_MODULES or HEAVY_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.heavy)
QUALITY_DEV = REPO.parent / "shared" / "data" / "quality-dev.jsonl"


def quality_articles(limit: int | None = None) -> list[str]:
    """The texts of the QuALITY dev articles (``../shared/data/quality-dev.jsonl``), the first
    ``limit`` of them. Fails the test, loudly, when the file is missing: a test that needs dev
    data and skips without it would pass on a checkout that cannot run it."""
    if not QUALITY_DEV.is_file():
        pytest.fail(f"this test needs the dev data {QUALITY_DEV}, which is missing: check out "
                    "the shared directory beside the repository", pytrace=False)
    return list(_quality_texts()[:limit])


@cache
def _quality_texts() -> tuple[str, ...]:
    """The file read and parsed once per session (parametrized tests ask for it per case)."""
    lines = [line for line in QUALITY_DEV.read_text(encoding="utf-8").splitlines() if line.strip()]
    return tuple(json.loads(line)["input"] for line in lines)


@pytest.fixture(scope="session", autouse=True)
def user_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The user's cache directory (``XDG_CACHE_HOME``) for the whole session, child processes
    included: the embedding model's ONNX export is made there once, not in the home directory."""
    cache = tmp_path_factory.mktemp("xdg-cache")
    before = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(cache)
    yield cache
    if before is None:
        os.environ.pop("XDG_CACHE_HOME", None)
    else:
        os.environ["XDG_CACHE_HOME"] = before


@pytest.fixture(scope="session")
def embedder() -> SentenceTransformerEmbedder:
    return SentenceTransformerEmbedder()


class RecordingEmbedder:
    """The session's real embedder, noting every call: the texts asked for (``asked``) and the
    thread each call ran on (``threads``). With ``fail`` set, a call raises ``ProviderError``
    as a model that is gone does, and notes nothing."""

    def __init__(self, embedder: SentenceTransformerEmbedder) -> None:
        self._embedder = embedder
        self.asked: list[str] = []
        self.threads: list[str] = []
        self.fail = False

    @property
    def model_id(self) -> str:
        return self._embedder.model_id

    @property
    def dimension(self) -> int:
        return self._embedder.dimension

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if self.fail:
            raise ProviderError("the embedding model is gone")
        self.asked += texts
        self.threads.append(threading.current_thread().name)
        return self._embedder.embed(texts)

    def token_counter(self):  # type: ignore[no-untyped-def]
        return self._embedder.token_counter()


@pytest.fixture(scope="session")
def counter(embedder: SentenceTransformerEmbedder):  # type: ignore[no-untyped-def]
    return embedder.token_counter()


@pytest.fixture
def store(tmp_path: Path) -> ChromaStore:
    return ChromaStore.embedded(tmp_path / "chroma")


def make_engine(store: ChromaStore, embedder: SentenceTransformerEmbedder, settings: EngineSettings = EngineSettings(),
                threads: Executor | None = None, judge: SupportJudge | None = None) -> Engine:
    """An engine on the offline defaults, sharing the session's loaded model (its calls on
    ``threads``, its answers' support judged by ``judge``, as ``Engine`` takes them)."""
    from raptor_engine.answering import ExtractiveAnswerer
    from raptor_engine.summarizing import ExtractiveSummarizer

    counter = embedder.token_counter()
    return Engine(store, embedder, counter, ExtractiveSummarizer(counter, settings.summary_tokens),
                  ExtractiveAnswerer(embedder), settings, threads=threads, judge=judge)


@pytest.fixture
def engine(store: ChromaStore, embedder: SentenceTransformerEmbedder) -> Engine:
    return make_engine(store, embedder)


def start_chroma_server(path: Path, log_path: Path) -> tuple[subprocess.Popen[bytes], int]:
    """Starts `chroma run` on a free port of 127.0.0.1 and waits until it listens."""
    port = free_port()
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [chroma_command(), "run", "--path", str(path), "--host", "127.0.0.1", "--port", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        _wait_for_port(port, process, timeout=60)
    except RuntimeError:
        process.kill()
        raise
    return process, port


@pytest.fixture(scope="session")
def chroma_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    """A real Chroma server (`chroma run`) on 127.0.0.1 for the whole session."""
    path = tmp_path_factory.mktemp("chroma-server")
    process, port = start_chroma_server(path / "db", path / "server.log")
    try:
        yield "127.0.0.1", port
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()


def _wait_for_port(port: int, process: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"chroma run exited with {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError("chroma run did not start listening in time")


@pytest.fixture(params=["embedded", "server"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> ChromaStore:
    """The same tests against embedded Chroma and against a `chroma run` server."""
    if request.param == "embedded":
        return ChromaStore.embedded(tmp_path / "chroma")
    host, port = request.getfixturevalue("chroma_server")
    return ChromaStore.remote(host, port)


@pytest.fixture
def channel() -> ChannelKey:
    """A channel key unique to the test, so tests sharing a Chroma server never meet."""
    return ChannelKey("test", "workspace", uuid.uuid4().hex[:12])


SAMPLE = REPO / "bot" / "samples" / "aurora-handbook.md"


def traces(store: ChromaStore, needles: Sequence[str]) -> list[str]:
    """Where any of ``needles`` (lower case) occurs in any record of any collection of the store."""
    client = store._client  # the whole database, not just what the engine's API shows
    found = []
    for listed in client.list_collections():
        name = str(getattr(listed, "name", listed))
        got = client.get_collection(name, embedding_function=None).get(include=["documents", "metadatas"])
        for record_id, document, metadata in zip(got["ids"], got["documents"] or [], got["metadatas"] or []):
            text = " ".join((record_id, document or "", json.dumps(metadata or {}))).lower()
            found += [f"{name}/{record_id}: {needle}" for needle in needles if needle in text]
    return found


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    """The OpenAI-compatible stand-in on 127.0.0.1 (32-dimensional embeddings, the default
    answer), stopped after the test. Modules that need another answer override it."""
    with running_stub(dimension=32) as server:
        yield server
