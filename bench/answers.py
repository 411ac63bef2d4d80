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
  channels; the patent question is generic, so it is not used off topic);
- **the unfound-words note** ("I found nothing about …", see
  ``raptor_engine/unfound.py``): the share of answered answerable questions
  whose answer carries it (it should be rare), and, the other way round, of
  answered *mixed* questions: each answerable question followed, in its own
  channel, by a QuALITY or review question of another set ("… And how do
  guests rate the cleanliness of Marquesa Hotel?": a clearly absent topic) or
  of another document of the same set (another story, another hotel: a
  neighbouring one), whose answer should name a word of that second question.
  (A second question that happens to fit the channel too, "What can we infer
  from the longest dialogue in the story?", counts against the check: the
  figures are a floor.) A whole question is appended rather than one
  word: the scope only lists missing words when they are at least a third of
  the question's content words, so one word added to a long question is never
  listed, with or without the meaning check. Each share is given *before* the
  check (every word the scope lists is named, the old behaviour) and *after*
  it, on the fit half of each set (documents at even positions, where the
  check's thresholds are fitted) and on the other half (odd positions). The
  thresholds that would be best on this run's fit half (the most mixed answers
  naming a word of the second question with the note on at most
  :data:`NOTE_RARE` of the answerable answers; see :func:`fit_note`) are
  printed with their figures on both halves, beside the module's constants.

- **citations** (``bench.citations``): citation recall and precision in the
  style of ALCE, and the share of quotes verified, for the offline answerer and
  for the stand-in model answering from its sources, faithfully and citing
  wrongly.

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
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from bench.citations import CitationTally, citation_table, tallies_payload
from bench.common import (
    Stopwatch,
    data_dir,
    ensure_article_channels,
    heading,
    latency_summary,
    load_embedder,
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
from bench.data import DataSet, load_sets
from bench.measure import content_words, mean_interval, word_recall
from raptor_engine import (
    Answer,
    ChannelKey,
    Embedder,
    Engine,
    ExtractiveAnswerer,
    ExtractiveSummarizer,
    LLMAnswerer,
    LLMClient,
    TokenCounter,
)
from raptor_engine.lexical import terms
from raptor_engine.llm import LLMSettings
from raptor_engine.store import ChromaStore
from raptor_engine.unfound import UNFOUND_CLOSENESS, UNFOUND_GAIN, Judged
from testkit.openai_stub import running_stub

TARGET_SUMMARY_CITED = 0.90  # patent answers citing a summary node, at least
TARGET_ANSWERABLE_REFUSED = 0.02  # at most
TARGET_OFF_TOPIC_REFUSED = 0.90  # at least
OFF_TOPIC_POOLS = ("quality", "reviews")  # sets whose questions are specific enough to be off topic elsewhere
FIT, HELD = "fit half", "other half"  # documents at even / odd positions of each set, as in bench.retrieval
OTHER_SET, SAME_SET = "other set", "same set"  # where a mixed question's second question comes from
NOTE = "I found nothing about"
# The thresholds tried when fitting the note's check (closeness, gain); inf: that test never names.
CLOSENESS_GRID = tuple(round(0.10 + 0.01 * i, 2) for i in range(51))  # 0.10 … 0.60
GAIN_GRID = (*(round(0.02 * i, 2) for i in range(21)), math.inf)  # 0.00 … 0.40, never
NOTE_RARE = 0.05  # the fit keeps the note on at most this share of answerable answers (it should be rare)
_CITATION_MARK = re.compile(r"\[\d+\]")


@dataclass(frozen=True, slots=True)
class Asked:
    """A question as sent: its set, the channel asked in, its text and gold answer; the half
    of its set its document is in (:data:`FIT` or :data:`HELD`); for a mixed question, how
    it was mixed (``mix``: :data:`OTHER_SET` or :data:`SAME_SET`) and the question
    ``appended`` to the answerable one (both empty otherwise)."""

    set_name: str
    key: ChannelKey
    text: str
    gold: str
    half: str = FIT
    mix: str = ""
    appended: str = ""


@dataclass(frozen=True, slots=True)
class Noted:
    """How the unfound-words note went on one answered question.

    ``mix`` is how the question was mixed (empty for an answerable question);
    ``judged`` the judgement of every word the scope listed as missing (empty: no
    note, before or after the meaning check); ``appended`` marks, word for word, those
    that come from a mixed question's second question only; ``shown`` whether the
    answer carries the note.
    """

    set_name: str
    half: str
    mix: str
    text: str
    judged: tuple[Judged, ...]
    appended: tuple[bool, ...]
    shown: bool

    def named_at(self, closeness: float, gain: float) -> list[bool]:
        """Per judged word, whether it would be named at these thresholds (see ``unfound.judge``)."""
        return [item.closeness is None or item.closeness < closeness
                or (item.without is not None and item.without - item.closeness > gain) for item in self.judged]


class UnfoundLog:
    """The answerer's ``on_unfound`` observer: keeps the judgement of the last answer."""

    def __init__(self) -> None:
        self.last: tuple[Judged, ...] = ()

    def __call__(self, question: str, judged: tuple[Judged, ...]) -> None:
        self.last = judged


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
    """Every question of every set, in its own document's channel, with its document's half."""
    return [Asked(data.name, keys[data.name][a.index], q.text, q.gold, FIT if position % 2 == 0 else HELD)
            for data in sets for position, a in enumerate(data.articles) for q in a.questions]


def mixed(sets: Sequence[DataSet], keys: dict[str, dict[int, ChannelKey]], mix: str) -> list[Asked]:
    """Each answerable question followed by a QuALITY or review question that its channel
    does not hold, asked in that channel (its gold kept): "<question> And <other question>",
    the other's first letter lower-cased.

    With ``mix`` :data:`OTHER_SET` the second question comes from another set (a clearly
    absent topic); with :data:`SAME_SET` from another document of the same set (a
    neighbouring one: another story, another hotel), for QuALITY and review channels
    only. The second questions are taken in turn: the other sets alternate, and each
    pool's questions are taken in order, so every set and document gets its share.
    """
    pools = {data.name: [(a.index, q.text) for a in data.articles for q in a.questions]
             for data in sets if data.name in OFF_TOPIC_POOLS}
    taken = dict.fromkeys(pools, 0)
    asked: list[Asked] = []
    for turn, question in enumerate(answerable(sets, keys)):
        if mix == SAME_SET:
            others = [question.set_name] if question.set_name in pools else []
        else:
            others = [name for name in pools if name != question.set_name and pools[name]]
        if not others:
            continue
        name = others[turn % len(others)]
        pool = [text for index, text in pools[name] if keys[name][index] != question.key]
        if not pool:
            continue
        other = pool[taken[name] % len(pool)]
        taken[name] += 1
        text = f"{question.text.rstrip()} And {other[:1].lower()}{other[1:]}"
        asked.append(replace(question, text=text, mix=mix, appended=other))
    return asked


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


async def ask_all(
    engine: Engine,
    questions: Sequence[Asked],
    tallies: dict[str, Tally],
    timed: bool,
    log: UnfoundLog | None = None,
    notes: list[Noted] | None = None,
    citations: CitationTally | None = None,
) -> None:
    """Asks every question (one event loop), adding to the tally of its set; with ``timed``
    also times a separate ``retrieve`` of the same question. With ``log`` (the observer of
    ``engine``'s answerer) and ``notes``, adds how the note went on each answered question;
    with ``citations``, how each answer cites (``bench.citations``)."""
    for asked in questions:
        tally = tallies.setdefault(asked.set_name, Tally())
        if timed:
            with Stopwatch() as watch:
                engine.retrieve(asked.key, asked.text)
            tally.retrieve_s.append(watch.seconds)
        if log is not None:
            log.last = ()
        with Stopwatch() as watch:
            answer = await engine.answer(asked.key, asked.text)
        tally.ask_s.append(watch.seconds)
        tally.refused += int(not answer.found)
        tally.summary_cited += int(any(citation.layer > 0 for citation in answer.citations))
        tally.recall.append(answer_recall(asked.gold, answer))
        if citations is not None:
            citations.add(answer)
        if log is not None and notes is not None and answer.found:
            notes.append(noted(asked, log.last, NOTE in answer.text))


MODEL_MODES = {"stand-in model, faithful": "faithful", "stand-in model, citing wrongly": "miscite"}


def model_citations(directory: Path, embedder: Embedder, counter: TokenCounter,
                    questions: Sequence[Asked]) -> dict[str, CitationTally]:
    """How the stand-in model's answers cite, faithful and citing wrongly (see ``bench.citations``):
    the same trees and questions, answered through the real ``openai`` client."""
    tallies: dict[str, CitationTally] = {}
    with running_stub() as stub:
        settings = LLMSettings(base_url=stub.base_url, model="stub-model", max_retries=1, backoff_base_s=0.01)
        with LLMClient(settings) as client:
            engine = Engine(ChromaStore.embedded(directory / "chroma"), embedder, counter,
                            ExtractiveSummarizer(counter), LLMAnswerer(client, settings))
            for name, mode in MODEL_MODES.items():
                stub.answer_from_sources = mode
                tally = tallies[name] = CitationTally()
                asyncio.run(ask_all(engine, questions, {}, timed=False, citations=tally))
    return tallies


def noted(asked: Asked, judged: tuple[Judged, ...], shown: bool) -> Noted:
    """The note's record of one answered question; a judged word comes from the appended
    question when that question uses it and the first part does not."""
    first = set(terms(asked.text[: len(asked.text) - len(asked.appended)])) if asked.appended else set()
    second = set(terms(asked.appended))
    flags = tuple(item.word in second and item.word not in first for item in judged)
    return Noted(asked.set_name, asked.half, asked.mix, asked.text, judged, flags, shown)


def observed_engine(directory: Path, embedder: Embedder, counter: TokenCounter, log: UnfoundLog) -> Engine:
    """:func:`bench.common.offline_engine` on ``directory``, its answerer telling ``log`` how
    the unfound words of each partial answer were judged."""
    plain = offline_engine(directory, embedder, counter)
    summarizer = ExtractiveSummarizer(counter, plain.settings.summary_tokens)
    answerer = ExtractiveAnswerer(embedder, on_unfound=log)
    return Engine(plain.store, embedder, counter, summarizer, answerer, plain.settings)


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


@dataclass(frozen=True, slots=True)
class NoteShares:
    """The note on a group of answered questions under one rule: the share of answerable
    answers carrying it and of mixed answers naming a word of their second question."""

    answerable: int
    answerable_noted: float
    mixed: int
    mixed_named: float

    @property
    def margin(self) -> float:
        """Mixed answers naming what is missing, less false notes."""
        return self.mixed_named - self.answerable_noted


def note_shares(notes: Sequence[Noted], named: str | tuple[float, float]) -> NoteShares:
    """The note's shares on ``notes`` when words are named ``named``: "before" (every word
    the scope listed), "after" (as this run's answerer named them) or at the thresholds
    (closeness, gain)."""

    def words(note: Noted) -> list[bool]:
        if named == "before":
            return [True] * len(note.judged)
        if named == "after":
            return [item.named for item in note.judged]
        assert isinstance(named, tuple)
        return note.named_at(*named)

    plain = [note for note in notes if not note.mix]
    mixes = [note for note in notes if note.mix]
    noted = sum(1 for note in plain if any(words(note)))
    hit = sum(1 for note in mixes if any(w and a for w, a in zip(words(note), note.appended)))
    return NoteShares(len(plain), noted / len(plain) if plain else math.nan,
                      len(mixes), hit / len(mixes) if mixes else math.nan)


def fit_note(notes: Sequence[Noted]) -> tuple[tuple[float, float], list[tuple[float, float]]]:
    """The thresholds (closeness, gain) of :data:`CLOSENESS_GRID` x :data:`GAIN_GRID` fitted on
    the fit half, and every pair that ties with them.

    The most mixed answers naming a word of their second question, among the pairs that
    leave the note on at most :data:`NOTE_RARE` of the answerable answers (the best
    :attr:`NoteShares.margin` when none does). Ties go to the fewest notes on answerable
    questions, then to the lowest gain and the lowest closeness: where the fit half cannot
    tell, the gain test names a neighbouring topic rather than stay silent.
    """
    fit = [note for note in notes if note.half == FIT]
    scored = [(note_shares(fit, (c, g)), (c, g)) for c in CLOSENESS_GRID for g in GAIN_GRID]
    usable = [(shares, pair) for shares, pair in scored if not math.isnan(shares.margin)]
    if not usable:
        return (UNFOUND_CLOSENESS, UNFOUND_GAIN), []
    rare = [(shares, pair) for shares, pair in usable if shares.answerable_noted <= NOTE_RARE]
    if rare:
        top = max(shares.mixed_named for shares, _ in rare)
        tied = [(shares, pair) for shares, pair in rare if shares.mixed_named >= top - 1e-12]
    else:
        top = max(shares.margin for shares, _ in usable)
        tied = [(shares, pair) for shares, pair in usable if shares.margin >= top - 1e-12]
    chosen, pair = min(tied, key=lambda item: (item[0].answerable_noted, item[1][1], item[1][0]))
    return pair, [other for shares, other in tied if shares.answerable_noted == chosen.answerable_noted]


def _pct(share: float) -> str:
    return "-" if math.isnan(share) else f"{100 * share:.1f} %"


def note_table(notes: Sequence[Noted]) -> str:
    """Per set and half (and all sets per half): the share of answerable answers with the note,
    and of each kind of mixed answers naming a word of their second question; before and
    after the meaning check (each as "before -> after")."""
    rows = []
    groups = [*dict.fromkeys(note.set_name for note in notes), "all"]
    for name in groups:
        for half in (FIT, HELD):
            group = [n for n in notes if n.half == half and name in ("all", n.set_name)]
            row: list[object] = [name, half]
            for mix in (OTHER_SET, SAME_SET):
                kind = [n for n in group if n.mix in ("", mix)]
                before, after = note_shares(kind, "before"), note_shares(kind, "after")
                if mix == OTHER_SET:
                    row += [before.answerable, f"{_pct(before.answerable_noted)} -> {_pct(after.answerable_noted)}"]
                row += [before.mixed, f"{_pct(before.mixed_named)} -> {_pct(after.mixed_named)}"]
            rows.append(row)
    headers = ["set", "half", "answerable answered", "with a note", f"mixed ({OTHER_SET}) answered",
               "naming the 2nd question", f"mixed ({SAME_SET}) answered", "naming the 2nd question"]
    return table(headers, rows)


def mixed_table(tallies: dict[str, dict[str, Tally]]) -> str:
    """Mixed questions asked and refused, per kind and set of the first question."""
    rows = [[mix, name, tally.asked, tally.refused, _pct(tally.share(tally.refused))]
            for mix, by_set in tallies.items() for name, tally in by_set.items()]
    return table(["mixed", "first question from", "asked", "refused", "share refused"], rows)


def fit_lines(notes: Sequence[Noted]) -> list[str]:
    """The fitted thresholds and the module's, each with its figures on both halves."""
    best, tied = fit_note(notes)
    lines = []
    for label, pair in (("module constants", (UNFOUND_CLOSENESS, UNFOUND_GAIN)), ("best on this fit half", best)):
        figures = "; ".join(
            f"{half}: answerable with note {_pct(s.answerable_noted)} of {s.answerable}, mixed naming the 2nd "
            f"question {_pct(s.mixed_named)} of {s.mixed}"
            for half in (FIT, HELD) for s in [note_shares([n for n in notes if n.half == half], pair)])
        lines.append(f"{label}: closeness {pair[0]}, gain {pair[1]} -> {figures}")
    if tied:
        closeness = sorted({c for c, _ in tied})
        gains = sorted({g for _, g in tied})
        lines.append(f"{len(tied)} pairs tie on the fit half: closeness {closeness[0]}-{closeness[-1]}, "
                     f"gain {gains[0]}-{gains[-1]}")
    return lines


def note_payload(note: Noted) -> dict[str, object]:
    return {"set": note.set_name, "half": note.half, "mix": note.mix, "question": note.text, "shown": note.shown,
            "words": [{"word": item.word, "clause": item.clause, "closeness": item.closeness,
                       "without": item.without, "named": item.named, "appended": flag}
                      for item, flag in zip(note.judged, note.appended)]}


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
