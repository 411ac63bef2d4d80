"""The report of ``bench.retrieval`` on its figures (``bench.retrieval_figures``): the tables,
issue 27's targets with their verdicts, the comparison with the baseline file, and the
figures as JSON.

The summary table shows, for each set and budget, collapsed's margin over the best flat
baseline on the fit half of the set and on the other half, so a choice that only wins where
it was fitted shows. The baseline file (``bench/baselines/retrieval.json``) keeps collapsed's
recall by ``set@budget``; a set and budget that lost more than :data:`ALLOWED_LOSS` against
it is flagged.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from bench.common import heading, table, verdict
from bench.data import FIT, HELD, DataSet
from bench.retrieval_figures import MethodFigures, SetFigures, per_question_best
from bench.retrieval_scoring import CHANCE, FLAT, WHOLE

ALL_SETS = "quality,patents,reviews,financial,wikipedia"
ALLOWED_LOSS = 0.01  # a set and budget may not lose more than one point of recall against the baseline
SUMMARY_METHODS = ("collapsed", "leaves", *FLAT, CHANCE, WHOLE)
PER_QUESTION_BEST = "flat, best per question"
MEASURE_NOTE = (
    "recall = share of the gold answer's distinct content words (lower-cased [a-z0-9]+ tokens, 2+ characters, "
    "not stop words) found in the context; 95 % CI: bootstrap over questions; 'vs' column: paired bootstrap of "
    "per-question differences to the best flat baseline; ahead/behind: questions where the method scores "
    "higher/lower than it; summaries: share of the context's tokens from summary nodes; chance: leaves drawn at "
    "random into the budget. The oracle extract "
    "is a greedy budgeted max-coverage of the gold words by the document's sentences (a lower bound of the best "
    "extract: within (1-1/e)/2 in theory, near it in practice). Distinguishing-word recall: the same over the "
    "gold's words that no wrong option uses (multiple choice: QuALITY; the plain recall elsewhere). Fit half: the documents at even positions of "
    "each set (where constants are fitted); other half: odd positions. Flat, best per question: the mean, over "
    "questions, of the best flat baseline's recall on each (a ceiling for choosing among those rankings)."
)


@dataclass(frozen=True, slots=True)
class Target:
    """One of issue 27's targets: on ``set_name`` at ``budget``, collapsed at least
    ``margin`` (recall, 0-1) above ``versus`` (the best flat baseline when None)."""

    set_name: str
    budget: int
    margin: float
    versus: str | None = None


TARGETS = (
    *(Target(name, 2000, 0.02) for name in ALL_SETS.split(",")),
    Target("patents", 500, 0.05),
    Target("reviews", 500, 0.03, "leaves"),
    Target("reviews", 2000, 0.03, "leaves"),
)


# -- tables --------------------------------------------------------------------


def percent(value: float) -> str:
    """A share (0-1) as a percentage with one decimal, without the sign."""
    return f"{100 * value:.1f}"


def points(value: float) -> str:
    """A difference of shares (0-1) in percentage points, signed, with one decimal."""
    return f"{100 * value:+.1f}"


def recall_table(best: str, methods: dict[str, MethodFigures]) -> str:
    """One row per method at one budget of one set: recall with its interval, the paired
    difference to the best flat baseline ``best``, mean tokens and the summaries' share."""
    rows = []
    for name, f in methods.items():
        paired = f.versus_best_flat
        versus = "-" if name == best else (
            f"{100 * paired.difference.mean:+.1f} [{100 * paired.difference.low:+.1f}, "
            f"{100 * paired.difference.high:+.1f}]")
        ahead = "-" if name == best else f"{paired.a_ahead}/{paired.b_ahead}"
        rows.append([name, percent(f.recall.mean), f"{percent(f.recall.low)}-{percent(f.recall.high)}", versus, ahead,
                     f"{f.mean_tokens:.0f}", f"{percent(f.summary_share)} %"])
    headers = ["method", "recall %", "95 % CI", f"vs {best} (points, 95 % CI)", "ahead/behind", "mean tokens",
               "summaries"]
    return table(headers, rows)


