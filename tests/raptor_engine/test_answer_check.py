"""Answers checked against what they cite (issue 29, points 1 and 2): quotes verified, sentences
supported. Unit tests of ``answer_check``, then the engine with real Chroma: the offline answerer
on the sample handbook, and a model (the stand-in server, through the real ``openai`` client)
made to cite wrongly, answered whole and streamed."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from raptor_engine import answer_check
from raptor_engine.answer_check import Evidence, answer_claims, check_answer, is_verbatim, support
from raptor_engine.engine import Engine, EngineSettings
from raptor_engine.llm import LLMAnswerer, LLMClient, LLMSettings
from raptor_engine.store import ChromaStore
from raptor_engine.summarizing import ExtractiveSummarizer
from raptor_engine.types import Answer, ChannelKey, Citation, Hit, Node
from testkit.openai_stub import OpenAIStub
from tests.conftest import SAMPLE

HANDBOOK_QUESTION = "What happens when the on-call engineer cannot be reached?"
FLAGS_THEN_ONCALL = (
    "A flag that has been fully on for thirty days is removed in the next sprint.\n\n"
    "## On-call\n\nOne engineer is on call each week, from Monday to Monday. "
    "A page not acknowledged within ten minutes escalates to the secondary on-call."
)


def leaf(node_id: str, text: str) -> Node:
    return Node(id=node_id, layer=0, text=text, tokens=len(text.split()), source_ids=("s1",), title="Handbook")


def summary(node_id: str, text: str, children: tuple[str, ...]) -> Node:
    return Node(id=node_id, layer=1, text=text, tokens=len(text.split()), source_ids=("s1",), title="Handbook",
                children=children)


def answered(text: str, *nodes: Node) -> Answer:
    citations = tuple(Citation(i, n.id, n.layer, n.title, "", n.text[:200]) for i, n in enumerate(nodes, start=1))
    return Answer(text=text, citations=citations, hits=tuple(Hit(n, 0.5) for n in nodes), found=True)


# -- unit ------------------------------------------------------------------------------


def test_markers_written_after_the_full_stop_belong_to_the_sentence_before() -> None:
    claims = answer_claims("It rains in Spain. [1] Then it snows [2][3].\n\n- A list item [1]\n- Another. [4]\nDone.")
    assert [(c.text, c.numbers) for c in claims] == [
        ("It rains in Spain. [1]", (1,)), ("Then it snows [2][3].", (2, 3)), ("- A list item [1]", (1,)),
        ("- Another. [4]", (4,)), ("Done.", ()),
    ]


def test_a_marker_ending_a_paragraph_cites_the_sentences_before_it_in_that_paragraph() -> None:
    claims = answer_claims("Lead one. Lead two. [1]\n\nBody A [2]. Body B.\n\nAlone here.")
    assert [c.numbers for c in claims] == [(1,), (1,), (2,), (), ()]


def test_a_quote_is_verbatim_up_to_whitespace_case_and_unicode_forms() -> None:
    source = "The ﬁle server\n  restarts at NOON every day."  # a ligature, a line break, capitals
    assert is_verbatim("the file server restarts at noon", [source])
    assert is_verbatim("The file server restarts at…", [source])  # a quote cut with an ellipsis
    assert not is_verbatim("The file server restarts at midnight", [source])
    assert not is_verbatim("", [source])


def test_support_is_the_share_of_a_sentences_words_in_the_cited_text() -> None:
    text = "Pages escalate to the secondary on-call after ten minutes."
    assert support("After ten minutes, pages escalate to the secondary. [1]", [text]) == 1.0
    assert support("The moon is made of green cheese. [1]", [text]) == 0.0


def test_a_citation_quotes_the_sentence_that_supports_it_not_the_excerpts_first_words() -> None:
    node = leaf("a", FLAGS_THEN_ONCALL)
    checked = check_answer(answered("One engineer is on call each week. [1]", node), {"a": Evidence(node.text)})
    assert checked.citations[0].quote == "One engineer is on call each week, from Monday to Monday."
    assert checked.unverified_quotes == 0 and checked.unsupported == ()


def test_a_summary_is_quoted_from_the_excerpts_beneath_it_or_not_at_all() -> None:
    below = leaf("l1", "The garden opens at seven. Volunteers turn the compost every Sunday.")
    written = summary("s", "Volunteers look after a community garden and its compost.", ("l1",))
    answer = answered("Volunteers turn the compost on Sundays. [1]", written)
    with_leaves = check_answer(answer, {"s": Evidence(written.text, (below.text,), leaf=False)})
    assert with_leaves.citations[0].quote == "Volunteers turn the compost every Sunday."
    assert with_leaves.unverified_quotes == 0
    # The excerpts beneath could not be read: the summary's own (model-written) words are no quote.
    alone = check_answer(answer, {"s": Evidence(written.text, (), leaf=False)})
    assert alone.citations[0].quote == "" and alone.unverified_quotes == 1
    assert alone.citations[0].node_id == "s"  # the citation stays, as a link


def test_each_excerpt_is_split_and_stemmed_once_however_many_sentences_cite_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A summary's citation looks for each sentence citing it among every excerpt beneath it, and
    each claim is checked against them all: each text is split into sentences and stemmed once
    (a theme's offline answer, citing summaries over hundreds of excerpts, spent 2 s doing it again)."""
    split: list[str] = []
    original = answer_check.split_sentences
    monkeypatch.setattr(answer_check, "split_sentences", lambda text: split.append(text) or original(text))
    answer_check._sentences.cache_clear()
    answer_check._stems.cache_clear()
    excerpts = tuple(f"Crew {i} turns the compost on day {i}. The garden gate {i} opens at seven." for i in range(30))
    written = summary("s", "Volunteers turn the compost and open the garden gates.", tuple(f"l{i}" for i in range(30)))
    text = " ".join(f"Crew {i} turns the compost on day {i} [1]." for i in range(0, 30, 3))
    checked = check_answer(answered(text, written), {"s": Evidence(written.text, excerpts, leaf=False)})
    assert checked.citations[0].quote.startswith("Crew ") and is_verbatim(checked.citations[0].quote, excerpts)
    assert checked.unsupported == () and checked.unverified_quotes == 0
    excerpts_split = [t for t in split if t in excerpts]
    assert sorted(excerpts_split) == sorted(excerpts)  # each once, though ten sentences cite them


