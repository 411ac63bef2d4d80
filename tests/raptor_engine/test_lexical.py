"""The BM25 index used by hybrid retrieval."""

from __future__ import annotations

import numpy as np
import pytest

from raptor_engine.lexical import LexicalIndex, count_terms, joined


def test_rare_terms_rank_first_and_stop_words_score_nothing() -> None:
    index = LexicalIndex(
        ["a", "b", "c"],
        ["The cat sat on the mat.", "Dogs chase cars; ticket ACME-1234 is open.", "A cat and a dog."],
    )
    assert [node_id for node_id, _ in index.top("acme 1234", 5)] == ["b"]
    assert [node_id for node_id, _ in index.top("cat", 5)] == ["c", "a"]  # the shorter text first
    assert index.top("the and of", 5) == []
    assert index.top("unknown words", 5) == []
    assert len(index.top("cat dog", 1)) == 1


def test_texts_without_indexable_words_give_an_empty_index() -> None:
    assert LexicalIndex([], []).top("anything", 3) == []
    assert LexicalIndex(["x"], ["the and of"]).top("the", 3) == []


def test_scores_are_positive_and_descending() -> None:
    index = LexicalIndex([str(i) for i in range(4)], ["apple " * (i + 1) + "pear" for i in range(4)])
    scores = [score for _, score in index.top("apple", 4)]
    assert all(score > 0 for score in scores) and scores == sorted(scores, reverse=True)


def test_equal_scores_rank_by_id_whatever_order_the_texts_were_read_in() -> None:
    """A tree read from Chroma and the same tree taken from memory list their nodes in other
    orders; the same question must rank them the same."""
    texts = {"n.3": "the lamp is lit", "n.1": "the lamp is lit", "n.2": "a lamp burns all night long here"}
    forward = LexicalIndex(list(texts), list(texts.values()))
    backward = LexicalIndex(list(reversed(texts)), list(reversed(texts.values())))
    assert [i for i, _ in forward.top("lamp", 3)] == [i for i, _ in backward.top("lamp", 3)] == ["n.1", "n.3", "n.2"]


def test_a_texts_columns_are_its_indexed_words_in_order_and_frequencies_go_by_stem() -> None:
    index = LexicalIndex(["a", "b", "c"], ["the pump checks pressure", "checking the valve", "a valve check"])
    word_of = {column: word for word, column in index._vocabulary.items()}
    text = "Pressure of the pump, checked: unknownword pressure valve"
    columns = index.columns_of(text)
    assert [word_of[column] for column in columns] == ["pressure", "pump", "valve"]  # distinct, in order
    assert index.columns_of(text) is columns  # kept for the next question
    words = ["checks", "valve", "pump"]
    assert index.stem_frequencies(np.asarray([index._vocabulary[w] for w in words])).tolist() == [1, 2, 1]
    assert index.frequencies(words) == [1, 2, 1]


def test_a_nodes_columns_are_read_off_its_row_without_its_title() -> None:
    ids, texts = ["a", "b"], ["Pressure of the pump, checked: pressure valve", "checking the gasket"]
    index = LexicalIndex.of_counts(count_terms(ids, texts, ["Pump handbook", "Valve notes"]))
    for node_id, text in zip(ids, texts):
        assert sorted(index.columns_of_node(node_id, text).tolist()) == sorted(index.columns_of(text).tolist())
    # Across joined counts too (a tree and a fresh source), and for a text the index does not hold.
    both = LexicalIndex.of_counts(joined([count_terms(ids, texts, ["Pump handbook", "Valve notes"]),
                                          count_terms(["f"], ["new torque figures"], ["Torque.md"])]))
    for node_id, text in [*zip(ids, texts), ("f", "new torque figures"), ("unknown", "pump torque")]:
        assert sorted(both.columns_of_node(node_id, text).tolist()) == sorted(both.columns_of(text).tolist())


def test_scores_are_the_bm25_sum_over_the_query_words() -> None:
    """Read straight off the term rows, each text's score is its words' saturated counts times
    their IDF, added up: the product of the query's rows of the index with their IDF."""
    rng = np.random.default_rng(7)
    words = [f"w{i}" for i in range(40)]
    texts = [" ".join(rng.choice(words, size=int(rng.integers(3, 30)))) for _ in range(60)]
    index = LexicalIndex([f"t{i:02d}" for i in range(60)], texts)
    for query in ("w1 w2 w3", "w39", "w5 w5 w7 w11 w13 w17 w19 w23", "w0 nothing"):
        columns = index._columns(query)
        expected = np.asarray(index._weights[columns].T @ index._idf[columns]).ravel()
        assert np.allclose(index._scores(columns), expected, rtol=1e-12, atol=0)
        ranked = index.top(query, 60)
        assert [score for _, score in ranked] == pytest.approx(sorted(expected[expected > 0], reverse=True), rel=1e-12)
