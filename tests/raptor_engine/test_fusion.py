"""Fusing the dense and BM25 rankings of a question's candidate leaves by their scores."""

from __future__ import annotations

import numpy as np
import pytest

from raptor_engine.fusion import DENSE_WEIGHT, fused_order, standardised


def test_a_passage_one_signal_puts_first_by_a_wide_margin_stays_first() -> None:
    """Dense search sets ``answer`` far above the rest; BM25 misses it (another spelling) and
    ranks the others evenly. Rank fusion put it behind every passage both signals ranked; the
    margin keeps it first."""
    ids = ["answer", *(f"other{i}" for i in range(10))]
    cosines = [0.80, *(0.50 - 0.01 * i for i in range(10))]
    lexical = {f"other{i}": 5.0 - 0.1 * i for i in range(10)}
    assert fused_order(ids, cosines, lexical)[0] == "answer"


def test_a_word_few_passages_hold_decides_the_order() -> None:
    """The question's rare word (a code) is in one of 40 candidates (retrieval's pool): its
    BM25 score stands far out of a flat spread, and outweighs the dense search's even
    preference for others; the passage dense search ranks halfway comes first."""
    ids = [f"p{i:02d}" for i in range(40)]
    cosines = [0.60 - 0.005 * i for i in range(40)]
    lexical = {node_id: 1.0 for node_id in ids} | {"p20": 12.0}
    assert fused_order(ids, cosines, lexical)[0] == "p20"


def test_bm25_that_does_not_separate_the_candidates_leaves_the_dense_order() -> None:
    ids = ["c", "a", "b"]
    assert fused_order(ids, [0.2, 0.9, 0.5], {"a": 3.0, "b": 3.0, "c": 3.0}) == ["a", "b", "c"]
    assert fused_order(ids, [0.2, 0.9, 0.5], {}) == ["a", "b", "c"]


def test_equal_values_are_ordered_by_id_and_nothing_gives_nothing() -> None:
    assert fused_order(["b", "a"], [0.5, 0.5], {}) == ["a", "b"]
    assert fused_order([], [], {}) == []


def test_standardised_values_have_no_unit() -> None:
    values = np.array([1.0, 2.0, 3.0, 6.0])
    assert standardised(values).mean() == pytest.approx(0.0)
    assert standardised(values).std() == pytest.approx(1.0)
    assert standardised(values * 100 + 7) == pytest.approx(standardised(values))
    assert standardised(np.array([4.0, 4.0])).tolist() == [0.0, 0.0]
    assert 0.5 < DENSE_WEIGHT < 1.0  # meaning leads; exact words still count
