"""Filling the token budget."""

from __future__ import annotations

from raptor_engine.retrieval import fill_budget
from raptor_engine.types import Hit, Node


def hit(node_id: str, text: str, tokens: int, layer: int = 0, score: float = 0.5) -> Hit:
    return Hit(Node(node_id, layer, text, tokens), score)


def test_skips_what_does_not_fit_and_keeps_filling() -> None:
    ranked = [hit("a", "A.", 60), hit("b", "B.", 50), hit("c", "C.", 30), hit("a", "A.", 60)]
    assert [h.node.id for h in fill_budget(ranked, 100, 10)] == ["a", "c"]
    assert [h.node.id for h in fill_budget(ranked, 1000, 2)] == ["a", "b"]


def test_a_summary_repeating_chosen_sentences_is_skipped_only_when_asked() -> None:
    leaf = hit("leaf", "One fact. Two fact.", 10)
    summary = hit("sum", "One fact. Two fact. Three fact.", 12, layer=1)
    other = hit("other", "Unrelated words here.", 5, layer=1)
    assert [h.node.id for h in fill_budget([leaf, summary, other], 100, 10, max_overlap=0.5)] == ["leaf", "other"]
    assert [h.node.id for h in fill_budget([leaf, summary, other], 100, 10)] == ["leaf", "sum", "other"]
    # Leaves are the evidence: never skipped for repeating a summary.
    assert [h.node.id for h in fill_budget([summary, leaf], 100, 10, max_overlap=0.5)] == ["sum", "leaf"]
