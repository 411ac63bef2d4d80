"""Filling the token budget, judging a question's scope, and retrieval that follows it."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from raptor_engine import retrieval
from raptor_engine.budget import cost, fill_budget
from raptor_engine.engine import Engine
from raptor_engine.lexical import LexicalIndex, count_terms, joined
from raptor_engine.retrieval import OVERVIEW_GIST, THEME_EVIDENCE, THEME_EVIDENCE_FROM, Query, RetrievalSettings
from raptor_engine.scope import Scope, ScopeKind, assess, summary_map
from raptor_engine.types import ChannelKey, Document, Hit, Node
from tests.conftest import SAMPLE
from tests.raptor_engine.test_answering import LIGHTHOUSE


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


# -- the question's scope -------------------------------------------------------------

GARDEN_TEXTS = (
    ["l1", "l2", "l3"],
    [
        "The garden committee meets on the first Sunday of every month.",
        "Tomatoes are planted in May, after the last frost, and watered every second evening.",
        "The compost heap sits behind the shed; Margaret turns it every week.",
    ],
)
GARDEN = LexicalIndex(*GARDEN_TEXTS)


def test_a_question_about_the_material_itself_is_an_overview_and_always_answerable() -> None:
    scope = assess("What is this document about? Summarize its main points.", [0.12, 0.1, 0.09], GARDEN)
    assert scope.kind is ScopeKind.OVERVIEW and scope.breadth == 1.0 and scope.answerable
    assert scope.missing == ()


def test_a_detail_is_narrow_and_a_theme_broad() -> None:
    detail = assess("When are tomatoes planted?", [0.7, 0.3, 0.25, 0.2] + [0.1] * 20, GARDEN)
    assert detail.kind is ScopeKind.DETAIL and detail.breadth == 0.0 and detail.answerable
    theme = assess("What happens in the garden?", [0.6, 0.59, 0.58, 0.58, 0.57, 0.57, 0.56, 0.56, 0.56, 0.55], GARDEN)
    assert theme.kind is ScopeKind.THEME and theme.breadth > 0.5


def test_answerability_weighs_cosine_words_and_names() -> None:
    assert not assess("When are tomatoes planted?", [], GARDEN).answerable  # no material at all
    # Short questions score low even against the leaf that answers them: the channel's words rescue them.
    assert assess("Who turns the compost?", [0.22, 0.1], GARDEN).answerable
    assert not assess("What is the boiling point of liquid nitrogen?", [0.2, 0.1], GARDEN).answerable
    # A name the channel never mentions is another topic, however close the meaning.
    assert not assess("When does Gertrude water the tomatoes?", [0.6, 0.3], GARDEN).answerable
    assert assess("When does Margaret turn the compost?", [0.6, 0.3], GARDEN).answerable
    # Words of sources added since the build count too: they join the tree's index.
    fresh = joined([count_terms(*GARDEN_TEXTS), count_terms(["f1"], ["Gertrude waters on Fridays."])])
    assert assess("When does Gertrude water?", [0.6], LexicalIndex.of_counts(fresh)).answerable
    # With summaries, how near the question is to a source's centre counts as well.
    assert assess("Who turns the compost?", [0.22, 0.1], GARDEN, relatedness=0.3).answerable
    assert not assess("Who turns the compost?", [0.22, 0.1], GARDEN, relatedness=-0.05).answerable
    assert assess("What is this about?", [0.05], GARDEN, relatedness=-0.05).answerable  # an overview, always


def test_a_partial_question_lists_its_missing_words_by_stem() -> None:
    scope = assess("Who plants tomatoes and feeds the chickens?", [0.5, 0.2], GARDEN)
    assert scope.missing == ("feeds", "chickens")  # "plants" matches "planted"
    assert assess("Who plants the tomatoes?", [0.5, 0.2], GARDEN).missing == ()


def test_summary_map_finds_roots_ancestors_and_central_summaries() -> None:
    a1 = Node("a1", 1, "a one", 5, ("x.0", "x.1"), ("a2",), ("x",))
    a1b = Node("a1b", 1, "a two", 5, ("x.2",), ("a2",), ("x",))
    a2 = Node("a2", 2, "a root", 5, ("a1", "a1b"), ("top",), ("x",))
    b1 = Node("b1", 1, "b root", 5, ("y.0",), ("top",), ("y",))
    top = Node("top", 3, "channel", 5, ("a2", "b1"), (), ("x", "y"))
    vectors = np.array([[1, 0, 0], [0.6, 0.8, 0], [0.9, 0.1, 0], [0, 0, 1], [0.5, 0, 0.5]], dtype=np.float32)
    summaries = summary_map([a1, a1b, a2, b1, top], vectors)
    assert summaries.tops == ("top", "a2", "b1")  # the channel's top, then each source's root
    leaf_x1 = Node("x.1", 0, "x leaf", 5, parents=("a1",), source_ids=("x",))
    assert summaries.ancestors([leaf_x1]) == ["a1", "a2", "top"]
    assert summaries.centrality["a2"] > summaries.centrality["a1b"]  # nearer its source's centre
    assert [hit.node.id for hit in summaries.hits(np.array([0, 0, 1.0]), ["b1", "nope"])] == ["b1"]
    assert summaries.centred == {"x", "y"}  # both sources have layer-1 summaries
    assert summaries.relatedness(np.array([0, 0, 1.0])) == pytest.approx(1.0)  # y's centre is b1


def test_collapsed_retrieval_follows_the_scope(engine: Engine, channel: ChannelKey) -> None:
    engine.ingest_file(channel, SAMPLE)
    asyncio.run(engine.rebuild(channel))
    settings = RetrievalSettings(budget=500)
    overview = engine.retrieve(channel, "What is this handbook about? Summarize its main points.", settings)
    summary_tokens = sum(h.node.tokens for h in overview if h.node.layer > 0)
    assert overview[0].node.layer > 0 and summary_tokens >= 0.5 * sum(h.node.tokens for h in overview)
    assert overview[0].node.id == engine.top_nodes(channel, 1)[0].id  # the root, a summary of the whole, first
    detail = engine.retrieve(channel, "What happens if a page is not acknowledged within ten minutes?", settings)
    assert all(h.node.layer == 0 for h in detail)
    assert "escalates" in " ".join(h.node.text for h in detail[:3]) or "secondary" in detail[0].node.text


OVERVIEW = "What is this handbook about? Summarize its main points."


def _leaf_ordinals(hits: list[Hit]) -> list[int]:
    return [hit.node.ordinal for hit in hits if hit.node.layer == 0]


def assert_gist_then_opening(hits: list[Hit], budget: int) -> None:
    """The hits are a gist within OVERVIEW_GIST tokens, then the document's first leaves not in
    it, in the document's order, all within ``budget``."""
    used = [sum(cost(hit.node) for hit in hits[: at + 1]) for at in range(len(hits))]
    gist = [hit for hit, total in zip(hits, used) if total <= OVERVIEW_GIST]
    opening = _leaf_ordinals(hits[len(gist):])
    assert opening and opening == sorted(opening), (opening, _leaf_ordinals(gist))
    first_not_in_gist = min(set(range(max(opening) + 1)) - set(_leaf_ordinals(gist)))
    assert opening[0] == first_not_in_gist, (opening, _leaf_ordinals(gist))
    assert used[-1] <= budget


