"""An edit re-embeds only what it changed (issue 28, point 7): a new version of a message or file
(the same external id) reuses the vectors of the chunks it shares with the versions before it.
Counted where the embeddings are made: the stand-in of an embeddings API, reached through the
real ``openai`` client, records every text it was asked to embed."""

from __future__ import annotations

from raptor_engine.answering import ExtractiveAnswerer
from raptor_engine.engine import Engine
from raptor_engine.llm import LLMClient, LLMSettings, OpenAIEmbedder
from raptor_engine.store import ChromaStore
from raptor_engine.summarizing import ExtractiveSummarizer
from raptor_engine.types import ChannelKey, Document, SourceKind
from testkit.openai_stub import OpenAIStub

PARAGRAPHS = [f"Paragraph {n} of the runbook: the service on port {7000 + n} restarts when its health check "
              f"fails three times, and the on-call engineer of team {n} is paged after ten minutes." for n in range(12)]


def embedded_texts(stub: OpenAIStub) -> list[str]:
    return [text for r in stub.requests if r.path.endswith("/embeddings") for text in r.body["input"]]


def test_an_edit_embeds_only_the_chunks_it_changed(stub: OpenAIStub, store: ChromaStore, embedder: object,
                                                     channel: ChannelKey) -> None:
    with LLMClient(LLMSettings(base_url=stub.base_url, model="stub", max_retries=1)) as client:
        api = OpenAIEmbedder(client, "stub-embed", dimension=32)
        counter = embedder.token_counter()  # type: ignore[attr-defined]
        engine = Engine(store, api, counter, ExtractiveSummarizer(counter), ExtractiveAnswerer(api))
        first = "\n\n".join(PARAGRAPHS)
        engine.ingest(channel, Document(first, "Runbook", SourceKind.MESSAGE, "", "Ana", "", "m1"))
        before = len(embedded_texts(stub))
        edited = "\n\n".join([*PARAGRAPHS[:-1], "Paragraph 11 was rewritten: port 7011 is retired."])
        engine.ingest(channel, Document(edited, "Runbook", SourceKind.MESSAGE, "", "Ana", "", "m1"))
        again = embedded_texts(stub)[before:]
        # Another message with the same text as the first is no edit of m1: embedded in full.
        engine.ingest(channel, Document(first + "\n\nSigned, Ana.", "Copy", SourceKind.MESSAGE, "", "Bo", "", "m2"))
        copied = embedded_texts(stub)[before + len(again):]
    assert before >= 4 and 1 <= len(again) < before / 2, (before, len(again))
    assert any("rewritten" in text for text in again)
    assert len(copied) >= before  # nothing reused across different messages
