"""The meaning check of the unfound-words note: clauses, and judging on the real model."""

from __future__ import annotations

import numpy as np

from raptor_engine.unfound import clause_of, clauses, judge, leave_out


def test_a_question_is_cut_into_clauses_and_a_bare_fragment_joins_the_next() -> None:
    assert clauses("Who checks the lens rotation and feeds the parrot?") == [
        "Who checks the lens rotation", "feeds the parrot"]
    # "How would you compare" names no topic: it is judged with what it compares.
    assert clauses("How would you compare and contrast the assessments of Hillary and Chelsea?") == [
        "How would you compare contrast the assessments of Hillary Chelsea"]
    assert clauses("Why did Korvin leave? And how do guests rate the cleanliness of the hotel?") == [
        "Why did Korvin leave", "how do guests rate the cleanliness of the hotel"]
    assert clause_of("Who checks the lens rotation and feeds the parrot?", "parrot") == "feeds the parrot"
    assert clause_of("Who checks the lens?", "parrot") == "Who checks the lens?"  # not in any: the question


def test_leave_out_drops_whole_words_in_any_case() -> None:
    assert leave_out("What is the Parental leave policy", ["parental", "leave"]) == "What is the policy"
    assert leave_out("Who leaves?", ["leave"]) == "Who leaves?"


def test_without_evidence_every_word_is_named_unjudged(embedder) -> None:  # type: ignore[no-untyped-def]
    judged = judge(embedder, "Who feeds the parrot?", ["feeds", "parrot"], np.zeros((0, 0), dtype=np.float32))
    assert [(item.word, item.named, item.closeness) for item in judged] == [("feeds", True, None), ("parrot", True, None)]
    assert judge(embedder, "Who checks the lens?", [], embedder.embed(["The keeper checks the lens."])) == ()


def test_a_clause_far_from_the_evidence_is_named_and_a_paraphrase_is_not(embedder) -> None:  # type: ignore[no-untyped-def]
    evidence = embedder.embed([
        "The night keeper checks the lens rotation every hour and writes the time in the logbook.",
        "If a page is not acknowledged within ten minutes, it escalates automatically to the secondary on-call.",
    ])
    question = "Who checks the lens rotation and feeds the parrot?"
    named = {item.word: item.named for item in judge(embedder, question, ["feeds", "parrot"], evidence)}
    assert named == {"feeds": True, "parrot": True}
    question = "What happens when the on-call engineer cannot be reached?"
    [reached] = judge(embedder, question, ["reached"], evidence)
    assert not reached.named and reached.clause == "What happens when the on-call engineer cannot be reached"