def summary_table(all_figures: dict[str, SetFigures], baseline: dict[str, float]) -> str:
    """One row per set and budget: each method's recall, collapsed's margin over the best flat
    baseline (whole set, fit half, other half), and its change against ``baseline``."""
    rows = []
    for set_name, by_budget in all_figures.items():
        for budget, (best, methods) in sorted(by_budget.items()):
            collapsed, flat = methods["collapsed"], methods[best]
            margins = [collapsed.halves[half] - flat.halves[half] for half in (FIT, HELD)]
            was = baseline.get(f"{set_name}@{budget}")
            change = "-" if was is None else points(collapsed.recall.mean - was)
            rows.append([f"{set_name}@{budget}", *(percent(methods[m].recall.mean) for m in SUMMARY_METHODS),
                         percent(per_question_best(methods)),
                         f"{points(collapsed.recall.mean - flat.recall.mean)} ({best})",
                         *(points(m) for m in margins), change])
    headers = ["set@budget", *SUMMARY_METHODS, PER_QUESTION_BEST, "collapsed vs best flat", FIT, HELD,
               "vs baseline"]
    return table(headers, rows)


def print_set(data: DataSet, by_budget: SetFigures, seconds: float) -> None:
    """Prints one set's heading (documents, questions, lines dropped, time) and its table at each budget."""
    scorable = next(iter(by_budget.values()))[1]["collapsed"].recall.n if by_budget else 0
    dropped = f"; duplicate lines dropped: {list(data.duplicates)}" if data.duplicates else ""
    print(heading(f"{data.name}: {len(data.articles)} documents, {data.questions} questions "
                  f"({scorable} with gold content words){dropped}; {seconds:.1f} s"))
    for budget, (best, methods) in by_budget.items():
        print(f"\n{data.name} @ {budget} tokens (best flat baseline: {best})")
        print(recall_table(best, methods))


# -- targets -------------------------------------------------------------------


def check_targets(all_figures: dict[str, SetFigures]) -> list[dict[str, object]]:
    """Each target's verdict, or ``None`` as its ``pass`` when its set and budget were not run."""
    checked = []
    for target in TARGETS:
        entry: dict[str, object] = {"set": target.set_name, "budget": target.budget, "margin": target.margin,
                                    "versus": target.versus or "best flat", "pass": None}
        if target.budget in all_figures.get(target.set_name, {}):
            best, methods = all_figures[target.set_name][target.budget]
            other = target.versus or best
            collapsed, reference = methods["collapsed"], methods[other]
            passed = collapsed.recall.mean >= reference.recall.mean + target.margin - 1e-12
            entry.update({"collapsed": collapsed.recall.mean, "reference": other,
                          "reference_recall": reference.recall.mean, "pass": passed})
        checked.append(entry)
    return checked


def target_line(entry: dict[str, object]) -> str:
    """One line for a :func:`check_targets` entry: the target, the recalls compared and the verdict."""
    name = f"{entry['set']}@{entry['budget']}"
    margin = float(entry["margin"])  # type: ignore[arg-type]
    wanted = f"collapsed >= {entry['versus']} + {100 * margin:.0f} points"
    if entry["pass"] is None:
        return f"{name}: {wanted}: not run"
    got = (f"collapsed {percent(entry['collapsed'])} vs {entry['reference']} "  # type: ignore[arg-type]
           f"{percent(entry['reference_recall'])}")  # type: ignore[arg-type]
    return f"{name}: {wanted}: {got}: {verdict(bool(entry['pass']))}"


# -- the baseline and JSON -----------------------------------------------------


def collapsed_figures(all_figures: dict[str, SetFigures]) -> dict[str, float]:
    """Collapsed's mean recall by ``set@budget``: what a baseline file keeps."""
    return {f"{name}@{budget}": methods["collapsed"].recall.mean
            for name, by_budget in all_figures.items() for budget, (_, methods) in by_budget.items()}


def read_baseline(path: Path, measure: str = "recall") -> dict[str, float]:
    """Collapsed's recall (or distinguishing-word recall) by ``set@budget`` from a baseline file;
    empty when there is none."""
    if not path.exists():
        return {}
    kept = json.loads(path.read_text(encoding="utf-8")).get("collapsed" if measure == "recall" else measure, {})
    return {key: float(value) for key, value in kept.items()}


def regressions(current: dict[str, float], baseline: dict[str, float]) -> list[str]:
    """The ``set@budget`` whose collapsed recall fell more than :data:`ALLOWED_LOSS` below the baseline."""
    return [key for key, value in current.items() if key in baseline and value < baseline[key] - ALLOWED_LOSS]


def set_payload(data: DataSet, by_budget: SetFigures, seconds: float) -> dict[str, object]:
    """One set's figures as JSON: its file, documents, questions, lines dropped, time, and every
    method's figures with the best flat baseline at each budget."""
    return {
        "file": str(data.path),
        "documents": len(data.articles),
        "questions": data.questions,
        "duplicate_lines_dropped": list(data.duplicates),
        "seconds": seconds,
        "budgets": {
            str(budget): {"best_flat": best, "methods": {name: f.as_dict() for name, f in methods.items()}}
            for budget, (best, methods) in by_budget.items()
        },
    }
