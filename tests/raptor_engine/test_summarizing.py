"""Tests of raptor_engine.summarizing (the offline coverage summariser) with the real packaged tokenizer.

The old selector (sentences closest to the TF-IDF centroid) is kept in
``bench.summaries`` as the baseline; the comparisons below run both on the
same clusters.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import pytest

from bench.summaries import CentralitySummarizer, content_words, member_recall
from raptor_engine.chunking import chunk_text, sentences
from raptor_engine.protocols import TokenCounter
from raptor_engine.summarizing import DEFAULT_SUMMARY_TOKENS, ExtractiveSummarizer
from tests.conftest import SAMPLE

# Five members on five unrelated topics; the first is long and wordy, so its words dominate a centroid.
DISJOINT = [
    ("The payments ledger records every card transaction with its amount, currency and merchant. "
    "Reconciliation jobs compare the ledger with bank statements every night and flag mismatched transactions. "
    "A mismatched transaction opens a ticket for the ledger team, who check the bank statement and the card network report. "
    "Ledger corrections need two approvals and are written as new reversing transactions, never edits."),
    "Tomatoes need full sun.",
    "The violin has four strings.",
    "Glaciers carve deep valleys.",
    "Chess openings control the centre.",
]

# The centroid's point (the cafeteria's lunch hours) is repeated by four members;
# three other members each carry a point of their own.
REPEATED_POINT = [
    "The cafeteria serves lunch from noon until two. Lunch in the cafeteria is served between noon and two.",
    "Lunch is served in the cafeteria from noon to two o'clock. The cafeteria lunch runs from noon until two.",
    "From noon until two the cafeteria serves lunch. Cafeteria lunch hours are noon until two.",
    "The cafeteria lunch is from noon to two every weekday.",
    "Parking permits are renewed each January at the security desk.",
    "The fire alarm is tested on the first Monday of every month.",
    "Printers on the third floor need a badge to release jobs.",
]


def _summarise(counter: TokenCounter, texts: list[str], budget: int = DEFAULT_SUMMARY_TOKENS) -> str:
    return ExtractiveSummarizer(counter, budget).summarize_now(texts)


def _handbook_chunks(counter: TokenCounter) -> list[str]:
    return [chunk.text for chunk in chunk_text(SAMPLE.read_text(encoding="utf-8"), "handbook", counter, 100)]


def _picked(summary: str, members: list[str]) -> list[int]:
    """The members with at least one sentence in ``summary``."""
    return [i for i, member in enumerate(members) if any(s in summary for s in sentences(member))]


def test_the_same_members_give_the_same_summary_byte_for_byte(counter: TokenCounter) -> None:
    chunks = _handbook_chunks(counter)
    first = _summarise(counter, chunks)
    assert first
    assert _summarise(counter, chunks) == first
    assert ExtractiveSummarizer(counter).summarize_now(list(chunks)) == first  # a fresh instance too
    assert asyncio.run(ExtractiveSummarizer(counter).summarize(chunks)) == first


@pytest.mark.parametrize("budget", [12, 40, 80, DEFAULT_SUMMARY_TOKENS, 300])
def test_the_summary_stays_within_the_token_budget(counter: TokenCounter, budget: int) -> None:
    summary = _summarise(counter, _handbook_chunks(counter), budget)
    assert summary
    assert counter.count(summary) <= budget


def test_the_sentences_keep_member_then_reading_order(counter: TokenCounter) -> None:
    chunks = _handbook_chunks(counter)
    summary = _summarise(counter, chunks)
    # Where each chosen sentence stands in the summary, taken in the members' reading order.
    positions = [summary.find(s) for chunk in chunks for s in sentences(chunk) if s in summary]
    assert len(positions) > 1 and positions == sorted(positions)


def test_every_member_is_covered_when_the_budget_allows_one_sentence_each(counter: TokenCounter) -> None:
    shortest = [min(counter.count_many(sentences(member))) for member in DISJOINT]
    budget = sum(shortest) + 10
    summary = _summarise(counter, DISJOINT, budget)
    assert _picked(summary, DISJOINT) == list(range(len(DISJOINT)))
    assert counter.count(summary) <= budget


def test_when_not_every_member_fits_the_better_sentences_win(counter: TokenCounter) -> None:
    strong = ["Refunds settle within three business days.", "Chargebacks freeze the merchant payout."]
    weak = [f"It was there and it was {word} as it is." for word in ("fine", "okay", "good", "nice", "calm")]
    # 20 tokens hold the two strong sentences (8 each), not one sentence of each of six members.
    summary = _summarise(counter, [" ".join(strong), *weak], 20)
    assert summary == " ".join(strong)


def test_a_summary_of_several_members_does_not_come_from_one(counter: TokenCounter) -> None:
    chunks = _handbook_chunks(counter)[:5]
    assert len(_picked(_summarise(counter, chunks), chunks)) >= 3


def test_no_sentence_repeats_even_nearly(counter: TokenCounter) -> None:
    members = [
        "The deploy window opens at noon on Tuesdays. Rollbacks need the on-call engineer.",
        "The deploy window opens at noon on Tuesdays! Hotfixes skip the queue.",
        "the deploy window opens at noon on tuesdays, as always. Staging mirrors production data nightly.",
        "Our deploy window opens at noon on Tuesdays.",
    ]
    summary = _summarise(counter, members)
    assert sum("deploy window" in s.lower() for s in sentences(summary)) == 1
    assert {"rollbacks", "hotfixes", "staging"} <= content_words(summary)


def test_it_covers_more_member_words_than_the_centrality_selector(counter: TokenCounter) -> None:
    budget = 60
    ours = _summarise(counter, REPEATED_POINT, budget)
    theirs = CentralitySummarizer(counter, budget).summarize_now(REPEATED_POINT)
    assert member_recall(ours, REPEATED_POINT)[0] > member_recall(theirs, REPEATED_POINT)[0]
    assert member_recall(ours, REPEATED_POINT)[1] > member_recall(theirs, REPEATED_POINT)[1]
    assert {"parking", "alarm", "printers"} <= content_words(ours)  # the distinct points
    assert not {"parking", "alarm", "printers"} & content_words(theirs)  # the centroid's point only


def test_empty_members_give_an_empty_summary(counter: TokenCounter) -> None:
    assert _summarise(counter, []) == ""
    assert _summarise(counter, ["", "  \n "]) == ""


def test_one_member_of_one_sentence_is_its_own_summary(counter: TokenCounter) -> None:
    assert _summarise(counter, ["Backups run every night at two."]) == "Backups run every night at two."


def test_a_member_without_sentence_punctuation_is_one_sentence(counter: TokenCounter) -> None:
    text = "standup notes alice fixed the export bob reviews the ledger patch carol is away"
    assert _summarise(counter, [text, "The build is green."]) == f"{text} The build is green."


def test_only_stop_words_still_give_a_summary(counter: TokenCounter) -> None:
    summary = _summarise(counter, ["It is what it is.", "And so on."])
    assert summary and set(sentences(summary)) <= {"It is what it is.", "And so on."}


def test_a_sentence_longer_than_the_budget_is_cut_at_a_word_boundary(counter: TokenCounter) -> None:
    sentence = " ".join(f"Reconciliation job number {i} compares the ledger with statement {i}," for i in range(12)) + " done."
    budget = 25
    summary = _summarise(counter, [sentence], budget)
    assert summary and counter.count(summary) <= budget
    assert sentence.startswith(summary) and sentence[len(summary)] == " "  # whole words only
    # Several such sentences: still one cut sentence, not nothing.
    two = _summarise(counter, [sentence, sentence.replace("ledger", "journal")], budget)
    assert two and counter.count(two) <= budget


def test_a_single_word_longer_than_the_budget_is_cut_at_characters(counter: TokenCounter) -> None:
    word = "https://example.com/" + "abcdefgh" * 20
    summary = _summarise(counter, [word], 5)
    assert summary and word.startswith(summary) and counter.count(summary) <= 5


def test_the_identity_names_the_new_selector_and_the_budget(counter: TokenCounter) -> None:
    identity = ExtractiveSummarizer(counter, 77).identity
    assert "77" in identity and identity != CentralitySummarizer(counter, 77).identity
    assert identity != ExtractiveSummarizer(counter, 78).identity


def test_a_whole_document_summary_has_three_times_the_budget(counter: TokenCounter) -> None:
    chunks = _handbook_chunks(counter)
    summarizer = ExtractiveSummarizer(counter, 60)
    part = summarizer.summarize_now(chunks)
    whole = asyncio.run(summarizer.summarize_whole(chunks))
    assert counter.count(part) <= 60 < counter.count(whole) <= 3 * 60
    assert member_recall(whole, chunks)[0] > member_recall(part, chunks)[0]
    assert whole == asyncio.run(summarizer.summarize_whole(chunks))  # deterministic too


def test_thirty_members_summarise_in_milliseconds(counter: TokenCounter) -> None:
    chunks = (_handbook_chunks(counter) * 5)[:30]
    chunks = [f"{chunk} Item {i} closes the section." for i, chunk in enumerate(chunks)]  # distinct members
    summarizer = ExtractiveSummarizer(counter)
    summarizer.summarize_now(chunks)  # first call pays imports and caches
    started = time.perf_counter()
    for _ in range(5):
        summarizer.summarize_now(chunks)
    # Typically ~15 ms; the bound is loose because the test machine is shared.
    assert (time.perf_counter() - started) / 5 < 0.5


class _CountingCounter:
    """The real counter, recording every text it is asked to count in a batch."""

    def __init__(self, inner: TokenCounter) -> None:
        self._inner = inner
        self.batched: list[str] = []

    def count(self, text: str) -> int:
        return self._inner.count(text)

    def count_many(self, texts: Sequence[str]) -> list[int]:
        self.batched.extend(texts)
        return self._inner.count_many(texts)


def test_a_member_read_again_is_not_split_and_counted_again(counter: TokenCounter) -> None:
    # A build summarises each leaf once per layer above it: a summariser counts a text's sentences once.
    chunks = _handbook_chunks(counter)
    counting = _CountingCounter(counter)
    summarizer = ExtractiveSummarizer(counting)
    first = summarizer.summarize_now(chunks[:6])
    counted = len(counting.batched)
    assert counted >= 6
    # A cluster above: the same leaves, and two more.
    above = summarizer.summarize_now(chunks[:8])
    new_sentences = {s for chunk in chunks[6:8] for s in sentences(chunk)}
    assert set(counting.batched[counted:]) == new_sentences
    assert summarizer.summarize_now(chunks[:6]) == first
    assert above == ExtractiveSummarizer(counter).summarize_now(chunks[:8])  # the same as from scratch
