"""Retrieval-quality benchmark: how much of the gold answer each method puts in the context.

One tree per document, each in its own channel (built, or reused from a
``--data-dir`` built before). Every question's text (QuALITY's without its
options) goes through every method under the same token budget, and the
context it returns is scored by **content-word recall** (``bench.measure``):
the share of the gold answer's distinct content words found in it. The gold
is the right option's text for QuALITY, the reference summary for patents and
reviews, the reference answer for earnings calls (``financial``) and Wikipedia
(``wikipedia``). Every set is run at 500 and 2,000 tokens.

Methods: the engine's three modes (``collapsed``, the default, as
``Engine.retrieve`` runs it; ``traversal``; ``leaves``); three flat baselines
over exactly the engine's leaf chunks and their stored embeddings, ranked and
then filled into the budget by the engine's own ``fill_budget`` (``bm25``,
``dense``, and ``bm25+dense`` fused by reciprocal rank, k = 60); and two
references: the ``whole document`` (the ceiling) and the ``oracle extract``,
the best recall an extract of the document's sentences reaches within the
budget, found greedily (see :func:`oracle_recall`).

Each method's mean recall comes with a 95 % bootstrap interval over questions,
and its difference to the best flat baseline with a paired bootstrap
interval; "summaries" is the share of the context's tokens taken by summary
nodes (layer > 0), averaged over questions.

Every constant of retrieval is fitted on the *fit half* of each set (its
documents at even positions) and checked on the *other half* (odd positions):
the summary table shows collapsed's margin over the best flat baseline on
both, so a choice that only wins where it was fitted shows. It also compares
collapsed with the figures kept in ``bench/baselines/retrieval.json`` (the
last commit's): a set and budget that lost more than one point is flagged.
``--save-baseline`` writes this run's figures there.

This module holds the command line and the run; the parts are
``bench.retrieval_flat`` (the flat baselines and the oracle extract),
``bench.retrieval_scoring`` (every method over one document's channel, question by
question), ``bench.retrieval_figures`` (each method's figures from those outcomes) and
``bench.retrieval_report`` (the tables, the targets, the baseline comparison and the JSON).

Run: ``python -m bench.retrieval [--sets quality,patents,reviews,financial,wikipedia]
[--budgets 500,2000] [--limit N] [--questions N] [--data-dir DIR] [--json FILE]
[--baseline FILE] [--save-baseline]``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from bench.common import (
    Stopwatch,
    data_dir,
    heading,
    load_embedder,
    machine_info,
    machine_line,
    offline_engine,
    offline_identity,
    sets_parser,
    start_run,
    write_json,
)
from bench.data import load_sets
from bench.retrieval_figures import SetFigures, figures
from bench.retrieval_report import (
    ALL_SETS,
    MEASURE_NOTE,
    check_targets,
    collapsed_figures,
    print_set,
    read_baseline,
    regressions,
    set_payload,
    summary_table,
    target_line,
)
from bench.retrieval_scoring import run_set

BUDGETS = (500, 2000)
BASELINE = Path(__file__).resolve().parent / "baselines" / "retrieval.json"


def build_parser() -> argparse.ArgumentParser:
    """The command line: the options of every benchmark over the sets (``bench.common.sets_parser``),
    the budgets, the baseline file, ``--pooled`` and ``--save-baseline``."""
    parser = sets_parser("bench.retrieval", __doc__.split("\n\n")[0], ALL_SETS)
    parser.add_argument("--budgets", type=_budgets, default=BUDGETS, metavar="N,M",
                        help="token budgets for every set (default: 500,2000)")
    parser.add_argument("--baseline", type=Path, default=BASELINE, metavar="FILE",
                        help=f"the figures to compare collapsed with (default {BASELINE})")
    parser.add_argument("--pooled", action="store_true",
                        help="every document of a set in one channel (a budget is then a small part of it); "
                             "compared with the baseline's pooled figures")
    parser.add_argument("--save-baseline", action="store_true",
                        help="write this run's collapsed figures to the --baseline file (merged with what it has)")
    return parser


def _budgets(text: str) -> tuple[int, ...]:
    """An argparse type: comma-separated positive budgets in tokens (``ArgumentTypeError`` otherwise)."""
    try:
        budgets = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"budgets are whole numbers of tokens, not {text!r}") from error
    if not budgets or min(budgets) <= 0:
        raise argparse.ArgumentTypeError(f"give one or more positive budgets, not {text!r}")
    return budgets


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the retrieval-quality benchmark; returns the process exit code."""
    args = build_parser().parse_args(argv)
    sets = load_sets(args.sets, args.sources, args.limit, args.questions)
    start_info = start_run()
    print("One tree per document, each in its own channel (the paper builds one tree per document).")
    embedder = load_embedder()
    counter = embedder.token_counter()
    all_figures: dict[str, SetFigures] = {}
    specific: dict[str, SetFigures] = {}
    payload_sets: dict[str, object] = {}
    with data_dir(args.data_dir, "bench-retrieval-") as directory, Stopwatch() as run:
        engine = offline_engine(directory, embedder, counter)
        built_with = offline_identity(engine, counter)
        for data in sets:
            with Stopwatch() as watch:
                results = run_set(engine, embedder, counter, data, args.budgets, built_with, args.pooled)
            label = f"{data.name} pooled" if args.pooled else data.name  # pooled figures are kept apart
            all_figures[label] = {budget: figures(results[budget]) for budget in args.budgets if budget in results}
            specific[label] = {budget: figures(results[budget], "specific") for budget in args.budgets if budget in results}
            payload_sets[label] = set_payload(data, all_figures[label], watch.seconds) | {
                "specific": set_payload(data, specific[label], watch.seconds)["budgets"]}
            print_set(data, all_figures[label], watch.seconds)
    print(f"\nrun took {run.seconds:.1f} s; trees built with {built_with}")
    print(MEASURE_NOTE)
    baseline = read_baseline(args.baseline)
    current = collapsed_figures(all_figures)
    print(heading("Every set and budget (recall %; margins in points)"))
    print(summary_table(all_figures, baseline))
    lost = regressions(current, baseline)
    print(f"\nagainst {args.baseline}: " + (f"LOST more than 1 point on {', '.join(lost)}" if lost else
                                          "no set and budget lost more than 1 point" if baseline else "no baseline"))
    print(heading("Every set and budget, distinguishing-word recall (%; margins in points)"))
    print(summary_table(specific, read_baseline(args.baseline, "specific")))
    checked = check_targets(all_figures)
    checked_specific = check_targets(specific)
    print(heading("Targets (issue 27), plain recall"))
    print("\n".join(target_line(entry) for entry in checked))
    print(heading("The same targets, distinguishing-word recall"))
    print("\n".join(target_line(entry) for entry in checked_specific))
    print("\n" + machine_line("machine at end"))
    if args.save_baseline:
        kept = {"built_with": built_with, "collapsed": read_baseline(args.baseline) | current,
                "specific": read_baseline(args.baseline, "specific") | collapsed_figures(specific)}
        args.baseline.parent.mkdir(parents=True, exist_ok=True)
        args.baseline.write_text(json.dumps(kept, indent=1) + "\n", encoding="utf-8")
    write_json(args.json, {
        "benchmark": "retrieval",
        "measure": MEASURE_NOTE,
        "machine_start": start_info,
        "machine_end": machine_info(),
        "built_with": built_with,
        "run_s": run.seconds,
        "sets": payload_sets,
        "summary": current,
        "baseline": baseline,
        "lost_against_baseline": lost,
        "specific_summary": collapsed_figures(specific),
        "targets": checked,
        "targets_specific": checked_specific,
    })
    return 0


if __name__ == "__main__":
    sys.exit(main())
