"""The offline answerer, end to end on the real model and embedded Chroma, and on hand-made hits."""

from __future__ import annotations

import asyncio

import pytest

from raptor_engine.answering import (
    NOT_FOUND,
    ExtractiveAnswerer,
    ExtractiveSettings,
    trim,
)
from raptor_engine.engine import Engine
from raptor_engine.scope import Scope, ScopeKind
from raptor_engine.types import ChannelKey, Document, Hit, Node
from tests.conftest import SAMPLE, RecordingEmbedder

LIGHTHOUSE = """Harbour Point Lighthouse: the keepers' manual.

The lighthouse stands on the northern cliff of Harbour Point, above the old fishing harbour. The tower \
is white with one red band, and its light can be seen eighteen miles out at sea. The spiral stair has \
132 steps from the ground floor to the lantern room.

The night keeper checks the lens rotation every hour and writes the time of each check in the logbook. \
The day keeper cleans the lens and polishes the brass fittings every morning before nine. If the lens \
stops turning, the keeper on duty starts the backup motor and radios the harbour master at once.

Diesel for the generator is delivered on the first Monday of each month; the tank must never fall \
below a quarter. The fog signal sounds twice every thirty seconds whenever visibility drops below two \
miles. A spare bulb and two fuses are kept in the steel cabinet beside the lantern.

Visitors may climb the tower on Saturdays between ten in the morning and four in the afternoon, in \
groups of at most eight. Children under twelve must hold an adult's hand on the stair. Nobody may \
enter the lantern room without a keeper, and the gallery door stays locked in strong wind."""


def ask(engine: Engine, channel: ChannelKey, question: str):  # type: ignore[no-untyped-def]
    return asyncio.run(engine.answer(channel, question))


@pytest.fixture
def lighthouse(engine: Engine, channel: ChannelKey) -> ChannelKey:
    engine.ingest(channel, Document(LIGHTHOUSE, "Keepers' manual"))
    asyncio.run(engine.rebuild(channel))
    return channel


def test_short_questions_about_a_one_page_manual_are_answered_from_the_right_sentence(
    engine: Engine, lighthouse: ChannelKey
) -> None:
    rotation = ask(engine, lighthouse, "Who checks the lens rotation?")
    assert rotation.found and "The night keeper checks the lens rotation every hour" in rotation.text
    stair = ask(engine, lighthouse, "How many steps does the stair have?")
    assert stair.found and "132 steps" in stair.text
    assert all(citation.layer == 0 for citation in rotation.citations + stair.citations)


def test_a_question_the_channel_holds_nothing_about_is_not_answered(engine: Engine, lighthouse: ChannelKey) -> None:
    for question in (
        "What do guests say about the breakfast at the Marquesa Hotel in Key West?",
        "Why did Korvin leave the Tr'en spaceship?",
    ):
        answer = ask(engine, lighthouse, question)
        assert not answer.found and answer.text == NOT_FOUND and answer.citations == ()


def test_a_partial_answer_names_what_it_did_not_find(engine: Engine, lighthouse: ChannelKey) -> None:
    answer = ask(engine, lighthouse, "Who checks the lens rotation and feeds the parrot?")
    assert answer.found and "night keeper checks the lens rotation" in answer.text
    assert answer.text.endswith("I found nothing about feeds, parrot.")
    complete = ask(engine, lighthouse, "Who checks the lens rotation?")
    assert "I found nothing" not in complete.text


def test_the_note_names_only_what_the_material_lacks_in_meaning(engine: Engine, channel: ChannelKey) -> None:
    engine.ingest_file(channel, SAMPLE)
    asyncio.run(engine.rebuild(channel))
    # The README's sample question: the handbook never says "reached", but an unacknowledged page escalates.
    reached = ask(engine, channel, "What happens when the on-call engineer cannot be reached?")
    assert reached.found and "escalates automatically to the secondary on-call" in reached.text
    assert "I found nothing about" not in reached.text
    # The handbook has nothing on parental leave: the covered half is answered, the other named.
    mixed = ask(engine, channel, "What is the on-call rule and the parental leave policy?")
    assert mixed.found and "on-call" in mixed.text
    note = mixed.text.rpartition("I found nothing about ")[2]
    assert "parental" in note and "leave" in note


def test_an_overview_question_gets_a_summary_led_answer(engine: Engine, channel: ChannelKey) -> None:
    engine.ingest_file(channel, SAMPLE)
    asyncio.run(engine.rebuild(channel))
    answer = ask(engine, channel, "What is this paper about?")
    assert answer.found
    lead = answer.citations[0]
    assert lead.kind == "summary" and lead.layer >= 1 and answer.text.split("\n\n")[0].endswith("[1]")
    assert len(answer.text.split("\n\n")[0]) <= ExtractiveSettings().summary_chars + len(" [1]")
    assert 1 <= len(answer.citations) <= 4  # the summary and at most three supporting excerpts
    # "Open summary" still shows what the summary was built from.
    view = engine.node(channel, lead.node_id)
    assert view.children and all(view.node.id in child.parents for child in view.children)


def test_an_overview_of_several_sources_includes_each_source_root(engine: Engine, channel: ChannelKey) -> None:
    engine.ingest_file(channel, SAMPLE)
    engine.ingest(channel, Document(LIGHTHOUSE, "Keepers' manual"))
    asyncio.run(engine.rebuild(channel))
    stored = engine.store.channel(channel)
    state = stored.live_state()
    assert state is not None
    summaries = [n for layer in state.nodes_per_layer if layer for n in stored.list_layer(state.version, layer, 10**6)]
    roots = {}
    for node in summaries:  # each source's highest summary over that source alone
        if len(node.source_ids) == 1 and node.layer > roots.get(node.source_ids[0], (0, ""))[0]:
            roots[node.source_ids[0]] = (node.layer, node.id)
    assert len(roots) == 2
    hits = engine.retrieve(channel, "Give me an overview of the documents.")
    assert {node_id for _, node_id in roots.values()} <= {hit.node.id for hit in hits}
    assert hits[0].node.layer > 0  # summaries lead