def test_an_overview_of_one_document_adds_its_opening_after_the_gist(engine: Engine, channel: ChannelKey) -> None:
    engine.ingest_file(channel, SAMPLE)
    asyncio.run(engine.rebuild(channel))
    hits = engine.retrieve(channel, OVERVIEW, RetrievalSettings(budget=1100))
    assert hits[0].node.id == engine.top_nodes(channel, 1)[0].id  # the gist still leads: the root first
    assert_gist_then_opening(hits, 1100)
    assert {0, 1} <= set(_leaf_ordinals(hits))  # the title and the handbook's own account of itself


def test_an_overview_within_the_gist_budget_is_coverage_alone(engine: Engine, channel: ChannelKey,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    engine.ingest_file(channel, SAMPLE)
    asyncio.run(engine.rebuild(channel))
    settings = RetrievalSettings(budget=OVERVIEW_GIST)
    with_opening = engine.retrieve(channel, OVERVIEW, settings)
    monkeypatch.setattr(retrieval, "OVERVIEW_GIST", 10**6)
    assert [h.node.id for h in engine.retrieve(channel, OVERVIEW, settings)] == [h.node.id for h in with_opening]


def test_a_fresh_document_gives_its_opening_before_any_build(engine: Engine, channel: ChannelKey) -> None:
    engine.ingest_file(channel, SAMPLE)  # no rebuild: its leaves are fresh, searched from the leaf cache
    assert_gist_then_opening(engine.retrieve(channel, OVERVIEW, RetrievalSettings(budget=1100)), 1100)


def test_an_overview_has_a_subject_only_in_a_channel_holding_one_document(
    engine: Engine, channel: ChannelKey
) -> None:
    """The handbook alone: its opening follows the gist. With a second document beside it, an
    overview is of both: each one's root, no opening (the handbook still holds most leaves)."""
    engine.ingest_file(channel, SAMPLE)
    asyncio.run(engine.rebuild(channel))
    wide = RetrievalSettings(budget=1100)
    assert_gist_then_opening(engine.retrieve(channel, OVERVIEW, wide), 1100)
    engine.ingest(channel, Document(LIGHTHOUSE, "Keepers' manual"))
    asyncio.run(engine.rebuild(channel))
    both = engine.retrieve(channel, OVERVIEW, wide)
    assert len({hit.node.source_ids[0] for hit in both if hit.node.layer > 0 and len(hit.node.source_ids) == 1}) == 2

    def leaf(source: str, n: int) -> Hit:
        return Hit(Node(f"{source}.{n}", 0, "text", 10, source_ids=(source,), ordinal=n), 0.5)

    one = summary_map([Node("s1", 1, "a summary", 5, children=("a.0",), source_ids=("a",))], np.ones((1, 3)))
    assert retrieval._subject([leaf("a", n) for n in range(10)], one) == "a"
    assert retrieval._subject([*(leaf("a", n) for n in range(9)), leaf("b", 0)], one) is None
    two = summary_map([Node("s1", 1, "x", 5, children=("a.0",), source_ids=("a",)),
                       Node("s2", 1, "y", 5, children=("b.0",), source_ids=("b",))], np.eye(2, 3))
    assert retrieval._subject([leaf("a", n) for n in range(10)], two) is None  # b has summaries: not one document
    assert retrieval._subject([], one) is None


def test_a_theme_keeps_its_best_ranked_leaves_before_coverage() -> None:
    """Coverage alone never takes the best-ranked leaf here: it holds two words of its own,
    where each other leaf adds five. A theme at THEME_EVIDENCE_FROM tokens or more keeps the
    best-ranked leaves within THEME_EVIDENCE of the budget (the fact asked for, should the
    question want a detail after all), then covers with the rest; below it, coverage alone."""
    answer = hit("answer", "stephen curry", 50, score=0.9)
    others = [hit(f"o{i}", f"nba game w{i}a w{i}b w{i}c w{i}d w{i}e", 50, score=0.5) for i in range(30)]
    ranked = [answer, *others]
    theme = Scope(breadth=0.6, kind=ScopeKind.THEME, answerable=True)
    query = Query("what is the record for the most 3 pointers in one game", np.ones(3))
    lexical = LexicalIndex([h.node.id for h in ranked], [h.node.text for h in ranked])
    empty = summary_map([], np.zeros((0, 3)))

    def chosen(budget: int) -> list[str]:
        settings = RetrievalSettings(budget=budget)
        return [h.node.id for h in retrieval._theme(query, settings, theme, ranked, empty, lexical)]

    wide = chosen(THEME_EVIDENCE_FROM)
    kept = round(THEME_EVIDENCE * THEME_EVIDENCE_FROM) // 50
    assert wide[:kept] == [h.node.id for h in ranked[:kept]] and len(wide) == THEME_EVIDENCE_FROM // 50
    covered = [h.node.id for h in retrieval._covering(query, RetrievalSettings(budget=THEME_EVIDENCE_FROM), theme,
                                                      ranked, empty, lexical)]
    assert "answer" not in covered  # what the evidence is for
    assert chosen(THEME_EVIDENCE_FROM - 1) == [h.node.id for h in retrieval._covering(
        query, RetrievalSettings(budget=THEME_EVIDENCE_FROM - 1), theme, ranked, empty, lexical)]


def test_coverage_takes_no_repeat_and_counts_the_candidates_own_words_without_an_index() -> None:
    """Coverage takes the candidate adding the most uncovered words first, never a repeat of
    what it holds; with no index of the channel (nothing indexed yet), it counts the
    candidates' own words and, with no material to weigh words by, chooses as with an index."""
    ranked = [hit("a", "pump valve pressure", 50), hit("b", "pump valve pressure", 50),
              hit("c", "gasket seal flange torque", 50), hit("d", "pump", 50)]
    scope = Scope(breadth=0.0, kind=ScopeKind.THEME, answerable=True)
    query = Query("what about the pump?", np.ones(3))
    empty = summary_map([], np.zeros((0, 3)))
    settings = RetrievalSettings(budget=1000)
    lexical = LexicalIndex([h.node.id for h in ranked], [h.node.text for h in ranked])
    indexed = [h.node.id for h in retrieval._covering(query, settings, scope, ranked, empty, lexical)]
    # a's words are those most candidates share; b repeats a and d adds nothing new: neither spends budget.
    assert indexed == ["a", "c"]
    assert [h.node.id for h in retrieval._covering(query, settings, scope, ranked, empty, None)] == indexed


def test_the_distinct_words_of_the_candidates_are_what_a_sort_finds() -> None:
    """Coverage marks its candidates' words in an array as wide as the index instead of sorting
    them (and sorts a sparse few of a wide index): the same words, each at the same place."""
    rng = np.random.default_rng(5)
    for width, count in ((40, 300), (20_000, 10_000), (20_000, 30), (1, 4)):
        values = rng.integers(0, width, count).astype(np.int32)
        held, places = retrieval._distinct(values, width)
        expected_held, expected_places = np.unique(values, return_inverse=True)
        assert held.tolist() == expected_held.tolist() and places.tolist() == expected_places.tolist()
    index = LexicalIndex(["a", "b"], ["pump valve", "valve gasket torque"])
    assert index.width == 4 and all(column < index.width for column in index.columns_of("pump gasket torque valve"))
