"""Pieces shared by the benchmarks: engines and channels, timing, memory, tables and JSON.

The data they read is ``bench.data``'s. Each benchmark module (``bench.build``,
``bench.query``, ``bench.retrieval``, ``bench.answers``...) only adds its own
measurement on top of these helpers.

Timings are wall-clock (``time.perf_counter``). The benchmarks are meant for a
small shared machine, so every report prints the CPU count and the load
average at start and end: a high load means noisy figures. The environment
(offline hub, numba cache) is set by ``bench/__init__.py`` on import.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import logging
import math
import os
import platform
import resource
import signal
import tempfile
import time
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Self

import numpy as np

from bench.data import DATA_ROOT, DEFAULT_DATA, SET_FILES, Article, normalised
from raptor_engine import (
    ChannelKey,
    ChromaStore,
    Document,
    Embedder,
    Engine,
    EngineSettings,
    ExtractiveAnswerer,
    ExtractiveSummarizer,
    Node,
    SentenceTransformerEmbedder,
    TokenCounter,
)

_EPOCH = datetime(2024, 1, 1, tzinfo=UTC)
EMBED_BATCH = 32
BUILT_WITH_NOTE = "bench-built-with"  # channel note: what the served tree was built with
NOISE_NOTE = (
    "Timings are wall-clock on a shared machine (other people's jobs run alongside): "
    "expect noise of tens of percent between runs."
)


# -- engines and channels ------------------------------------------------------


def load_embedder() -> SentenceTransformerEmbedder:
    """The packaged all-MiniLM-L6-v2, batch 32, already past its first (slower) call."""
    embedder = SentenceTransformerEmbedder(batch_size=EMBED_BATCH)
    embedder.embed(["warm-up sentence for the embedding model."] * 4)
    return embedder


def offline_engine(data_dir: Path, embedder: Embedder, counter: TokenCounter) -> Engine:
    """The engine on the offline defaults (extractive summaries and answers, as
    ``bot.composition.build_engine`` composes it without a language model), over embedded
    Chroma in ``data_dir``, sharing an already loaded embedder (so the model is loaded once
    per benchmark)."""
    settings = EngineSettings()
    store = ChromaStore.embedded(data_dir / "chroma")
    summarizer = ExtractiveSummarizer(counter, settings.summary_tokens)
    return Engine(store, embedder, counter, summarizer, ExtractiveAnswerer(embedder), settings)


def article_channel(article: Article) -> ChannelKey:
    """The channel holding one document's tree (one tree per document, as in the paper).

    The name carries a digest of the text: another text under the same file
    name and line (a shortened slice of the data, say) gets a channel of its
    own in a reused ``--data-dir`` instead of joining the first one's sources.
    """
    digest = hashlib.sha256(normalised(article.text).encode()).hexdigest()[:8]
    return ChannelKey("bench", article.dataset, f"article-{article.index:02d}-{digest}")


def article_document(article: Article) -> Document:
    """The article as a document, stamped one second after the previous article.

    A channel orders its sources by ``added_at`` (to the second), and that order
    is the row order the clustering sees; fixed stamps keep the trees of a
    multi-article channel the same from run to run.
    """
    added_at = (_EPOCH + timedelta(seconds=article.index)).isoformat(timespec="seconds")
    link = f"{article.dataset}.jsonl#{article.index}"
    return Document(article.text, article.title, link=link, added_at=added_at)


def offline_identity(engine: Engine, counter: TokenCounter) -> str:
    """What the trees of :func:`offline_engine` depend on beyond their sources: the
    summariser's identity (which changes when its method does) and the chunk size."""
    summarizer = ExtractiveSummarizer(counter, engine.settings.summary_tokens)
    return f"{summarizer.identity}/chunk{engine.settings.chunk_tokens}"


def pooled_channel(articles: Sequence[Article]) -> ChannelKey:
    """The one channel holding every document of a set (``--pooled``), named by a digest of them all."""
    digest = hashlib.sha256("\0".join(normalised(a.text) for a in articles).encode()).hexdigest()[:8]
    dataset = articles[0].dataset if articles else "none"
    return ChannelKey("bench", dataset, f"pooled-{len(articles)}-{digest}")