# -- on hand-made hits ------------------------------------------------------------------

DETAIL = Scope(breadth=0.0, kind=ScopeKind.DETAIL, answerable=True)


def leaf(node_id: str, text: str, source: str, start: int, score: float = 0.6) -> Hit:
    return Hit(Node(node_id, 0, text, 40, source_ids=(source,), start=start, end=start + len(text)), score)


def test_near_duplicates_are_dropped_and_a_source_keeps_its_order(embedder) -> None:  # type: ignore[no-untyped-def]
    answerer = ExtractiveAnswerer(embedder, ExtractiveSettings(max_sentences=4, relative_cut=0.0))
    hits = [
        # Ranked first, but later in the document.
        leaf("a.2", "The keeper then lights the great lamp at dusk.", "a", 400),
        leaf("a.1", "At dusk the keeper first winds the lamp's clockwork.", "a", 0),
        leaf("b.1", "At dusk the keeper first winds the lamp's clockwork!", "b", 0),  # a near duplicate
    ]
    answer = answerer.answer_now("What does the keeper do at dusk?", hits, DETAIL)
    assert answer.found
    assert answer.text.count("winds the lamp's clockwork") == 1
    assert answer.text.index("winds the lamp's clockwork") < answer.text.index("lights the great lamp")


def test_scope_decides_whether_there_is_an_answer(embedder) -> None:  # type: ignore[no-untyped-def]
    answerer = ExtractiveAnswerer(embedder)
    hits = [leaf("a.1", "Tomatoes are planted in May, after the last frost.", "a", 0, score=0.1)]
    refused = answerer.answer_now("When are tomatoes planted?", hits, Scope(0.0, ScopeKind.DETAIL, answerable=False))
    assert not refused.found and refused.text == NOT_FOUND
    # A low cosine does not refuse what the scope judged answerable (short questions score low).
    answered = answerer.answer_now("When are tomatoes planted?", hits, DETAIL)
    assert answered.found and "May" in answered.text
    assert not answerer.answer_now("When are tomatoes planted?", hits).found  # without a scope: the old floor


def test_a_broad_answer_quotes_the_leaves_closest_to_the_question_not_the_first_in_the_context(
        embedder) -> None:  # type: ignore[no-untyped-def]
    """An overview of one document ends its context with the document's opening in reading
    order (title, references, background): the excerpts come from the leaves the question is
    closest to, wherever they stand in the context (max_excerpt_nodes of them)."""
    answerer = ExtractiveAnswerer(embedder, ExtractiveSettings(max_excerpt_nodes=1, relative_cut=0.0))
    summary = Hit(Node("s.1", 1, "The invention is a device that cleans a pet's paws with rotating brushes.", 20,
                       source_ids=("a",)), 0.7)
    opening = leaf("a.0", "This application claims priority to provisional application 61/819,547, filed May 4.",
                   "a", 0, score=0.2)
    central = leaf("a.9", "Water sprays through the rotating brushes while the paw rests in the cup.", "a", 900,
                   score=0.6)
    broad = Scope(breadth=0.8, kind=ScopeKind.OVERVIEW, answerable=True)
    answer = answerer.answer_now("Write a summary of this patent.", [summary, opening, central], broad)
    assert answer.found and "Water sprays" in answer.text and "priority" not in answer.text


def test_a_second_question_over_the_same_passages_embeds_none_of_their_sentences_again(
        embedder) -> None:  # type: ignore[no-untyped-def]
    """Embedding the candidate sentences is nearly all of an offline answer's cost, and questions
    in a channel keep reaching the same passages: their sentences are embedded once."""
    counting = RecordingEmbedder(embedder)
    answerer = ExtractiveAnswerer(counting)
    hits = [leaf("a.1", "The stair has 132 steps. The lamp is lit at dusk by the night keeper.", "a", 0),
            leaf("a.2", "Diesel for the generator is delivered on the first Monday of each month.", "a", 300)]
    first = answerer.answer_now("How many steps does the stair have?", hits, DETAIL)
    counting.asked.clear()
    again = answerer.answer_now("How many steps does the stair have?", hits, DETAIL)
    other = answerer.answer_now("When is diesel delivered?", hits, DETAIL)
    assert again == first and "132 steps" in first.text and "first Monday" in other.text
    # Only the questions themselves were embedded again: no sentence of the passages.
    assert counting.asked == ["How many steps does the stair have?", "When is diesel delivered?"]


def test_trim_keeps_whole_sentences_within_the_limit() -> None:
    text = "One short sentence. Another short sentence. A third one that will not fit."
    assert trim(text, 45) == "One short sentence. Another short sentence."
    assert trim("A single sentence far too long for the limit given here.", 20) == "A single sentence…"


def test_a_source_added_since_the_build_is_answered_before_the_next_rebuild(
    engine: Engine, lighthouse: ChannelKey
) -> None:
    # The new source has no summaries yet, so no centre: its own best excerpt stands for it,
    # and its words count for the coverage.
    engine.ingest(lighthouse, Document("The allotment gate code is 4471. Tomatoes are planted in May.", "Allotment"))
    answer = ask(engine, lighthouse, "When are tomatoes planted?")
    assert answer.found and "May" in answer.text and answer.citations[0].title == "Allotment"
