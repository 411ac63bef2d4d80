"""Answer benchmark: what ``Engine.answer`` (the offline extractive answerer) says, and when it refuses.

One tree per document, each in its own channel, as in ``bench.retrieval``
(the same ``--data-dir`` serves both). Five measures:

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
  channels; the patent question is generic, so it is not used off topic);
- **the unfound-words note** ("I found nothing about …", see
  ``raptor_engine/unfound.py``): the share of answered answerable questions
  whose answer carries it (it should be rare), and, the other way round, of
  answered *mixed* questions: each answerable question followed, in its own
  channel, by a QuALITY or review question of another set (a clearly absent
  topic) or of another document of the same set (a neighbouring one), whose
  answer should name a word of that second question (how the questions are
  mixed, and why a whole question is appended: ``bench.answers_questions``).
  Each share is given *before* the meaning check and *after* it, on the fit
  half of each set and on the other half, with the thresholds that would be
  best on this run's fit half beside the module's constants
  (``bench.answers_note``).

- **citations** (``bench.citations``): citation recall and precision in the
  style of ALCE, and the share of quotes verified, for the offline answerer and
  for the stand-in model answering from its sources, faithfully and citing
  wrongly.

Each answerable question is also timed: ``retrieve`` (collapsed, engine
defaults) and ``ask`` (``await Engine.answer``: retrieval plus answer), p50
and p95 per set. The speed targets live in ``bench.query``.

This module holds the command line and the run; the parts are
``bench.answers_questions`` (the questions and the channel each is asked in),
``bench.answers_ask`` (asking them and scoring the answers, the stand-in model's
included), ``bench.answers_note`` (the unfound-words note's records, shares, fit
and table) and ``bench.answers_report`` (the other tables, the targets and the
tallies as JSON).

Run: ``python -m bench.answers [--sets quality,patents,reviews] [--limit N]
[--questions N] [--data-dir DIR] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from dataclasses import asdict

from bench.answers_ask import Tally, ask_all, model_citations, observed_engine, warm_up
from bench.answers_note import Noted, UnfoundLog, fit_lines, fit_note, note_payload, note_shares, note_table
from bench.answers_questions import OTHER_SET, SAME_SET, answerable, mixed, off_topic
from bench.answers_report import answer_table, check_targets, mixed_table, off_topic_table, tally_payload, target_line
from bench.citations import CitationTally, citation_table, tallies_payload
from bench.common import (
    Stopwatch,
    data_dir,
    ensure_article_channels,
    heading,
    load_embedder,
    machine_info,
    machine_line,
    offline_identity,
    sets_parser,
    start_run,
    write_json,
)
from bench.data import FIT, HELD, load_sets
from raptor_engine.unfound import UNFOUND_CLOSENESS, UNFOUND_GAIN

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
    mixes: dict[str, dict[str, Tally]] = {OTHER_SET: {}, SAME_SET: {}}
    notes: list[Noted] = []
    log = UnfoundLog()
    with data_dir(args.data_dir, "bench-answers-") as directory, Stopwatch() as run:
        engine = observed_engine(directory, embedder, counter, log)
        built_with = offline_identity(engine, counter)
        with Stopwatch() as setup:
            keys = {data.name: ensure_article_channels(engine, data.articles, built_with) for data in sets}
        questions, strays = answerable(sets, keys), off_topic(sets, keys)
        mixed_questions = {mix: mixed(sets, keys, mix) for mix in mixes}
        print(f"\n{len(keys)} sets, {sum(len(k) for k in keys.values())} channels (one tree per document) ready in "
              f"{setup.seconds:.1f} s; {len(questions)} answerable questions, {len(strays)} off-topic, mixed: "
              + ", ".join(f"{len(asked)} with a question of the {mix}" for mix, asked in mixed_questions.items()))
        if questions:
            warm_up(engine, questions[0])
        offline = CitationTally()
        asyncio.run(ask_all(engine, questions, answered, timed=True, log=log, notes=notes, citations=offline))
        cited = {"offline (extractive)": offline} | model_citations(directory, embedder, counter, questions)
        asyncio.run(ask_all(engine, strays, elsewhere, timed=False))
        for mix, asked in mixed_questions.items():
            asyncio.run(ask_all(engine, asked, mixes[mix], timed=False, log=log, notes=notes))
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
    print(heading("The unfound-words note (\"I found nothing about ...\")"))
    print(note_table(notes))
    print("before: every word the scope lists as missing is named; after: only those the meaning check keeps "
          "(raptor_engine/unfound.py). Answerable: share of the answered questions with a note (should be rare). "
          "Mixed: an answerable question followed in its channel by a question of another set, or of another "
          "document of the same set; share of the answered ones whose note names a word of the second question. "
          "Fit half: documents at even positions; thresholds fitted on all mixed questions of the fit half together.")
    print(mixed_table(mixes))
    print("\n".join(fit_lines(notes)))
    print(heading("Citations, in the style of ALCE (every answerable question, its own channel)"))
    print(citation_table(cited))
    print("citation recall: sentences whose cited passages support them / all sentences; citation precision: "
          "citations not irrelevant (an irrelevant one alone does not support its sentence, and the others do "
          "without it) / all citations; judged by the bot's own lexical support measure at its default threshold "
          "(raptor_engine/answer_check.py), not an NLI model. The stand-in model answers with the first sentence "
          "of each of its first three sources, citing it (faithful) or the next source (citing wrongly).")
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
        "mixed": {mix: {name: tally_payload(tally) for name, tally in by_set.items()} for mix, by_set in mixes.items()},
        "note": {
            "shares": {half: {rule: asdict(note_shares([n for n in notes if n.half == half], rule))
                              for rule in ("before", "after")} for half in (FIT, HELD)},
            "fitted": list(fit_note(notes)[0]),
            "constants": [UNFOUND_CLOSENESS, UNFOUND_GAIN],
            "questions": [note_payload(note) for note in notes],
        },
        "citations": tallies_payload(cited),
        "targets": checked,
    })
    return 0


if __name__ == "__main__":
    sys.exit(main())
