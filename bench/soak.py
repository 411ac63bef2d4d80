"""Soak: one bot process under a steady chat workload, watched for slow leaks.

One bot (``bot.runtime.Assistant`` on the offline defaults, embedded Chroma in a
temporary data directory, UMAP warmed in the background as the bot does it)
serves four console channels. The workload (questions, rebuild cycles and churn,
all through the console adapter; the uploads; when the baseline and final samples
are taken) is ``bench.soak_workload``'s; what a sample holds, ``bench.soak_probe``'s;
the targets (issue 13), each printed PASS/FAIL, and the report, ``bench.soak_report``'s.
This module runs them and writes the figures.

Run: ``python -m bench.soak --minutes 15 [--sample-s 30] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.common import base_parser, data_dir, machine_info, machine_line, start_run, write_json
from bench.data import Article, load_articles
from bench.soak_probe import grown_since_baseline
from bench.soak_report import half_time, judge, report
from bench.soak_workload import CHANNELS, ErrorLog, Soak, SoakSettings, Tally, channel_plans, soak_config
from bot.composition import open_bot

# -- running it ----------------------------------------------------------------


async def soak(articles: Sequence[Article], settings: SoakSettings, root: Path) -> dict[str, Any]:
    """Runs the whole soak under ``root`` and returns its figures (see :func:`main`)."""
    tally = Tally()
    errors = ErrorLog(tally)
    logging.getLogger().addHandler(errors)
    try:
        bot = await open_bot(soak_config(root / "data", root / "pictures"))
        await bot.start()  # warms UMAP in the background, as the bot does
        try:
            plans = channel_plans(bot, articles, root / "uploads", settings, tally)
            run = Soak(bot, plans, settings, tally)
            await run.run()
            missing = await run.missing_sources()
        finally:
            await bot.stop()
    finally:
        logging.getLogger().removeHandler(errors)
    assert run.final is not None
    after = run.samples[run.samples.index(run.baseline) + 1:] if run.baseline in run.samples else []
    targets = judge(run.baseline, run.final, len(tally.errors), missing, max((s.data_mib for s in after), default=0.0),
                    half_time(run.samples))
    return {
        "settings": asdict(settings),
        "cycles": run.cycles,
        "rebuilds": tally.rebuilds,
        "questions": tally.questions,
        "replies": dict(tally.replies),
        "actions": dict(tally.actions),
        "errors": tally.errors,
        "missing": missing,
        "grown": grown_since_baseline(run.inventories),
        "baseline": asdict(run.baseline) if run.baseline else None,
        "final": asdict(run.final),
        "samples": [asdict(s) for s in run.samples],
        "targets": [asdict(t) for t in targets],
    }


def parser() -> argparse.ArgumentParser:
    """The command line: ``bench.common.base_parser``'s options and the workload's settings."""
    defaults = SoakSettings()
    parse = base_parser("bench.soak", __doc__.splitlines()[0])
    parse.add_argument("--minutes", type=float, default=defaults.minutes, help="how long (default 15)")
    parse.add_argument("--sample-s", type=float, default=defaults.sample_s, help="seconds between samples (default 30)")
    parse.add_argument("--churn-s", type=float, default=defaults.churn_s,
                       help="seconds between pins, unpins, forgets, uploads... (default 10)")
    parse.add_argument("--question-pause-s", type=float, default=defaults.question_pause_s,
                       help="seconds between questions (default 1)")
    parse.add_argument("--articles-per-channel", type=int, default=defaults.articles_per_channel,
                       help="dev articles uploaded to each channel (default 2), besides the sample handbook")
    parse.add_argument("--chars", type=int, default=defaults.chars, help="cut each article to N characters (default: whole)")
    parse.add_argument("--warm-cycles", type=int, default=defaults.warm_cycles,
                       help="rebuild cycles before the baseline sample (default 1)")
    parse.add_argument("--min-cycles", type=int, default=defaults.min_cycles,
                       help="rebuild cycles after the baseline, run even past --minutes (default 1)")
    parse.add_argument("--data-dir", type=Path, default=None, metavar="DIR",
                       help="work under this (empty) directory instead of a temporary one")
    return parse


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the soak, prints its report and writes its JSON; returns the process exit code."""
    args = parser().parse_args(argv)
    settings = SoakSettings(args.minutes, args.sample_s, args.churn_s, args.question_pause_s,
                            args.articles_per_channel, args.chars, args.warm_cycles, args.min_cycles)
    articles = load_articles(args.data)
    if len(articles) < settings.articles_per_channel * len(CHANNELS):
        parser().error(f"{args.data} holds {len(articles)} articles; "
                       f"{settings.articles_per_channel * len(CHANNELS)} are needed")
    start_info = start_run()
    with data_dir(args.data_dir, "bench-soak-") as root:
        figures = asyncio.run(soak(articles, settings, root))
    report(figures)
    print("\n" + machine_line("machine at end"))
    write_json(args.json, {"benchmark": "soak", "machine_start": start_info, "machine_end": machine_info(), **figures})
    return 0


if __name__ == "__main__":
    sys.exit(main())
