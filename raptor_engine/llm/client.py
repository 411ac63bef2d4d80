"""The transport: chat completions and embeddings from one OpenAI-compatible endpoint.

Contract: :class:`LLMClient` makes every request for the summariser, the
answerer and the embedder of this package, and owns their reliability: a
bound on requests in flight, a timeout per attempt, and our own retry loop
(the ``openai`` client's is off, so retries are counted, logged and honour
``Retry-After``: :mod:`raptor_engine.llm.retries`). Every failure becomes a
:class:`~raptor_engine.errors.ProviderError` subclass naming the endpoint, the
model and what went wrong (worded by :mod:`raptor_engine.llm.failures`); a
failed call never becomes text (responses are read by :mod:`raptor_engine.llm.responses`).
The API key is never logged nor put in a message. :meth:`LLMClient.chat_stream` gives a
reply as the model writes it, with the same retries until its first text and a clear error,
never a silent restart, when it breaks after. Every request is metered: on the client's own
:class:`~raptor_engine.metering.Meter` and on the caller's current meter.

Threading: the client runs every request on its own event loop in a daemon thread
(:mod:`raptor_engine.llm.event_loop`), from whichever loop or thread it is called.
Close the client (:meth:`LLMClient.close`, or use it as a context manager) to stop the thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, Self, TypeVar

import openai
from openai.types.chat import ChatCompletionChunk

from raptor_engine.llm.event_loop import ClientLoop
from raptor_engine.llm.failures import Junk, public_endpoint
from raptor_engine.llm.responses import chunk_piece, completion_text, embedding_rows, tokens_used
from raptor_engine.llm.retries import RetryPolicy, Tries
from raptor_engine.llm.settings import PLACEHOLDER_API_KEY, LLMSettings
from raptor_engine.metering import Meter, ModelUsage, current_meter

T = TypeVar("T")


class LLMClient:
    """Chat completions and embeddings from one OpenAI-compatible endpoint.

    All calls of one client share a bound of ``max_concurrency`` requests in
    flight (the bound covers HTTP attempts; a call waiting to retry holds no
    slot). Failed attempts are retried as :class:`~raptor_engine.llm.retries.RetryPolicy`
    says: server errors, timeouts and rate limits, a garbled answer once; other 4xx raise at once.
    """

    def __init__(self, settings: LLMSettings) -> None:
        self.settings = settings
        self.endpoint = public_endpoint(settings.base_url)
        self._api_key = settings.api_key or PLACEHOLDER_API_KEY
        self._meter = Meter()  # everything this client did; a build's own meter travels in the context
        self._loop = ClientLoop()
        self._retries = RetryPolicy(settings, self.endpoint, self._api_key, lambda: self._record(ModelUsage(retries=1)))
        # Made on the client's loop at first use: both belong to that loop.
        self._openai: openai.AsyncOpenAI | None = None
        self._limit: asyncio.Semaphore | None = None

    # -- public calls ---------------------------------------------------------

    async def chat(self, system: str, user: str, max_tokens: int) -> str:
        """The model's reply to ``system`` + ``user``, stripped, never empty.

        Raises a ``ProviderError`` subclass when every attempt failed.
        """
        return await self._loop.run(
            self._call("chat completion", self.settings.model, lambda: self._chat_once(system, user, max_tokens))
        )

    def chat_stream(self, system: str, user: str, max_tokens: int) -> AsyncIterator[str]:
        """The model's reply to ``system`` + ``user`` as the model writes it: pieces of text, in order.

        Contract:

        * the first piece holds text (leading whitespace is dropped), so the pieces joined and
          stripped are what :meth:`chat` returns for the same completion;
        * until the first piece, failures are retried exactly as :meth:`chat` retries them (the
          same bound, timeout, backoff and Retry-After) and, all attempts failed, raise the same
          ``ProviderError`` subclass; a stream ending without any text is junk, as an empty reply;
        * once a piece was given, a failure is never retried: the caller may have shown that text,
          and a second answer would not continue it. It raises :class:`ModelUnavailable`
          (:class:`ModelTimeout` for a stall) saying the answer broke off. A stream that ends
          without the server's end of the answer (no ``finish_reason``: a connection cut short)
          is such a failure too, never taken for a whole answer;
        * the timeout bounds the wait for the first piece (as it bounds a whole :meth:`chat`
          attempt) and then each wait for the next chunk; a slot of the concurrency bound is
          held from the request to the stream's end;
        * the request runs on the client's loop and reads ahead of a slow consumer; closing the
          iterator early (or cancelling its consumer) ends the request.
        """
        return self._loop.bridge(self._stream_call(system, user, max_tokens))

    async def embed(self, texts: Sequence[str], model: str) -> list[list[float]]:
        """One vector per text, in order, from one ``/embeddings`` request (no batching here)."""
        batch = [text if text.strip() else " " for text in texts]  # the API refuses empty strings
        return await self._loop.run(self._call("embedding request", model, lambda: self._embed_once(batch, model)))

    def run_sync(self, call: Coroutine[Any, Any, T]) -> T:
        """Runs ``call`` on the client's loop and blocks this thread until it ends.

        For synchronous callers (``Embedder.embed``). Must not be called from
        the client's own loop thread (it would wait on itself).
        """
        return self._loop.run_sync(call)

    def usage(self) -> ModelUsage:
        """A snapshot of the counters of every request this client made."""
        return self._meter.usage()

    def reset_usage(self) -> None:
        self._meter = Meter()

    # -- lifecycle ------------------------------------------------------------

    def close(self) -> None:
        """Closes connections and stops the loop thread; pending calls are cancelled. Idempotent."""
        self._loop.close(self._close_connections)

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _close_connections(self) -> None:
        if self._openai is not None:
            await self._openai.close()

    def _resources(self) -> tuple[openai.AsyncOpenAI, asyncio.Semaphore]:
        """The openai client and the semaphore, made on first use (always on the client's loop)."""
        if self._openai is None or self._limit is None:
            self._openai = openai.AsyncOpenAI(
                base_url=self.settings.base_url,
                api_key=self._api_key,
                timeout=self.settings.timeout_s,
                max_retries=0,  # ours is the retry loop: observable, and honours Retry-After
            )
            self._limit = asyncio.Semaphore(self.settings.max_concurrency)
        return self._openai, self._limit

    # -- one attempt ------------------------------------------------------------

    async def _create_chat(self, system: str, user: str, max_tokens: int, stream: bool) -> Any:
        """One chat completion request: the completion, or with ``stream`` the chunks' stream."""
        client, _ = self._resources()
        return await client.chat.completions.create(
            model=self.settings.model,
            messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
            # max_tokens, not max_completion_tokens: the one vLLM, llama.cpp and Ollama all accept.
            max_tokens=max_tokens,
            temperature=self.settings.temperature,
            stream=stream,
        )

    async def _chat_once(self, system: str, user: str, max_tokens: int) -> str:
        response = await self._create_chat(system, user, max_tokens, stream=False)
        self._record(tokens_used(response))
        return completion_text(response)

    async def _embed_once(self, texts: list[str], model: str) -> list[list[float]]:
        client, _ = self._resources()
        # "float" explicitly: the openai client asks for base64 by default, which local servers may not speak.
        response = await client.embeddings.create(model=model, input=texts, encoding_format="float")
        self._record(tokens_used(response))
        return embedding_rows(response, len(texts))

    # -- a streamed answer ---------------------------------------------------------

    async def _open_stream(self, system: str, user: str, max_tokens: int) -> tuple[_Stream, str]:
        """One streamed attempt up to its first text: the stream (to read on) and that text.
        Raises ``Junk`` for a stream that ends before any text."""
        response = await self._create_chat(system, user, max_tokens, stream=True)
        stream = _Stream(response, aiter(response))
        try:
            async for chunk in stream.chunks:
                text, _ = self._chunk_piece(chunk)
                if text.strip():
                    return stream, text.lstrip()
            raise Junk("a stream without text")
        except BaseException:
            await stream.close()
            raise

    def _chunk_piece(self, chunk: object) -> tuple[str, bool]:
        """A streamed chunk's text and whether it ends the answer; the tokens it reports counted."""
        self._record(tokens_used(chunk))
        return chunk_piece(chunk)

    async def _stream_call(self, system: str, user: str, max_tokens: int) -> AsyncIterator[str]:
        """:meth:`chat_stream` on the client's loop: the retry loop up to the first text, then the rest."""
        what, model, settings = "chat completion", self.settings.model, self.settings
        _, limit = self._resources()
        started = time.monotonic()
        failed = True
        tries = Tries()
        try:
            while True:
                await limit.acquire()  # held to the stream's end; released at once when an attempt fails
                try:
                    async with asyncio.timeout(settings.timeout_s):
                        stream, first = await self._open_stream(system, user, max_tokens)
                except BaseException as exc:
                    limit.release()
                    if not isinstance(exc, Exception):
                        raise  # cancelled
                    await self._retries.after_failure(what, model, exc, tries)
                    continue
                break
            try:
                yield first
                async for piece in self._rest(stream.chunks):
                    yield piece
            finally:
                limit.release()
                await stream.close()
            failed = False
        finally:
            self._count(time.monotonic() - started, failed)

    async def _rest(self, chunks: AsyncIterator[ChatCompletionChunk]) -> AsyncIterator[str]:
        """The stream's text after its first piece; a failure (a stall, a cut, junk) raises the
        broken-answer error and is not retried."""
        timeout_s = self.settings.timeout_s
        while True:
            try:
                async with asyncio.timeout(timeout_s):
                    chunk = await anext(chunks, None)
                if chunk is None:
                    raise Junk("the stream ended before the answer did (no finish_reason)")
                text, finished = self._chunk_piece(chunk)
            except Exception as exc:  # translated below; unknown ones re-raised untouched
                error = self._retries.broken_stream(exc)
                if error is None:
                    raise
                raise error from self._retries.scrubbed(exc)
            if text:
                yield text
            if finished:
                return

    # -- the calls, counted ----------------------------------------------------------

    async def _call(self, what: str, model: str, once: Callable[[], Awaitable[T]]) -> T:
        """Runs ``once`` with the concurrency bound, the timeout and the retry policy."""
        _, limit = self._resources()
        started = time.monotonic()
        failed = True
        try:
            result = await self._retries.run(what, model, once, limit)
            failed = False
            return result
        finally:
            self._count(time.monotonic() - started, failed)

    def _count(self, seconds: float, failed: bool) -> None:
        self._record(ModelUsage(calls=1, failed_calls=int(failed), seconds=seconds))

    def _record(self, usage: ModelUsage) -> None:
        """Counts ``usage`` for this client and for the work in progress (its meter, if any)."""
        self._meter.record(usage)
        meter = current_meter()
        if meter is not None:
            meter.record(usage)


@dataclass(frozen=True, slots=True)
class _Stream:
    """A streamed response and the iterator of its chunks (one iterator: it is read on)."""

    response: openai.AsyncStream[ChatCompletionChunk]
    chunks: AsyncIterator[ChatCompletionChunk]

    async def close(self) -> None:
        """Ends the iteration and closes the HTTP response (the connection is not left to the collector)."""
        closing = getattr(self.chunks, "aclose", None)
        with contextlib.suppress(Exception):
            if closing is not None:
                await closing()
            await self.response.close()
