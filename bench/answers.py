"""Answer benchmark: what ``Engine.answer`` (the offline extractive answerer) says, and when it refuses.

One tree per document, each in its own channel, as in ``bench.retrieval``
(the same ``--data-dir`` serves both). Three measures:

- **recall**: each set's questions in their own document's channel, the
  answer text scored by content-word recall (``bench.measure``; citation marks
  like ``[2]`` removed first, a refusal scores 0);
- **summary citations**: the share of patent answers citing a summary node
  (a citation of layer > 0): a whole-document question should be answered from
  the tree's upper layers;
- **refusals**: the share of those answerable questions refused
  (``answer.found`` false), and of off-topic questions refused: QuALITY and
  review questions asked in a channel of another set (QuALITY questions in
  patent and review channels, review questions in QuALITY and patent
  channels; the patent question is generic, so it is not used off topic).

Each answerable question is also timed: ``retrieve`` (collapsed, engine
defaults) and ``ask`` (``await Engine.answer``: retrieval plus answer), p50
and p95 per set. The speed targets live in ``bench.query``.

Run: ``python -m bench.answers [--sets quality,patents,reviews] [--limit N]
[--questions N] [--data-dir DIR] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

from bench.common import (
    DataSet,
    Stopwatch,
    data_dir,
    ensure_article_channels,
    heading,
    latency_summary,
    load_embedder,
    load_sets,
    machine_info,
    machine_line,
    offline_engine,
    offline_identity,
    sets_parser,
    start_run,
    table,
    verdict,
    write_json,
)
from bench.measure import content_words, mean_interval, word_recall
from raptor_engine import Answer, ChannelKey, Engine

TARGET_SUMMARY_CITED = 0.90  # patent answers citing a summary node, at least
TARGET_ANSWERABLE_REFUSED = 0.02  # at most
TARGET_OFF_TOPIC_REFUSED = 0.90  # at least
OFF_TOPIC_POOLS = ("quality", "reviews")  # sets whose questions are specific enough to be off topic elsewhere
_CITATION_MARK = re.compile(r"\[\d+\]")


@dataclass(frozen=True, slots=True)
class Asked:
    """A question as sent: its set, the channel asked in, its text and gold answer."""

    set_name: str
    key: ChannelKey
    text: str
    gold: str


@dataclass(slots=True)
class Tally:
    """What the answers to one group of questions were."""

    recall: list[float] = field(default_factory=list)
    refused: int = 0
    summary_cited: int = 0
    retrieve_s: list[float] = field(default_factory=list)
    ask_s: list[float] = field(default_factory=list)

    @property
    def asked(self) -> int:
        return len(self.ask_s)

    def share(self, count: int) -> float:
        return count / self.asked if self.asked else float("nan")


def answer_recall(gold: str, answer: Answer) -> float:
    """Content-word recall of an answer's text (its ``[n]`` marks removed); 0 for a refusal."""
    if not answer.found:
        return 0.0 if content_words(gold) else float("nan")
    return word_recall(gold, _CITATION_MARK.sub(" ", answer.text))


def answerable(sets: Sequence[DataSet], keys: dict[str, dict[int, ChannelKey]]) -> list[Asked]:
    """Every question of every set, in its own document's channel."""
    return [Asked(data.name, keys[data.name][a.index], q.text, q.gold)
            for data in sets for a in data.articles for q in a.questions]


def off_topic(sets: Sequence[DataSet], keys: dict[str, dict[int, ChannelKey]]) -> list[Asked]:
    """Each QuALITY and review question once, in a channel of another set.

    The channels of the other sets are taken in turn (round robin over all
    their documents), so every other set and document gets its share.
    """
    asked: list[Asked] = []
    for data in sets:
        if data.name not in OFF_TOPIC_POOLS:
            continue
        channels = [key for other in sets if other.name != data.name for key in keys[other.name].values()]
        if not channels:
            continue
        questions = [q for article in data.articles for q in article.questions]
        asked += [Asked(data.name, channels[i % len(channels)], q.text, q.gold) for i, q in enumerate(questions)]
    return asked


async def ask_all(engine: Engine, questions: Sequence[Asked], tallies: dict[str, Tally], timed: bool) -> None:
    """Asks every question (one event loop), adding to the tally of its set; with ``timed``
    also times a separate ``retrieve`` of the same question."""
    for asked in questions:
        tally = tallies.setdefault(asked.set_name, Tally())
        if timed:
            with Stopwatch() as watch:
                engine.retrieve(asked.key, asked.text)
            tally.retrieve_s.append(watch.seconds)
        with Stopwatch() as watch:
            answer = await engine.answer(asked.key, asked.text)
        tally.ask_s.append(watch.seconds)
        tally.refused += int(not answer.found)
        tally.summary_cited += int(any(citation.layer > 0 for citation in answer.citations))
        tally.recall.append(answer_recall(asked.gold, answer))