def ensure_article_channels(
    engine: Engine, articles: Sequence[Article], built_with: str = "", pooled: bool = False
) -> dict[int, ChannelKey]:
    """One built channel per article, by article index: built now, or reused when already built.
    With ``pooled``, one channel holding every article instead (each index maps to it): a
    budget is then a small part of the material, as in a team's channel of many files.

    Ingesting a stored text again is a no-op, and a channel whose tree covers
    its source is not rebuilt, so a ``--data-dir`` built before is reused as is.
    With ``built_with`` set (see :func:`offline_identity`), a channel whose tree
    was built otherwise, or by a caller that did not say, is rebuilt (reusing its
    leaves and any summary still valid), so a changed summariser is measured.
    """
    keys = {a.index: pooled_channel(articles) if pooled else article_channel(a) for a in articles}
    for article in articles:
        engine.ingest(keys[article.index], article_document(article))
    for key in dict.fromkeys(keys.values()):
        stats = engine.stats(key)
        stale = bool(built_with) and engine.notes(key).get(BUILT_WITH_NOTE) != built_with
        if stats.version == 0 or stats.pending_sources or stale:
            asyncio.run(engine.rebuild(key))
            if built_with:
                engine.set_note(key, BUILT_WITH_NOTE, built_with)
    return keys


def tree_nodes(engine: Engine, key: ChannelKey, layer: int) -> list[Node]:
    """Every node of one layer of the channel's served tree ([] before the first build)."""
    state = engine.store.channel(key).live_state()
    if state is None:
        return []
    return engine.store.channel(key).list_layer(state.version, layer, limit=1_000_000)


@contextmanager
def data_dir(path: Path | None, prefix: str) -> Iterator[Path]:
    """``path`` (created if needed, kept afterwards), or a temporary directory removed at exit."""
    if path is not None:
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    with tempfile.TemporaryDirectory(prefix=prefix) as temporary:
        yield Path(temporary)


# -- timing and memory ---------------------------------------------------------


@dataclass(slots=True)
class Stopwatch:
    """Seconds elapsed in a ``with`` block (``seconds`` is set on exit)."""

    seconds: float = 0.0
    _started: float = field(default=0.0, repr=False)

    def __enter__(self) -> Self:
        self._started = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self._started


class TimedEmbedder:
    """An ``Embedder`` that adds up the time spent in the wrapped embedder's ``embed``."""

    def __init__(self, inner: Embedder) -> None:
        self._inner = inner
        self.seconds = 0.0
        self.texts = 0

    @property
    def model_id(self) -> str:
        return self._inner.model_id

    @property
    def dimension(self) -> int:
        return self._inner.dimension

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        with Stopwatch() as watch:
            vectors = self._inner.embed(texts)
        self.seconds += watch.seconds
        self.texts += len(texts)
        return vectors

    def reset(self) -> None:
        self.seconds, self.texts = 0.0, 0


def warm_up_clustering() -> float:
    """Starts the clustering worker process and pays UMAP's import and numba compilation in it
    now (every build clusters there, none in this process); returns the seconds it took."""
    from raptor_engine import cluster_worker

    with Stopwatch() as watch:
        cluster_worker.warm_up()
    return watch.seconds


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100, linear interpolation) of ``values``; NaN when empty."""
    return float(np.percentile(np.asarray(values, dtype=np.float64), q)) if values else float("nan")


def latency_summary(seconds: Sequence[float]) -> dict[str, float]:
    """p50, p95, mean and max of latencies given in seconds, in milliseconds."""
    ms = [s * 1000.0 for s in seconds]
    return {
        "n": float(len(ms)),
        "p50_ms": percentile(ms, 50),
        "p95_ms": percentile(ms, 95),
        "mean_ms": float(np.mean(ms)) if ms else float("nan"),
        "max_ms": max(ms) if ms else float("nan"),
    }


def peak_rss_mib() -> float:
    """The process's resident-set high-water mark in MiB (``ru_maxrss`` is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def children_peak_rss_mib() -> float:
    """The summed resident-set high-water marks of this process's live children (the
    clustering worker), read from ``/proc`` (Linux); 0 where that is not available."""
    total = 0.0
    me = str(os.getpid())
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":", 1) for line in status.read_text().splitlines() if ":" in line)
        except OSError:
            continue
        if fields.get("PPid", "").strip() == me and "VmHWM" in fields:
            total += int(fields["VmHWM"].split()[0]) / 1024.0
    return total


