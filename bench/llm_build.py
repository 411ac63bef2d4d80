"""Language-model build benchmark: summaries from an OpenAI-compatible server 300 ms away.

The server is the stand-in (``testkit/openai_stub.py``) on
127.0.0.1, told to add ``--latency`` seconds to every request; the engine
reaches it through the real ``openai`` client, as in production. Embeddings
stay local (the packaged all-MiniLM-L6-v2). Measured, each in a fresh
temporary embedded Chroma:

1. a full build of the 15 dev articles at concurrency 1 and at 8
   (``llm.max_concurrency`` and ``tree.max_concurrency`` both set to it);
   target: at least 5x faster at 8;
2. a rebuild with nothing changed (target: 0 model calls);
3. a channel of the first 14 articles, built, then the 15th added and the
   channel rebuilt (target: at most 20 % of the calls of the full build).

The articles are ingested (chunked and embedded) before each timed rebuild,
as the bot does when a file is uploaded; ingestion is reported apart. Calls
are counted at the server and compared with the build report's count.

Run: ``python -m bench.llm_build [--latency 0.3] [--articles N] [--json FILE]``.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.common import (
    Stopwatch,
    add_articles_argument,
    article_document,
    base_parser,
    heading,
    load_embedder,
    machine_info,
    machine_line,
    start_run,
    table,
    verdict,
    warm_up_clustering,
    write_json,
)
from bench.data import Article, load_articles
from raptor_engine import (
    BuildReport,
    ChannelKey,
    ChromaStore,
    Engine,
    EngineSettings,
    ExtractiveAnswerer,
    LLMClient,
    LLMSettings,
    LLMSummarizer,
    SentenceTransformerEmbedder,
)
from testkit.openai_stub import OpenAIStub, running_stub

TARGET_SPEED_UP = 5.0
TARGET_ADD_SHARE = 0.20
CHANNEL = ChannelKey("bench", "llm", "dev")


@dataclass(frozen=True, slots=True)
class Measured:
    """One timed rebuild: wall seconds, calls seen by the server, and the build report."""

    label: str
    ingest_s: float
    rebuild_s: float
    served_calls: int
    report: BuildReport


class Bench:
    """Engines on fresh stores, all asking the one stand-in server."""

    def __init__(self, stub: OpenAIStub, embedder: SentenceTransformerEmbedder, root: Path) -> None:
        self._stub = stub
        self._embedder = embedder
        self._root = root
        self._clients: list[LLMClient] = []
        self._stores = 0

    def engine(self, concurrency: int) -> Engine:
        """An engine with model summaries at ``concurrency``, on a store of its own."""
        settings = LLMSettings(base_url=self._stub.base_url, model="stand-in", max_concurrency=concurrency)
        client = LLMClient(settings)
        self._clients.append(client)
        self._stores += 1
        store = ChromaStore.embedded(self._root / f"store-{self._stores}")
        counter = self._embedder.token_counter()
        return Engine(store, self._embedder, counter, LLMSummarizer(client, counter, settings),
                      ExtractiveAnswerer(self._embedder), EngineSettings(max_concurrency=concurrency))

    def rebuild(self, label: str, engine: Engine, articles: Sequence[Article]) -> Measured:
        """Ingests ``articles`` into the channel (those already there cost nothing), then times a rebuild."""
        with Stopwatch() as ingest:
            for article in articles:
                engine.ingest(CHANNEL, article_document(article))
        before = self._served()
        with Stopwatch() as build:
            report = asyncio.run(engine.rebuild(CHANNEL))
        return Measured(label, ingest.seconds, build.seconds, self._served() - before, report)

    def _served(self) -> int:
        return sum(1 for r in self._stub.requests if r.path.endswith("/chat/completions"))

    def close(self) -> None:
        for client in self._clients:
            client.close()


def run_all(bench: Bench, articles: Sequence[Article]) -> list[Measured]:
    """The five rebuilds of the module docstring, in order."""
    sequential = bench.rebuild("full build, concurrency 1", bench.engine(1), articles)
    parallel_engine = bench.engine(8)
    parallel = bench.rebuild("full build, concurrency 8", parallel_engine, articles)
    unchanged = bench.rebuild("rebuild, nothing changed", parallel_engine, articles)
    grown_engine = bench.engine(8)
    most = bench.rebuild(f"build of the first {len(articles) - 1}", grown_engine, articles[:-1])
    added = bench.rebuild("rebuild after adding the last article", grown_engine, articles)
    return [sequential, parallel, unchanged, most, added]


def results_table(measured: Sequence[Measured]) -> str:
    return table(
        ["rebuild", "ingest s", "rebuild s", "calls at server", "report calls", "prompt tok", "completion tok",
         "model s (summed)", "summaries made/reused"],
        [
            [m.label, m.ingest_s, m.rebuild_s, m.served_calls, m.report.model_calls, m.report.prompt_tokens,
             m.report.completion_tokens, m.report.model_seconds,
             f"{m.report.summaries_made}/{m.report.summaries_reused}"]
            for m in measured
        ],
    )


def targets(measured: Sequence[Measured]) -> tuple[list[str], dict[str, object]]:
    sequential, parallel, unchanged, _, added = measured
    speed_up = sequential.rebuild_s / parallel.rebuild_s
    share = added.served_calls / parallel.served_calls if parallel.served_calls else float("nan")
    lines = [
        f"full build at concurrency 8 is {speed_up:.2f}x faster than at 1 (target >= {TARGET_SPEED_UP:.0f}x): "
        f"{verdict(speed_up >= TARGET_SPEED_UP)}",
        f"rebuild with nothing changed: {unchanged.served_calls} calls (target 0): {verdict(unchanged.served_calls == 0)}",
        f"adding one article: {added.served_calls} calls = {share:.1%} of the full build's {parallel.served_calls} "
        f"(target <= {TARGET_ADD_SHARE:.0%}): {verdict(share <= TARGET_ADD_SHARE)}",
    ]
    figures: dict[str, object] = {"speed_up": speed_up, "unchanged_calls": unchanged.served_calls, "add_share": share,
               "speed_up_pass": speed_up >= TARGET_SPEED_UP, "unchanged_pass": unchanged.served_calls == 0,
               "add_share_pass": share <= TARGET_ADD_SHARE}
    return lines, figures


def main(argv: Sequence[str] | None = None) -> int:
    parser = base_parser("bench.llm_build", __doc__.splitlines()[0])
    add_articles_argument(parser)
    parser.add_argument("--latency", type=float, default=0.3, help="seconds the server adds to every request")
    args = parser.parse_args(argv)
    articles = load_articles(args.data, args.articles)
    if len(articles) < 2:
        print("need at least 2 articles")
        return 2
    start_info = start_run()
    embedder = load_embedder()
    warm_up_clustering()
    with running_stub() as stub, tempfile.TemporaryDirectory(prefix="bench-llm-") as root:
        stub.latency_s = args.latency
        bench = Bench(stub, embedder, Path(root))
        try:
            measured = run_all(bench, articles)
        finally:
            bench.close()
    print(heading(f"{len(articles)} articles; the stand-in server adds {args.latency * 1000:.0f} ms to every request"))
    print(results_table(measured))
    print("rebuild s = Engine.rebuild's wall time (clustering, summaries, summary embedding, store); "
          "ingest s = chunking and embedding the new articles before it. model s sums the requests' durations.")
    lines, figures = targets(measured)
    print(heading("Targets"))
    print("\n".join(lines))
    print("\n" + machine_line("machine at end"))
    write_json(args.json, {
        "benchmark": "llm_build", "latency_s": args.latency, "articles": len(articles),
        "machine_start": start_info, "machine_end": machine_info(),
        "rebuilds": [{"label": m.label, "ingest_s": m.ingest_s, "rebuild_s": m.rebuild_s,
                      "served_calls": m.served_calls, "report_calls": m.report.model_calls,
                      "prompt_tokens": m.report.prompt_tokens, "completion_tokens": m.report.completion_tokens,
                      "model_seconds": m.report.model_seconds, "summaries_made": m.report.summaries_made,
                      "summaries_reused": m.report.summaries_reused} for m in measured],
        "targets": figures,
    })
    return 0


if __name__ == "__main__":
    sys.exit(main())
