"""The report of ``bench.answers`` on its tallies: the answer, off-topic and mixed-question
tables, the targets with their verdicts, and each tally as JSON.

The targets (issue 12): patent answers citing a summary node (a whole-document question
should be answered from the tree's upper layers), answerable questions refused, and
off-topic questions refused.
"""

from __future__ import annotations

import math

from bench.answers_ask import Tally
from bench.common import latency_summary, percent, table, verdict
from bench.measure import mean_interval

TARGET_SUMMARY_CITED = 0.90  # patent answers citing a summary node, at least
TARGET_ANSWERABLE_REFUSED = 0.02  # at most
TARGET_OFF_TOPIC_REFUSED = 0.90  # at least


def scorable_recall(tally: Tally) -> list[float]:
    """The recall of the questions whose gold has content words (the others are NaN)."""
    return [r for r in tally.recall if not math.isnan(r)]


def answer_table(tallies: dict[str, Tally]) -> str:
    """Per set: questions, mean recall with its 95 % interval, shares refused and citing a
    summary, and retrieve and ask latencies (p50, p95)."""
    rows = []
    for name, tally in tallies.items():
        scorable = scorable_recall(tally)
        recall = mean_interval(scorable)
        retrieve, ask = latency_summary(tally.retrieve_s), latency_summary(tally.ask_s)
        rows.append([name, tally.asked, f"{100 * recall.mean:.1f}", f"{100 * recall.low:.1f}-{100 * recall.high:.1f}",
                     f"{100 * tally.share(tally.refused):.1f} %", f"{100 * tally.share(tally.summary_cited):.1f} %",
                     retrieve["p50_ms"], retrieve["p95_ms"], ask["p50_ms"], ask["p95_ms"]])
    headers = ["set", "questions", "recall %", "95 % CI", "refused", "cite a summary", "retrieve p50 ms",
               "retrieve p95 ms", "ask p50 ms", "ask p95 ms"]
    return table(headers, rows)


def off_topic_table(tallies: dict[str, Tally]) -> str:
    """Per set the questions come from: how many were asked elsewhere and refused."""
    rows = [[name, tally.asked, tally.refused, f"{100 * tally.share(tally.refused):.1f} %"]
            for name, tally in tallies.items()]
    return table(["questions from", "asked elsewhere", "refused", "share refused"], rows)


def mixed_table(tallies: dict[str, dict[str, Tally]]) -> str:
    """Mixed questions asked and refused, per kind and set of the first question."""
    rows = [[mix, name, tally.asked, tally.refused, percent(tally.share(tally.refused))]
            for mix, by_set in tallies.items() for name, tally in by_set.items()]
    return table(["mixed", "first question from", "asked", "refused", "share refused"], rows)


def check_targets(answered: dict[str, Tally], elsewhere: dict[str, Tally]) -> list[dict[str, object]]:
    """The three targets' figures and verdicts (``pass`` None when not measurable in this run)."""
    asked = sum(t.asked for t in answered.values())
    off_asked = sum(t.asked for t in elsewhere.values())
    patents = answered.get("patents")
    measured = [
        ("patent answers citing a summary", patents.share(patents.summary_cited) if patents else None,
         TARGET_SUMMARY_CITED, True),
        ("answerable questions refused", sum(t.refused for t in answered.values()) / asked if asked else None,
         TARGET_ANSWERABLE_REFUSED, False),
        ("off-topic questions refused", sum(t.refused for t in elsewhere.values()) / off_asked if off_asked else None,
         TARGET_OFF_TOPIC_REFUSED, True),
    ]
    return [{"name": name, "value": value, "bound": bound, "at_least": at_least,
             "pass": None if value is None else (value >= bound if at_least else value <= bound)}
            for name, value, bound, at_least in measured]


def target_line(entry: dict[str, object]) -> str:
    """One target of :func:`check_targets` as a line: its figure, bound and verdict."""
    wanted = f"target {'>=' if entry['at_least'] else '<='} {100 * float(entry['bound']):.0f} %"  # type: ignore[arg-type]
    if entry["pass"] is None:
        return f"{entry['name']} ({wanted}): not measured in this run"
    value = 100 * float(entry["value"])  # type: ignore[arg-type]
    return f"{entry['name']}: {value:.1f} % ({wanted}): {verdict(bool(entry['pass']))}"


def tally_payload(tally: Tally) -> dict[str, object]:
    """A tally as JSON: counts, shares, the recall interval, latencies and every question's recall."""
    scorable = scorable_recall(tally)
    return {
        "questions": tally.asked,
        "recall": mean_interval(scorable).as_dict(),
        "refused": tally.refused,
        "refused_share": tally.share(tally.refused),
        "summary_cited": tally.summary_cited,
        "summary_cited_share": tally.share(tally.summary_cited),
        "retrieve": latency_summary(tally.retrieve_s),
        "ask": latency_summary(tally.ask_s),
        "per_question_recall": [round(r, 4) for r in tally.recall],
    }
