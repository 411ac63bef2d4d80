"""Scale-out benchmark: rebuild workers, a front-end's questions, and the coordination's cost.

Real processes on 127.0.0.1, started as the scale-out tests start them
(``testkit.cluster``): a ``chroma run`` server, a Valkey server, one front-end
(``python -m bot serve``, Slack in HTTP mode behind the tests' Slack stand-in)
and one, then two, rebuild workers (``python -m bot worker``). This process
ingests every channel's sources into the Chroma server through an engine of
its own, then measures:

1. **rebuild throughput** with one worker, then two: ``--channels`` channels
   (default 20) of two QuALITY articles each, all requested at once the way a
   front-end does (``RebuildRequests.add`` then ``RebuildQueue.enqueue_once``
   per channel), timed from the first request to the last worker's
   ``job ended (built)`` log record. Every measured round builds *fresh*
   channels (same articles, new channel ids, so nothing of the per-channel leaf
   and summary caches helps beyond what an upload's ingest leaves). Each
   worker first builds a warm-up channel (its first build pays the cold work:
   the clustering process's start, UMAP and numba's kernels loading), reported
   separately. One worker is measured before the second starts, so the
   two-worker rounds run against a Chroma server holding more collections
   (conservative for the speed-up);
2. **question latency** at the front-end, from delivering Ben's mention to the
   answer posted in its thread (``chat.postMessage`` as the stand-in receives
   it), ``--questions`` questions (default 30) one after another: idle (no
   build running), then while two workers rebuild another set of fresh
   channels. Target: p95 while building within 1.5x of idle;
3. **coordination overhead** per event, in this process against the Valkey
   server (namespace ``bench-overhead``, which no worker reads):
   ``SharedLedger.first`` (a new event id: one ``SET NX EX``), the scheduled
   check's period claim (one ``SET NX EX``), ``RebuildQueue.enqueue_once`` of a
   channel with no job waiting (marker and RQ job) and with one waiting (the
   marker only), ``--overhead-calls`` each (default 1000). Target: p95 under 5 ms;
4. the **costs** for capacity arithmetic: seconds of worker time per channel
   build (job wall time, and CPU seconds of the worker and its clustering
   process, of the Chroma server and of Valkey) and seconds per question
   (latency, and CPU seconds of the front-end and of the Chroma server).

The machine has few cores and may run other jobs (a test run) meanwhile: the
load average is printed at the start and end of every round.

The processes and what is driven through them are ``bench.scale_cluster``'s, the
records and the overhead's timing ``bench.scale_measure``'s, the tables and targets
``bench.scale_report``'s; this module runs the steps above in order.

Run: ``python -m bench.scale [--channels 20] [--questions 30] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from bench.common import (
    base_parser,
    data_dir,
    machine_info,
    positive_number,
    start_run,
    stopped_by_sigterm,
    write_json,
)
from bench.data import Article, load_articles
from bench.scale_cluster import (
    ARTICLES_PER_CHANNEL,
    LEASE_S,
    QUESTION_CHANNEL,
    Bench,
    channel_articles,
    chroma_pid,
    chroma_store,
)
from bench.scale_measure import Questions, measure_overhead
from bench.scale_report import report

DEFAULT_CHANNELS = 20
DEFAULT_QUESTIONS = 30
DEFAULT_OVERHEAD_CALLS = 1000


# -- the run -----------------------------------------------------------------------


def question_texts(articles: Sequence[Article]) -> list[str]:
    """Every question of ``articles``, in order; one generic question when they have none."""
    texts = [question.text for article in articles for question in article.questions]
    return texts or ["What happens in the story?"]


def run(args: argparse.Namespace, root: Path, articles: Sequence[Article]) -> dict[str, Any]:
    """Starts the processes under ``root``, runs the steps of the module docstring and stops
    every process, whatever failed; returns the figures :func:`bench.scale_report.report` prints."""
    bench = Bench(root, articles)
    figures: dict[str, Any] = {}
    try:
        started = time.perf_counter()
        bench.start_servers()
        assert bench.cluster is not None
        ask_articles = channel_articles(articles, 0)
        ask_key = bench.ingest(QUESTION_CHANNEL, ask_articles)  # loads this process's model first
        front_end = bench.start("front-1", "serve")
        worker_1 = bench.start("worker-1", "worker")
        warm_keys = [bench.ingest(f"CWARM{n}", channel_articles(articles, n)) for n in range(3)]
        rounds_keys = {label: bench.ingest_round(label, args.channels) for label in ("W1", "W2", "WQ")}
        ingest_articles = ARTICLES_PER_CHANNEL * len(bench.ingested)
        print(f"ingested {len(bench.ingested)} channels ({ingest_articles} articles) in {bench.ingest_s:.1f} s",
              flush=True)
        bench.cluster.wait_ready(front_end, worker_1)
        setup_s = time.perf_counter() - started

        # Warm-up: worker-1's first builds (the question channel's tree, and one more).
        warm_started = time.time()
        bench.request([ask_key, warm_keys[0]])
        warm = list(bench.wait_built([ask_key, warm_keys[0]], warm_started, timeout=600).values())
        texts = question_texts(ask_articles)
        first_question = bench.ask("first (not counted)", texts[-1:], 1)  # the front-end's first answer
        idle = bench.ask("idle", texts, args.questions)

        one, _ = bench.build_round("W1", rounds_keys["W1"])

        worker_2 = bench.start("worker-2", "worker")
        bench.cluster.wait_ready(worker_2)
        warm_started = time.time()
        bench.request(warm_keys[1:])
        warm += list(bench.wait_built(warm_keys[1:], warm_started, timeout=600).values())
        if not any(job.worker == worker_2.name for job in warm):
            print("warning: worker-2 built no warm-up channel; its first measured build is cold", flush=True)

        two, _ = bench.build_round("W2", rounds_keys["W2"])

        def ask_meanwhile(_: float) -> Questions:
            return bench.ask("while 2 workers build", texts, args.questions)

        building, asked = bench.build_round("WQ", rounds_keys["WQ"], ask_meanwhile)
        assert asked is not None
        asked.during_build = sum(1 for at in asked.answered_at if at <= building.ended_at)

        overhead = asyncio.run(measure_overhead(bench.valkey.url, args.overhead_calls))

        assert bench.engine is not None
        unbuilt = [str(k) for keys in rounds_keys.values() for k in keys if bench.engine.stats(k).version < 1]
        built = [ask_key, *warm_keys, *(k for keys in rounds_keys.values() for k in keys)]
        store = chroma_store(chroma_pid(bench.chroma.port), bench.chroma.directory / "db", bench.engine, built)
        figures = {
            "setup_s": setup_s,
            "ingest": {"channels": len(bench.ingested), "articles": ingest_articles, "seconds": bench.ingest_s},
            "warm_up": [asdict(job) for job in warm],
            "first_question_s": first_question.latencies_s[0],
            "rounds": [one, two, building],
            "questions": [idle, asked],
            "overhead": overhead,
            "unbuilt": unbuilt,
            "store": store,
        }
    finally:
        bench.close()
    return figures


def build_parser() -> argparse.ArgumentParser:
    """The command line: ``bench.common.base_parser``'s options and the run's sizes."""
    parser = base_parser("bench.scale", __doc__.split("\n\n")[0])
    parser.add_argument("--channels", type=positive_number, default=DEFAULT_CHANNELS, metavar="N",
                        help=f"channels rebuilt per round (default {DEFAULT_CHANNELS})")
    parser.add_argument("--questions", type=positive_number, default=DEFAULT_QUESTIONS, metavar="N",
                        help=f"questions asked in each condition (default {DEFAULT_QUESTIONS})")
    parser.add_argument("--overhead-calls", type=positive_number, default=DEFAULT_OVERHEAD_CALLS, metavar="N",
                        help=f"calls of each coordination operation timed (default {DEFAULT_OVERHEAD_CALLS})")
    parser.add_argument("--chars", type=positive_number, default=None, metavar="N",
                        help="cut every article to its first N characters (default: whole articles; for smoke tests)")
    parser.add_argument("--work-dir", type=Path, default=None, metavar="DIR",
                        help="keep the processes' configurations, logs and data here (default: a temporary directory)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the scale-out benchmark; returns the process exit code."""
    args = build_parser().parse_args(argv)
    articles = load_articles(args.data)
    if args.chars is not None:
        articles = [replace(article, text=article.text[:args.chars]) for article in articles]
    start_info = start_run()
    with stopped_by_sigterm(), data_dir(args.work_dir, "bench-scale-") as root:  # a killed run stops its processes too
        figures = run(args, root, articles)
    payload = report(args, figures)
    write_json(args.json, {
        "benchmark": "scale",
        "data": str(args.data),
        "channels": args.channels,
        "articles_per_channel": ARTICLES_PER_CHANNEL,
        "chars": args.chars,
        "questions_per_condition": args.questions,
        "overhead_calls": args.overhead_calls,
        "lease_s": LEASE_S,
        "machine_start": start_info,
        "machine_end": machine_info(),
        **payload,
    })
    return 0


if __name__ == "__main__":
    sys.exit(main())
