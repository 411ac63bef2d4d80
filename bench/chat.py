"""Chat benchmark: question latency through the console adapter, idle and during a rebuild.

One bot process (``bot.runtime.Assistant`` on the offline defaults, embedded Chroma
in a temporary directory) with two console channels:

* ``answers`` holds the 15 dev articles, built once before measuring; the
  articles' questions are asked there, one after another, as typed lines
  through ``ConsoleChannel.handle_line`` (parse, handler, engine, reply);
* ``rebuilding`` holds the same articles, not built yet: ``/rebuild`` is typed
  there, and while that rebuild runs (in the same process and event loop, as
  the bot runs it) questions keep being asked in ``answers``.

Latency is from handing the line over to the reply being written. Targets:
p95 during the rebuild within 2x of idle; the process's peak memory during the
whole run under 2.5 GB.

Run: ``python -m bench.chat [--questions N] [--json FILE]``.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from adapters.console.app import ConsoleChannel
from bench.common import (
    article_document,
    base_parser,
    children_peak_rss_mib,
    heading,
    latency_summary,
    machine_info,
    machine_line,
    peak_rss_mib,
    start_run,
    table,
    verdict,
    warm_up_clustering,
    write_json,
)
from bench.data import Article, load_articles
from bot.composition import open_bot
from bot.config import BotConfig, Config, ConsoleConfig, RateLimitConfig
from bot.runtime import Assistant
from raptor_engine import ChannelKey

TARGET_RATIO = 2.0
TARGET_PEAK_MIB = 2.5 * 1024


def bench_config(data_dir: Path) -> Config:
    """The defaults, minus the sample upload and the rate limits (a benchmark asks fast)."""
    limits = RateLimitConfig(questions_per_user_per_minute=0, rebuilds_per_channel_per_hour=0)
    return Config(data_dir=data_dir, console=ConsoleConfig(sample=False), bot=BotConfig(rate_limits=limits))


async def ask(channel: ConsoleChannel, question: str) -> float:
    """Seconds from typing ``question`` to its reply being written."""
    started = time.perf_counter()
    await channel.handle_line(question)
    return time.perf_counter() - started


async def prepare(bot: Assistant, articles: Sequence[Article]) -> tuple[ChannelKey, ChannelKey]:
    """Both channels filled (ingestion is not measured); ``answers`` built."""
    workspace = bot.config.console.workspace
    answers = ChannelKey("console", workspace, "answers")
    rebuilding = ChannelKey("console", workspace, "rebuilding")
    for key in (answers, rebuilding):
        for article in articles:
            await asyncio.to_thread(bot.engine.ingest, key, article_document(article))
    await bot.engine.rebuild(answers)
    return answers, rebuilding


async def measure(bot: Assistant, articles: Sequence[Article], questions: list[str]) -> dict[str, object]:
    answers_key, rebuilding_key = await prepare(bot, articles)
    written: list[str] = []
    answers = ConsoleChannel(bot, written.append, answers_key.channel)
    rebuilding = ConsoleChannel(bot, written.append, rebuilding_key.channel)
    assert (answers.key, rebuilding.key) == (answers_key, rebuilding_key)
    for question in questions[:3]:  # first calls pay lazy loading (BM25 index, tokenizer caches)
        await ask(answers, question)
    idle = [await ask(answers, q) for q in questions]
    rss_before = peak_rss_mib()

    started = time.perf_counter()
    await rebuilding.handle_line("/rebuild")
    during: list[float] = []
    index = 0
    while (await bot.scheduler.status(rebuilding_key)).running:
        during.append(await ask(answers, questions[index % len(questions)]))
        index += 1
    await bot.scheduler.wait_idle(rebuilding_key)
    rebuild_s = time.perf_counter() - started
    stats = await asyncio.to_thread(bot.engine.stats, rebuilding_key)
    return {"idle": idle, "during": during, "rebuild_s": rebuild_s, "rebuilt_layers": stats.nodes_per_layer,
            "rss_before_rebuild_mib": rss_before, "peak_rss_mib": peak_rss_mib(),
            "worker_peak_rss_mib": children_peak_rss_mib(),
            "last_lines": written[-2:]}


async def run(articles: Sequence[Article], questions: list[str]) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="bench-chat-") as root:
        bot = await open_bot(bench_config(Path(root)))
        await bot.start(warm_up=False)  # warmed before: the compile is not what is measured
        try:
            return await measure(bot, articles, questions)
        finally:
            await bot.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = base_parser("bench.chat", __doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=60, help="questions asked idle (default 60)")
    args = parser.parse_args(argv)
    articles = load_articles(args.data)
    questions = [q.text for article in articles for q in article.questions][: args.questions]
    start_info = start_run()
    warm_up_clustering()
    figures = asyncio.run(run(articles, questions))
    idle = latency_summary(figures["idle"])  # type: ignore[arg-type]
    during = latency_summary(figures["during"])  # type: ignore[arg-type]
    print(heading(f"Questions through the console adapter ({len(articles)} articles per channel)"))
    print(table(["", "questions", "p50 ms", "p95 ms", "max ms"],
                [["idle", int(idle["n"]), idle["p50_ms"], idle["p95_ms"], idle["max_ms"]],
                 ["during the rebuild", int(during["n"]), during["p50_ms"], during["p95_ms"], during["max_ms"]]]))
    print(f"rebuild of the {len(articles)} articles: {figures['rebuild_s']:.1f} s (typed /rebuild to its result); "
          f"layers {figures['rebuilt_layers']}")
    print(f"peak RSS of the bot process {figures['peak_rss_mib']:.0f} MiB (before the rebuild "
          f"{figures['rss_before_rebuild_mib']:.0f} MiB), of its clustering worker {figures['worker_peak_rss_mib']:.0f} MiB")
    ratio = during["p95_ms"] / idle["p95_ms"]
    peak = float(figures["peak_rss_mib"]) + float(figures["worker_peak_rss_mib"])  # type: ignore[arg-type]
    print(heading("Targets"))
    print(f"p95 during the rebuild / idle = {ratio:.2f} (target <= {TARGET_RATIO:.0f}x): {verdict(ratio <= TARGET_RATIO)}")
    print(f"peak RSS, bot and worker together = {peak:.0f} MiB (target < {TARGET_PEAK_MIB:.0f} MiB): "
          f"{verdict(peak < TARGET_PEAK_MIB)}")
    print("\n" + machine_line("machine at end"))
    write_json(args.json, {"benchmark": "chat", "machine_start": start_info, "machine_end": machine_info(),
                           "idle": idle, "during": during, "ratio": ratio, **{k: figures[k] for k in
                           ("rebuild_s", "rss_before_rebuild_mib", "peak_rss_mib", "worker_peak_rss_mib")}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