def test_sentences_citing_the_wrong_passage_or_nothing_are_unsupported() -> None:
    node = leaf("a", FLAGS_THEN_ONCALL)
    text = ("One engineer is on call each week. [1] The moon is made of green cheese. [1] "
            "Pages also go to the whole company by email.\n\nIn short:")
    checked = check_answer(answered(text, node), {"a": Evidence(node.text)})
    assert checked.unsupported == ("The moon is made of green cheese. [1]",
                                   "Pages also go to the whole company by email.")
    assert all(sentence in checked.text for sentence in checked.unsupported)


def test_headings_tables_and_code_state_nothing_to_check() -> None:
    node = leaf("a", FLAGS_THEN_ONCALL)
    text = ("## Who escalates\n\nOne engineer is on call each week [1]:\n\n| Role | Pager | Escalates after |\n"
            "| --- | --- | --- |\n| primary | yes | ten minutes |\n\n```\nescalate --to secondary --after 10m\n```")
    claims = answer_claims(text)
    assert [c.prose for c in claims if c.text.startswith(("#", "|", "```"))] == [False] * 3
    assert check_answer(answered(text, node), {"a": Evidence(node.text)}).unsupported == ()


def test_the_threshold_decides_how_much_of_a_sentence_must_be_held() -> None:
    node = leaf("a", "Pages escalate to the secondary on-call after ten minutes.")
    text = "Pages escalate after ten minutes to the manager's phone. [1]"  # 4 of 7 words held
    assert check_answer(answered(text, node), {"a": Evidence(node.text)}, threshold=0.5).unsupported == ()
    assert check_answer(answered(text, node), {"a": Evidence(node.text)}, threshold=0.8).unsupported == (text,)


def test_an_answer_that_found_nothing_is_left_alone() -> None:
    nothing = Answer(text="I could not find anything about that.", citations=(), hits=(), found=False)
    assert check_answer(nothing, {}) is nothing


# -- the engine, real Chroma ----------------------------------------------------------


def handbook(engine: Engine, channel: ChannelKey, build: bool = True) -> None:
    engine.ingest_file(channel, SAMPLE)
    if build:
        asyncio.run(engine.rebuild(channel))


def test_offline_answers_quote_the_supporting_sentence_verbatim(engine: Engine, channel: ChannelKey) -> None:
    handbook(engine, channel)
    answer = asyncio.run(engine.answer(channel, HANDBOOK_QUESTION))
    sources = {hit.node.id: hit.node.text for hit in answer.hits}
    assert answer.found and answer.citations
    for citation in answer.citations:
        assert citation.quote and not citation.quote.startswith("#")
        assert "##" not in citation.quote  # never a heading run into the text
        if citation.layer == 0:
            assert is_verbatim(citation.quote, [sources[citation.node_id]])
    assert answer.unverified_quotes == 0 and answer.unsupported == ()
    added = {source.id: source.added_at for source in engine.sources(channel)}
    assert all(c.updated_at and c.updated_at in added.values() for c in answer.citations)  # the source's age
    first = answer.citations[0]
    assert first.quote in answer.text  # the quote is the very sentence the answer gives for [1]


def model_engine(stub: OpenAIStub, store: ChromaStore, embedder: Any) -> tuple[Engine, LLMClient]:
    settings = LLMSettings(base_url=stub.base_url, model="stub-model", max_retries=1, backoff_base_s=0.01)
    client = LLMClient(settings)
    counter = embedder.token_counter()
    engine = Engine(store, embedder, counter, ExtractiveSummarizer(counter), LLMAnswerer(client, settings),
                    EngineSettings())
    return engine, client


WRONG_ANSWER = ("If a page is not acknowledged within ten minutes, it escalates to the secondary on-call [1]. "
                "The on-call engineer is then fined one hundred euros by the finance department [1]. "
                "Everyone in the company receives an automatic apology email afterwards.")


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
def test_a_model_citing_wrongly_gets_its_unsupported_sentences_named(
    stub: OpenAIStub, store: ChromaStore, embedder: Any, channel: ChannelKey, streamed: bool
) -> None:
    stub.answer_text = WRONG_ANSWER
    engine, client = model_engine(stub, store, embedder)
    try:
        handbook(engine, channel, build=False)  # fresh excerpts: cited before any rebuild

        async def ask() -> Answer:
            if not streamed:
                return await engine.answer(channel, HANDBOOK_QUESTION)
            stream = await engine.answer_stream(channel, HANDBOOK_QUESTION)
            pieces = [piece async for piece in stream]
            assert "".join(pieces) == stream.answer.text
            return stream.answer

        answer = asyncio.run(ask())
    finally:
        client.close()
    assert answer.unsupported == (
        "The on-call engineer is then fined one hundred euros by the finance department [1].",
        "Everyone in the company receives an automatic apology email afterwards.",
    )
    (citation,) = answer.citations
    assert "escalates" in citation.quote and citation.quote.startswith("If a page is not acknowledged")
    assert answer.unverified_quotes == 0