def load_average() -> list[float]:
    """The machine's load average over 1, 5 and 15 minutes, rounded to two places."""
    return [round(x, 2) for x in os.getloadavg()]


def machine_info() -> dict[str, Any]:
    """CPU count, load average and Python version, to judge how noisy timings are."""
    return {
        "cpus": os.cpu_count(),
        "load_average": load_average(),
        "python": platform.python_version(),
    }


def start_run() -> dict[str, Any]:
    """Quiets library logs and prints the machine's state and the noise note; returns that state."""
    quiet_logs()
    info = machine_info()
    print(machine_line("machine at start"))
    print(NOISE_NOTE)
    return info


def machine_line(label: str) -> str:
    info = machine_info()
    load = ", ".join(f"{x:.2f}" for x in info["load_average"])
    return f"{label}: {info['cpus']} CPUs, load average (1/5/15 min) {load}, Python {info['python']}"


# -- output --------------------------------------------------------------------


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain-text table: first column left-aligned, the others right-aligned."""
    cells = [[str(h) for h in headers]] + [[_cell(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]

    def line(row: list[str]) -> str:
        parts = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)]
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), rule, *(line(row) for row in cells[1:])])


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.2f}" if abs(value) < 1000 else f"{value:.0f}"
    return str(value)


def percent(share: float) -> str:
    """A share (0-1) as a percentage to one decimal ("12.5 %"); "-" when it is NaN (nothing to count)."""
    return "-" if math.isnan(share) else f"{100 * share:.1f} %"


def heading(text: str) -> str:
    return f"\n== {text} =="


def verdict(passed: bool) -> str:
    return "PASS" if passed else "FAIL"


def write_json(path: Path | None, payload: dict[str, Any]) -> None:
    """Writes ``payload`` as indented JSON to ``path`` (nothing when ``path`` is None)."""
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    print(f"\nJSON written to {path}")


# -- command line --------------------------------------------------------------


def base_parser(module: str, description: str) -> argparse.ArgumentParser:
    """A parser for ``python -m module`` with the options every benchmark takes: ``--data`` and ``--json``."""
    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=description)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help=f"the JSONL data file (default {DEFAULT_DATA})")
    parser.add_argument("--json", type=Path, default=None, metavar="FILE", help="also write the figures as JSON")
    return parser


def add_articles_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--articles", type=int, default=None, metavar="N", help="use only the first N articles")


def add_data_dir_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data-dir", type=Path, default=None, metavar="DIR",
        help="keep the Chroma data here and reuse channels built there before (default: a temporary directory)",
    )


def sets_parser(module: str, description: str, default_sets: str) -> argparse.ArgumentParser:
    """A parser for a benchmark over the development sets: ``--sets``, ``--sources``,
    ``--limit``, ``--questions``, ``--data-dir`` and ``--json``."""
    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=description)
    parser.add_argument("--sets", type=_names, default=_names(default_sets), metavar="A,B",
                        help=f"the sets to run, among {', '.join(SET_FILES)} (default {default_sets})")
    parser.add_argument("--sources", type=Path, default=DATA_ROOT, metavar="DIR",
                        help=f"the directory of the sets' JSONL files (default {DATA_ROOT})")
    parser.add_argument("--limit", type=int, default=None, metavar="N", help="use only the first N documents of each set")
    parser.add_argument("--questions", type=int, default=None, metavar="N",
                        help="ask only the first N questions of each document")
    add_data_dir_argument(parser)
    parser.add_argument("--json", type=Path, default=None, metavar="FILE", help="also write the figures as JSON")
    return parser


def _names(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in SET_FILES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"choose sets among {', '.join(SET_FILES)}, not {text!r}")
    return names


def quiet_logs() -> None:
    """Only warnings from the libraries, so the tables stay readable.

    UMAP warns on every fit given a precomputed kNN graph that it cannot
    ``transform`` new data with; the engine never calls ``transform``, so that
    one warning is silenced here.
    """
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    warnings.filterwarnings("ignore", message=r"precomputed_knn\[2\]", category=UserWarning)


def positive_number(text: str) -> int:
    """An argparse type: ``text`` as an integer of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number")
    return value


@contextmanager
def stopped_by_sigterm() -> Iterator[None]:
    """Within it, SIGTERM stops the run as Ctrl-C would, so the servers and processes it started
    are stopped too; the handler before it is restored after."""
    previous = signal.signal(signal.SIGTERM, _interrupted)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")
