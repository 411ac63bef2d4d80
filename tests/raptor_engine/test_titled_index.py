"""A source's title is among its leaves' words for BM25 where it tells sources apart.

Three handbooks say the same things with different figures; only the file name says
which team's is which. A question naming the team must find that team's passage by its
words, before any rebuild (fresh leaves) and after one (the served tree's index). In a
channel of one document the title is in every leaf and tells nothing: it stays out.
"""

from __future__ import annotations

import asyncio

import pytest

from raptor_engine import Document
from raptor_engine.lexical import count_terms
from raptor_engine.search_indexes import ChannelIndexes
from raptor_engine.store import ChromaStore
from raptor_engine.store.leaves import leaf_id
from raptor_engine.types import ChannelKey
from tests.conftest import make_engine

TEAMS = {"kestrel": 3, "osprey": 5, "heron": 7}


def handbook(months: int) -> str:
    return (f"New staff get their laptop on the first day. The probation period lasts {months} months. "
            "Reviews happen with the team lead every quarter.")


@pytest.mark.parametrize("built", [False, True], ids=["before-any-build", "after-a-build"])
def test_a_question_naming_a_document_by_its_title_finds_its_passage_by_words(store, embedder, channel, built) -> None:  # type: ignore[no-untyped-def]
    engine = make_engine(store, embedder)
    sources = {team: engine.ingest(channel, Document(handbook(months), f"{team} handbook.md")).source
               for team, months in TEAMS.items()}
    if built:
        asyncio.run(engine.rebuild(channel))
    one = store.channel(channel)
    state = one.live_state()
    pending = [] if built else list(sources.values())
    lexical = ChannelIndexes().for_question(channel, one, state, pending, engine._leaf_profile).lexical
    assert lexical is not None
    for team, source in sources.items():
        [(best, _)] = lexical.top(f"How long is the {team} probation?", 1)
        assert best == leaf_id(source.id, 0), team


def test_a_one_document_tree_indexes_no_title_words(store: ChromaStore, embedder, channel: ChannelKey) -> None:  # type: ignore[no-untyped-def]
    engine = make_engine(store, embedder)
    engine.ingest(channel, Document(handbook(3), "kestrel handbook.md"))
    asyncio.run(engine.rebuild(channel))
    one = store.channel(channel)
    state = one.live_state()
    assert state is not None
    assert ChannelIndexes().tree(channel, one, state).lexical.frequencies(["kestrel", "probation"])[0] == 0

    engine.ingest(channel, Document(handbook(5), "osprey handbook.md"))
    asyncio.run(engine.rebuild(channel))
    state = one.live_state()
    assert state is not None
    assert ChannelIndexes().tree(channel, one, state).lexical.frequencies(["kestrel"]) == [1]


def test_a_title_counts_as_if_it_stood_before_its_text_and_own_words_leave_it_out() -> None:
    ids, texts, titles = ["a", "b", "c"], ["the pump leaks", "valve torque", "pump pump gasket"], ["Pump manual.md", "", "Valve log"]
    counted = count_terms(ids, texts, titles)
    as_one = count_terms(ids, ["Pump manual.md\nthe pump leaks", "valve torque", "Valve log\npump pump gasket"])
    assert counted.vocabulary == as_one.vocabulary
    assert (counted.counts != as_one.counts).nnz == 0  # the same numbers, column for column
    word_of = {column: word for word, column in counted.vocabulary.items()}
    assert [sorted(word_of[c] for c in counted.own[row].indices) for row in range(3)] == [
        ["leaks", "pump"], ["torque", "valve"], ["gasket", "pump"]]
    untitled = count_terms(ids, texts)
    assert untitled.own is untitled.counts