def warm_up(engine: Engine, asked: Asked) -> None:
    """One retrieve and one answer, not counted (first calls pay one-off costs)."""
    engine.retrieve(asked.key, asked.text)
    asyncio.run(engine.answer(asked.key, asked.text))


# -- report --------------------------------------------------------------------


def scorable_recall(tally: Tally) -> list[float]:
    """The recall of the questions whose gold has content words (the others are NaN)."""
    return [r for r in tally.recall if not math.isnan(r)]


def answer_table(tallies: dict[str, Tally]) -> str:
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
    rows = [[name, tally.asked, tally.refused, f"{100 * tally.share(tally.refused):.1f} %"]
            for name, tally in tallies.items()]
    return table(["questions from", "asked elsewhere", "refused", "share refused"], rows)


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
    wanted = f"target {'>=' if entry['at_least'] else '<='} {100 * float(entry['bound']):.0f} %"  # type: ignore[arg-type]
    if entry["pass"] is None:
        return f"{entry['name']} ({wanted}): not measured in this run"
    value = 100 * float(entry["value"])  # type: ignore[arg-type]
    return f"{entry['name']}: {value:.1f} % ({wanted}): {verdict(bool(entry['pass']))}"


def tally_payload(tally: Tally) -> dict[str, object]:
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


# -- command line --------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    return sets_parser("bench.answers", __doc__.split("\n\n")[0], "quality,patents,reviews")


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the answer benchmark; returns the process exit code."""
    args = build_parser().parse_args(argv)
    sets = load_sets(args.sets, args.sources, args.limit, args.questions)
    start_info = start_run()
    embedder = load_embedder()
    counter = embedder.token_counter()
    answered: dict[str, Tally] = {}
    elsewhere: dict[str, Tally] = {}
    with data_dir(args.data_dir, "bench-answers-") as directory, Stopwatch() as run:
        engine = offline_engine(directory, embedder, counter)
        built_with = offline_identity(engine, counter)
        with Stopwatch() as setup:
            keys = {data.name: ensure_article_channels(engine, data.articles, built_with) for data in sets}
        questions, strays = answerable(sets, keys), off_topic(sets, keys)
        print(f"\n{len(keys)} sets, {sum(len(k) for k in keys.values())} channels (one tree per document) ready in "
              f"{setup.seconds:.1f} s; {len(questions)} answerable questions, {len(strays)} off-topic")
        if questions:
            warm_up(engine, questions[0])
        asyncio.run(ask_all(engine, questions, answered, timed=True))
        asyncio.run(ask_all(engine, strays, elsewhere, timed=False))
    for data in sets:
        if data.duplicates:
            print(f"{data.name}: duplicate lines dropped: {list(data.duplicates)}")
    print(heading("Answers to each set's questions, in their own document's channel"))
    print(answer_table(answered))
    print("recall: share of the gold answer's distinct content words in the answer text (a refusal scores 0); "
          "95 % CI by bootstrap over questions; retrieve: Engine.retrieve (collapsed, defaults); "
          "ask: await Engine.answer (retrieve + extractive answer), after one warm-up question.")
    print(heading("Off-topic questions (asked in a channel of another set)"))
    print(off_topic_table(elsewhere) if elsewhere else "none: needs QuALITY or review questions and another set")
    checked = check_targets(answered, elsewhere)
    print(heading("Targets (issue 12)"))
    print("\n".join(target_line(entry) for entry in checked))
    print(f"\nrun took {run.seconds:.1f} s; trees built with {built_with}")
    print(machine_line("machine at end"))
    write_json(args.json, {
        "benchmark": "answers",
        "machine_start": start_info,
        "machine_end": machine_info(),
        "built_with": built_with,
        "run_s": run.seconds,
        "setup_s": setup.seconds,
        "sets": {data.name: {"file": str(data.path), "documents": len(data.articles), "questions": data.questions,
                             "duplicate_lines_dropped": list(data.duplicates)} for data in sets},
        "answerable": {name: tally_payload(tally) for name, tally in answered.items()},
        "off_topic": {name: tally_payload(tally) for name, tally in elsewhere.items()},
        "targets": checked,
    })
    return 0


if __name__ == "__main__":
    sys.exit(main())
