"""Streamed answers: the real ``openai`` client streaming from the stand-in server.

The stand-in (``testkit.openai_stub``) streams chat completions as OpenAI does
(server-sent ``chat.completion.chunk`` events, ``data: [DONE]``), a token at a
time, and can cut a stream mid-way. The streamed pieces must join to exactly the
text of the answer the non-streamed path makes of the same reply, citations
renumbered; failures before the first words are retried, after them they say the
answer broke off.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from raptor_engine.answering import NOT_FOUND
from raptor_engine.errors import ModelBadResponse, ModelRequestRejected, ModelUnavailable
from raptor_engine.llm import LLMAnswerer, LLMClient, LLMSettings
from raptor_engine.llm.answerer import StreamedText, answer_from_reply
from raptor_engine.types import Answer, Hit, Node
from testkit.openai_stub import Behaviour, OpenAIStub, stream_tokens

REPLIES = [
    "The launch is planned for March [1], after the review [99].",
    "  Both apply [2][1] and [1, 3] but not [7] or [ 2 , 9 ]. Done [3]  ",
    "NOT FOUND: the channel's material does not say when the launch is.",
    "**NOT FOUND:** nothing about it.",
    "NOT FOUND:",
    "Not a marker [a] nor [1 2] nor [] nor [1,] but [2] is.",
    "The sources do not contain the launch date.",
    "Nothing cited here, but the launch is in March.",
    "Ends on an open bracket [",
    "Ends on an open marker [2",
    "Ends on a marker [99]",
    "[3] opens, then [99] [1]\n\n- a list [2]\n",
    "NOT FOUNDATION is a word [1].",
]


@pytest.fixture
def client(stub: OpenAIStub) -> Iterator[LLMClient]:
    settings = LLMSettings(base_url=stub.base_url, model="stub-model", timeout_s=2.0, max_retries=2,
                           backoff_base_s=0.01)
    with LLMClient(settings) as made:
        yield made


def hits(count: int = 3) -> list[Hit]:
    return [Hit(Node(id=f"n{i}", layer=i % 2, text=f"Passage {i} about the launch.", tokens=5, title=f"Doc {i}"),
                1.0 - i / 10) for i in range(1, count + 1)]


async def streamed(answerer: LLMAnswerer, retrieved: Sequence[Hit]) -> tuple[list[str], Answer]:
    stream = answerer.answer_stream("When is the launch?", retrieved)
    pieces = [piece async for piece in stream]
    return pieces, stream.answer


# ---------------------------------------------------------------- the text, incrementally


@pytest.mark.parametrize("reply", REPLIES)
def test_streamed_text_is_the_final_text_however_the_reply_is_cut(reply: str) -> None:
    """Whatever the cuts, the pieces given are a growing prefix of the final answer's text,
    and with the rest at the end they are exactly that text."""
    retrieved = hits(3)
    final = answer_from_reply(reply.strip(), retrieved)
    rng = random.Random(reply)
    cuttings = [stream_tokens(reply), list(reply), [reply]]
    for _ in range(20):
        cuts = sorted(rng.sample(range(1, len(reply)), min(len(reply) - 1, rng.randint(1, 6))))
        cuttings.append([reply[a:b] for a, b in zip([0, *cuts], [*cuts, len(reply)], strict=True)])
    for pieces in cuttings:
        text = StreamedText(len(retrieved))
        given = ""
        for piece in pieces:
            given += text.add(piece)
            assert final.text.startswith(given), (pieces, given)
        given += text.finish(answer_from_reply(text.reply.strip(), retrieved).text)
        assert given == final.text, pieces


def test_a_not_found_reply_gives_nothing_until_its_end() -> None:
    text = StreamedText(2)
    given = "".join(text.add(piece) for piece in stream_tokens("NOT FOUND: it is not in the material."))
    assert given == ""
    assert text.finish("it is not in the material.") == "it is not in the material."


def test_a_marker_is_held_until_it_closes() -> None:
    text = StreamedText(3)
    assert text.add("Planned for March") == "Planned for March"
    assert text.add(" [") == ""
    assert text.add("3") == ""
    assert text.add("]") == " [1]"  # renumbered by first use: the model's [3] is the first cited
    assert text.add(" and [9") == " and"
    assert text.add("9].") == "."  # a marker naming no source goes, with the space before it


# ---------------------------------------------------------------- through the real client


def test_the_stream_joins_to_the_non_streamed_answer(stub: OpenAIStub, client: LLMClient) -> None:
    answerer = LLMAnswerer(client, client.settings)
    retrieved = hits(3)
    for reply in REPLIES:
        stub.answer_text = reply
        pieces, answer = asyncio.run(streamed(answerer, retrieved))
        whole = asyncio.run(answerer.answer("When is the launch?", retrieved))
        assert "".join(pieces) == answer.text == whole.text, reply
        assert answer == whole
    bodies = [r.body for r in stub.requests]
    assert [bool(b.get("stream")) for b in bodies] == [True, False] * len(REPLIES)


def test_words_come_as_the_model_writes_them(stub: OpenAIStub, client: LLMClient) -> None:
    stub.tokens_per_s = 30.0
    stub.answer_text = " ".join(["word"] * 29) + " [1]."  # 32 tokens: about a second
    answerer = LLMAnswerer(client, client.settings)

    async def timed() -> tuple[float, float, int]:
        started = time.monotonic()
        first = 0.0
        count = 0
        async for _ in answerer.answer_stream("q", hits(1)):
            first = first or time.monotonic() - started
            count += 1
        return first, time.monotonic() - started, count

    first, whole, count = asyncio.run(timed())
    assert first < 0.3 < 0.8 < whole
    assert count > 20  # not held back to the end


def test_no_hits_no_request(stub: OpenAIStub, client: LLMClient) -> None:
    pieces, answer = asyncio.run(streamed(LLMAnswerer(client, client.settings), []))
    assert pieces == [] and answer.text == NOT_FOUND and not answer.found
    assert stub.requests == []


# ---------------------------------------------------------------- failures


def test_a_failure_before_the_first_words_is_retried(stub: OpenAIStub, client: LLMClient) -> None:
    stub.script(Behaviour.error(503), Behaviour.broken(after_tokens=0))  # the second: cut before any text
    pieces, answer = asyncio.run(streamed(LLMAnswerer(client, client.settings), hits()))
    assert "".join(pieces) == answer.text == "The launch is planned for March [1], after the review."
    assert len(stub.requests) == 3
    assert client.usage().retries == 2


def test_a_rejected_request_is_not_retried(stub: OpenAIStub, client: LLMClient) -> None:
    stub.script(Behaviour.error(400, message="bad"))
    with pytest.raises(ModelRequestRejected):
        asyncio.run(streamed(LLMAnswerer(client, client.settings), hits()))
    assert len(stub.requests) == 1


def test_only_junk_is_a_bad_response(stub: OpenAIStub, client: LLMClient) -> None:
    stub.default = Behaviour.empty()
    with pytest.raises(ModelBadResponse):
        asyncio.run(streamed(LLMAnswerer(client, client.settings), hits()))


def test_a_stream_cut_after_its_first_words_says_so_and_is_not_restarted(stub: OpenAIStub, client: LLMClient) -> None:
    stub.script(Behaviour.broken(after_tokens=4))
    received: list[str] = []

    async def read() -> None:
        async for piece in LLMAnswerer(client, client.settings).answer_stream("q", hits()):
            received.append(piece)

    with pytest.raises(ModelUnavailable, match="broke off after it began"):
        asyncio.run(read())
    assert "".join(received) == "The launch is planned"
    assert len(stub.requests) == 1  # never restarted behind the reader's back
    assert client.usage().failed_calls == 1


def test_a_stalled_stream_times_out(stub: OpenAIStub) -> None:
    stub.tokens_per_s = 2.0  # a token every 0.5 s, beyond the 0.3 s the client waits for one
    settings = LLMSettings(base_url=stub.base_url, model="m", timeout_s=0.3, max_retries=0)
    with LLMClient(settings) as slow:
        with pytest.raises(ModelUnavailable):  # the first token is late already: a plain time-out
            asyncio.run(streamed(LLMAnswerer(slow, settings), hits()))


def test_leaving_early_ends_the_request(stub: OpenAIStub, client: LLMClient) -> None:
    stub.tokens_per_s = 20.0
    stub.answer_text = " ".join(["word"] * 200)

    async def first_only() -> str:
        async for piece in LLMAnswerer(client, client.settings).answer_stream("q", hits()):
            return piece
        return ""

    assert asyncio.run(first_only()) == "word"
    deadline = time.monotonic() + 5
    while stub.requests[0].finished == 0.0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert 0 < stub.requests[0].finished - stub.requests[0].started < 3  # not the 10 s of the whole answer


def test_the_slot_of_the_concurrency_bound_is_held_for_the_stream(stub: OpenAIStub) -> None:
    stub.tokens_per_s = 50.0
    stub.answer_text = " ".join(["word"] * 10)
    settings = LLMSettings(base_url=stub.base_url, model="m", max_concurrency=1)
    with LLMClient(settings) as one:
        answerer = LLMAnswerer(one, settings)

        async def both() -> list[Any]:
            return list(await asyncio.gather(streamed(answerer, hits()), streamed(answerer, hits())))

        asyncio.run(both())
    assert stub.max_in_flight == 1
