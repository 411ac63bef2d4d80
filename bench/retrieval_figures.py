"""The figures ``bench.retrieval`` reports from its per-question outcomes (``bench.retrieval_scoring``).

For each method at one budget of one set: its mean recall with a 95 % bootstrap interval
over questions, its difference to the best flat baseline with a paired bootstrap interval
(``bench.measure``), its mean tokens, the share of them taken by summary nodes, and its mean
recall on each half of the set. Only the questions that can be scored (their gold has
content words) count.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from bench.data import FIT, HELD
from bench.measure import Interval, Paired, mean_interval, paired_difference
from bench.retrieval_scoring import FLAT, WHOLE, Outcomes

MEASURES = ("recall", "specific")  # plain content-word recall, and recall of the distinguishing words


@dataclass(frozen=True, slots=True)
class MethodFigures:
    """One method's figures at one budget of one set (recall in 0-1); ``halves`` its mean
    recall on each half of the set's documents (:data:`~bench.retrieval_scoring.FIT`,
    :data:`~bench.retrieval_scoring.HELD`)."""

    recall: Interval
    versus_best_flat: Paired
    mean_tokens: float
    summary_share: float
    per_question: list[float]
    halves: dict[str, float]

    def as_dict(self) -> dict[str, object]:
        """The figures as JSON, per-question recall rounded to four places."""
        return {
            "recall": self.recall.as_dict(),
            "vs_best_flat": self.versus_best_flat.as_dict(),
            "mean_tokens": self.mean_tokens,
            "summary_share": self.summary_share,
            "halves": self.halves,
            "per_question_recall": [round(r, 4) for r in self.per_question],
        }


SetFigures = dict[int, tuple[str, dict[str, MethodFigures]]]
"""By budget: the best flat baseline's name and every method's figures."""


def scored(values: Sequence[float]) -> list[int]:
    """Indices of the questions that can be scored (their gold has content words)."""
    return [i for i, v in enumerate(values) if not np.isnan(v)]


def _mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if len(values) else float("nan")


def figures(row: dict[str, Outcomes], measure: str = "recall") -> tuple[str, dict[str, MethodFigures]]:
    """The best flat baseline's name and every method's figures by ``measure`` (one of
    :data:`MEASURES`), over the questions it can score."""
    keep = scored(getattr(row[WHOLE], measure))
    halves = [row[WHOLE].half[i] for i in keep]

    def recalls(name: str) -> list[float]:
        return [getattr(row[name], measure)[i] for i in keep]

    best = max(FLAT, key=lambda name: (float(np.mean(recalls(name))) if keep else 0.0, -FLAT.index(name)))
    result = {}
    for name, outcomes in row.items():
        values = recalls(name)
        result[name] = MethodFigures(
            recall=mean_interval(values),
            versus_best_flat=paired_difference(values, recalls(best)),
            mean_tokens=_mean([outcomes.tokens[i] for i in keep]),
            summary_share=_mean([outcomes.summary_share[i] for i in keep]),
            per_question=values,
            halves={half: _mean([v for v, h in zip(values, halves) if h == half]) for half in (FIT, HELD)},
        )
    return best, result


def per_question_best(methods: dict[str, MethodFigures]) -> float:
    """The mean recall of choosing, for each question, the flat baseline that found most of
    its gold: a ceiling for any way of choosing or fusing those rankings question by question.
    It tells how much room a set leaves a better ranking of the same chunks (issue 27's
    detail sets: little, at 2,000 tokens)."""
    return float(np.mean(np.max([methods[name].per_question for name in FLAT], axis=0)))
