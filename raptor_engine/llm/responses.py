"""What an OpenAI-compatible server answered, read: a completion's text, a streamed chunk's
piece, an embedding list's rows, and the tokens each says it used.

Contract: pure functions of the ``openai`` client's response objects. Anything that is not a
usable answer (a body of another kind, no choices, blank text, rows missing or of unequal
length) raises :class:`~raptor_engine.llm.failures.Junk`, which the retry loop treats as a
failed attempt; a failed call never becomes text.
"""

from __future__ import annotations

from typing import Any

from openai.types import CreateEmbeddingResponse
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from raptor_engine.llm.failures import Junk
from raptor_engine.metering import ModelUsage


def tokens_used(response: object) -> ModelUsage:
    """The prompt and completion tokens a response (or a streamed chunk) reports it used; none
    if it reports none. Counted also for a response then rejected as junk: it was paid for."""
    usage = getattr(response, "usage", None)
    prompt = getattr(usage, "prompt_tokens", None) or 0
    completion = getattr(usage, "completion_tokens", None) or 0
    return ModelUsage(prompt_tokens=int(prompt), completion_tokens=int(completion))


def completion_text(response: Any) -> str:
    """A chat completion's reply, stripped; never empty."""
    if not isinstance(response, ChatCompletion):  # a non-JSON content type comes back as a str
        raise Junk("a body that is not a chat completion")
    choices = getattr(response, "choices", None) or []
    if not choices:
        raise Junk("no choices")
    content = getattr(getattr(choices[0], "message", None), "content", None)
    if not isinstance(content, str) or not content.strip():
        raise Junk("empty content")
    return content.strip()


def chunk_piece(chunk: object) -> tuple[str, bool]:
    """A streamed chunk's text ("" for none) and whether it ends the answer (it carries a
    ``finish_reason``)."""
    if not isinstance(chunk, ChatCompletionChunk):
        raise Junk("a stream chunk that is not a chat completion chunk")
    if not chunk.choices:
        return "", False
    choice = chunk.choices[0]
    return choice.delta.content or "", choice.finish_reason is not None


def embedding_rows(response: Any, count: int) -> list[list[float]]:
    """The ``count`` vectors of an embedding response, in the order of the texts sent."""
    if not isinstance(response, CreateEmbeddingResponse):
        raise Junk("a body that is not an embedding list")
    data = sorted(getattr(response, "data", None) or [], key=lambda item: getattr(item, "index", 0))
    if len(data) != count:
        raise Junk(f"{len(data)} embeddings for {count} texts")
    rows = [list(getattr(item, "embedding", None) or []) for item in data]
    if not rows[0] or any(len(row) != len(rows[0]) for row in rows):
        raise Junk("embeddings of unequal or zero length")
    return rows
