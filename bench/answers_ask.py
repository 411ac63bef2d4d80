"""Asking ``bench.answers``'s questions and scoring the answers: the engines that answer
(the offline extractive answerer, observed for the unfound-words note, and the stand-in
model), timing, and the tallies per set.

Each answer's text is scored by content-word recall (``bench.measure``; citation marks like
``[2]`` removed first, a refusal scores 0); a refusal is an answer with ``found`` false, a
summary citation a citation of layer > 0. Each answerable question is also timed:
``retrieve`` (collapsed, engine defaults) and ``ask`` (``await Engine.answer``: retrieval
plus answer).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.answers_note import NOTE, Noted, UnfoundLog, noted
from bench.answers_questions import Asked
from bench.citations import CitationTally
from bench.common import Stopwatch, offline_engine
from bench.measure import content_words, word_recall
from raptor_engine import (
    Answer,
    Embedder,
    Engine,
    ExtractiveAnswerer,
    ExtractiveSummarizer,
    LLMAnswerer,
    LLMClient,
    TokenCounter,
)
from raptor_engine.llm import LLMSettings
from raptor_engine.store import ChromaStore
from testkit.openai_stub import running_stub

_CITATION_MARK = re.compile(r"\[\d+\]")
MODEL_MODES = {"stand-in model, faithful": "faithful", "stand-in model, citing wrongly": "miscite"}


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
        """How many questions were asked (each answer is timed once)."""
        return len(self.ask_s)

    def share(self, count: int) -> float:
        """``count`` as a share of the questions asked; NaN when none was."""
        return count / self.asked if self.asked else float("nan")


def answer_recall(gold: str, answer: Answer) -> float:
    """Content-word recall of an answer's text (its ``[n]`` marks removed); 0 for a refusal."""
    if not answer.found:
        return 0.0 if content_words(gold) else float("nan")
    return word_recall(gold, _CITATION_MARK.sub(" ", answer.text))


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
