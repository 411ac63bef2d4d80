"""The transport: chat completions and embeddings from one OpenAI-compatible endpoint.

Contract: :class:`LLMClient` makes every request for the summariser, the
answerer and the embedder of this package, and owns their reliability: a
bound on requests in flight, a timeout per attempt, and our own retry loop
(the ``openai`` client's is off, so retries are counted, logged and honour
``Retry-After``). Every failure becomes a
:class:`~raptor_engine.errors.ProviderError` subclass naming the endpoint, the
model and what went wrong (worded by :mod:`raptor_engine.llm.failures`); a
failed call never becomes text. The API key is never logged nor put in a
message. :meth:`LLMClient.chat_stream` gives a reply as the model writes it,
with the same retries until its first text and a clear error, never a
silent restart, when it breaks after. Every request is metered: on the client's own
:class:`~raptor_engine.metering.Meter` and on the caller's current meter.

Threading: the client runs every request on its own event loop in a daemon
thread. The ``openai`` client's connection pool and our semaphore belong to
one event loop, while the engine calls it from several: summaries from its
loop, ``Embedder.embed`` (synchronous by protocol) from worker threads and
from the loop itself. Async callers await a future bridged to that loop;
:meth:`LLMClient.run_sync` blocks a plain thread on it. Close the client
(:meth:`LLMClient.close`, or use it as a context manager) to stop the thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import random
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, Self, TypeVar

import httpx
import openai
from openai.types import CreateEmbeddingResponse
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from raptor_engine import defaults
from raptor_engine.errors import (
    ModelBadResponse,
    ModelRequestRejected,
    ModelTimeout,
    ModelUnavailable,
    ProviderError,
)
from raptor_engine.llm.failures import Failure, Junk, public_endpoint, translate
from raptor_engine.metering import Meter, ModelUsage, adopt_meter, current_meter

# The package's name, not this module's: log records keep the name they had before the split.
logger = logging.getLogger("raptor_engine.llm")

T = TypeVar("T")

PLACEHOLDER_API_KEY = "not-needed"  # local servers ignore the key, but the openai client insists on one
JUNK_RETRIES = 1  # a garbled body may be a one-off (a proxy cut it); twice in a row is the server's way


# --------------------------------------------------------------------------- settings


@dataclass(frozen=True, slots=True)
class LLMSettings:
    """Where the model is and how hard to try.

    ``api_key`` may be empty: a placeholder is sent, as local servers need
    none. ``timeout_s`` bounds each attempt; a call makes at most
    ``1 + max_retries`` attempts, waiting ``backoff_base_s * 2**k`` (capped at
    ``backoff_cap_s``, plus up to 10 % jitter) between them, or what the
    server's Retry-After asks (capped at ``retry_after_cap_s``).
    ``summary_tokens`` and ``answer_tokens`` cap the completions;
    ``context_tokens`` is the input budget for a summary's cluster text.
    """

    base_url: str
    model: str
    api_key: str = ""
    max_concurrency: int = defaults.LLM_MAX_CONCURRENCY
    timeout_s: float = defaults.LLM_TIMEOUT_S
    max_retries: int = defaults.LLM_MAX_RETRIES
    summary_tokens: int = defaults.LLM_SUMMARY_TOKENS
    answer_tokens: int = defaults.LLM_ANSWER_TOKENS
    context_tokens: int = defaults.LLM_CONTEXT_TOKENS
    temperature: float = 0.0
    backoff_base_s: float = 0.5
    backoff_cap_s: float = 8.0
    retry_after_cap_s: float = 60.0

    def __post_init__(self) -> None:
        if self.max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1")
        if self.max_retries < 0 or self.timeout_s <= 0:
            raise ValueError("max_retries must be >= 0 and timeout_s > 0")

    def __repr__(self) -> str:
        # The dataclass repr would print the key into logs and tracebacks.
        return f"LLMSettings(base_url={self.base_url!r}, model={self.model!r}, api_key=<{'set' if self.api_key else 'empty'}>)"


def prompt_hash(*parts: str) -> str:
    """A short fingerprint of a prompt's texts, for the identity of a summariser or an answerer."""
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:10]


# --------------------------------------------------------------------------- the client


class LLMClient:
    """Chat completions and embeddings from one OpenAI-compatible endpoint.

    All calls of one client share a bound of ``max_concurrency`` requests in
    flight (the bound covers HTTP attempts; a call waiting to retry holds no
    slot). Retried: 408, 409, 429 (honouring Retry-After), 5xx, connection
    errors and timeouts, up to ``max_retries`` times; junk (bad JSON, no
    choices, blank text) at most ``JUNK_RETRIES`` times. Other 4xx raise at once.
    """

    def __init__(self, settings: LLMSettings) -> None:
        self.settings = settings
        self.endpoint = public_endpoint(settings.base_url)
        self._api_key = settings.api_key or PLACEHOLDER_API_KEY
        self._meter = Meter()  # everything this client did; a build's own meter travels in the context
        self._loop_lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._closed = False
        # Made on the client's loop at first use: both belong to that loop.
        self._openai: openai.AsyncOpenAI | None = None
        self._limit: asyncio.Semaphore | None = None

    # -- public calls ---------------------------------------------------------

    async def chat(self, system: str, user: str, max_tokens: int) -> str:
        """The model's reply to ``system`` + ``user``, stripped, never empty.

        Raises a ``ProviderError`` subclass when every attempt failed.
        """
        return await self._on_loop(
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
        return self._bridged(self._stream_call(system, user, max_tokens))

    async def embed(self, texts: Sequence[str], model: str) -> list[list[float]]:
        """One vector per text, in order, from one ``/embeddings`` request (no batching here)."""
        batch = [text if text.strip() else " " for text in texts]  # the API refuses empty strings
        return await self._on_loop(self._call("embedding request", model, lambda: self._embed_once(batch, model)))

    def run_sync(self, call: Coroutine[Any, Any, T]) -> T:
        """Runs ``call`` on the client's loop and blocks this thread until it ends.

        For synchronous callers (``Embedder.embed``). Must not be called from
        the client's own loop thread (it would wait on itself).
        """
        loop = self._ensure_loop()
        if threading.current_thread() is self._thread:
            call.close()
            raise RuntimeError("LLMClient.run_sync called from the client's own event loop")
        return asyncio.run_coroutine_threadsafe(_metered_by(current_meter(), call), loop).result()

    def usage(self) -> ModelUsage:
        """A snapshot of the counters of every request this client made."""
        return self._meter.usage()

    def reset_usage(self) -> None:
        self._meter = Meter()

    # -- lifecycle ------------------------------------------------------------

    def close(self) -> None:
        """Closes connections and stops the loop thread; pending calls are cancelled. Idempotent."""
        with self._loop_lock:
            self._closed = True
            loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        if threading.current_thread() is thread:
            raise RuntimeError("LLMClient.close called from the client's own event loop")
        if thread.is_alive():
            try:
                asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(timeout=10)
            finally:
                loop.call_soon_threadsafe(loop.stop)
                thread.join(timeout=10)

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

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._loop_lock:
            if self._closed:
                raise RuntimeError("the LLMClient is closed")
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=_run_forever, args=(loop,), name="llm-client", daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    async def _on_loop(self, call: Coroutine[Any, Any, T]) -> T:
        """Awaits ``call`` on the client's loop, from whichever loop we are on."""
        try:
            loop = self._ensure_loop()
        except RuntimeError:
            call.close()
            raise
        if asyncio.get_running_loop() is loop:
            return await call
        # Cancelling our await cancels the task on the client's loop too. The caller's
        # meter goes along: a task on another loop does not inherit our context.
        future = asyncio.run_coroutine_threadsafe(_metered_by(current_meter(), call), loop)
        return await asyncio.wrap_future(future)

    async def _shutdown(self) -> None:
        current = asyncio.current_task()
        pending = [task for task in asyncio.all_tasks() if task is not current]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
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
        if not isinstance(response, ChatCompletion):  # a non-JSON content type comes back as a str
            raise Junk("a body that is not a chat completion")
        self._add_tokens(getattr(response, "usage", None))
        choices = getattr(response, "choices", None) or []
        if not choices:
            raise Junk("no choices")
        content = getattr(getattr(choices[0], "message", None), "content", None)
        if not isinstance(content, str) or not content.strip():
            raise Junk("empty content")
        return content.strip()

    async def _open_stream(self, system: str, user: str, max_tokens: int) -> tuple[_Stream, str]:
        """One streamed attempt up to its first text: the stream (to read on) and that text.
        Raises ``Junk`` for a stream that ends before any text."""
        response = await self._create_chat(system, user, max_tokens, stream=True)
        stream = _Stream(response, aiter(response))
        try:
            async for chunk in stream.chunks:
                text, _ = self._chunk_text(chunk)
                if text.strip():
                    return stream, text.lstrip()
            raise Junk("a stream without text")
        except BaseException:
            await stream.close()
            raise

    def _chunk_text(self, chunk: object) -> tuple[str, bool]:
        """A streamed chunk's text and whether it ends the answer (it carries a finish_reason);
        a usage chunk is counted."""
        if not isinstance(chunk, ChatCompletionChunk):
            raise Junk("a stream chunk that is not a chat completion chunk")
        if chunk.usage is not None:
            self._add_tokens(chunk.usage)
        if not chunk.choices:
            return "", False
        choice = chunk.choices[0]
        return choice.delta.content or "", choice.finish_reason is not None

    async def _stream_call(self, system: str, user: str, max_tokens: int) -> AsyncIterator[str]:
        """:meth:`chat_stream` on the client's loop: the retry loop up to the first text, then the rest."""
        what, model, settings = "chat completion", self.settings.model, self.settings
        _, limit = self._resources()
        started = time.monotonic()
        failed = True
        tries = _Tries()
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
                    await self._after_failure(what, model, exc, tries)
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
                text, finished = self._chunk_text(chunk)
            except Exception as exc:  # translated below; unknown ones re-raised untouched
                error = self._broken_error(exc)
                if error is None:
                    raise
                raise error from _scrubbed(exc, self._api_key)
            if text:
                yield text
            if finished:
                return

    def _broken_error(self, exc: Exception) -> ProviderError | None:
        """The error for a stream that failed with ``exc`` after its first text; None for an
        exception we do not know (a bug: re-raised as it is)."""
        failure = _stream_failure(exc, self.settings.timeout_s)
        if failure is None:
            return None
        model = self.settings.model
        message = (f"the answer broke off after it began: the model server at {self.endpoint} (model {model!r}) "
                   f"{failure.detail}; not retried, as its beginning was already given")
        error: ProviderError
        if failure.kind == "timeout":
            error = ModelTimeout(message, endpoint=self.endpoint, model=model, status=None, attempts=1)
        else:
            error = ModelUnavailable(message, endpoint=self.endpoint, model=model, status=failure.status, attempts=1)
        error.args = (_redact(str(error), self._api_key),)
        logger.error("%s", error)
        return error

    def _bridged(self, source: AsyncIterator[T]) -> AsyncIterator[T]:
        """``source`` (an async iterator to run on the client's loop) read from the caller's loop."""
        return _bridge(self, source)

    async def _embed_once(self, texts: list[str], model: str) -> list[list[float]]:
        client, _ = self._resources()
        # "float" explicitly: the openai client asks for base64 by default, which local servers may not speak.
        response = await client.embeddings.create(model=model, input=texts, encoding_format="float")
        if not isinstance(response, CreateEmbeddingResponse):
            raise Junk("a body that is not an embedding list")
        self._add_tokens(getattr(response, "usage", None))
        data = sorted(getattr(response, "data", None) or [], key=lambda item: getattr(item, "index", 0))
        if len(data) != len(texts):
            raise Junk(f"{len(data)} embeddings for {len(texts)} texts")
        rows = [list(getattr(item, "embedding", None) or []) for item in data]
        if not rows[0] or any(len(row) != len(rows[0]) for row in rows):
            raise Junk("embeddings of unequal or zero length")
        return rows

    # -- the retry loop -----------------------------------------------------------

    async def _call(self, what: str, model: str, once: Callable[[], Awaitable[T]]) -> T:
        """Runs ``once`` with the concurrency bound, the timeout and the retry policy."""
        _, limit = self._resources()
        started = time.monotonic()
        failed = True
        try:
            result = await self._attempts(what, model, once, limit)
            failed = False
            return result
        finally:
            self._count(time.monotonic() - started, failed)

    async def _attempts(self, what: str, model: str, once: Callable[[], Awaitable[T]], limit: asyncio.Semaphore) -> T:
        tries = _Tries()
        while True:
            try:
                async with limit:
                    # Our own deadline too: httpx's timeout is per read, a server dripping bytes would evade it.
                    async with asyncio.timeout(self.settings.timeout_s):
                        return await once()
            except Exception as exc:  # classified by _after_failure; unknown ones are re-raised untouched
                await self._after_failure(what, model, exc, tries)

    async def _after_failure(self, what: str, model: str, exc: Exception, tries: _Tries) -> None:
        """After a failed attempt: raises the call's final error (or ``exc`` itself when it is
        not one we know), or waits the delay before the next attempt (holding no slot)."""
        settings = self.settings
        failure = translate(exc, settings.timeout_s)
        if failure is None:
            raise exc
        tries.attempt += 1
        tries.details.append(failure.detail)
        tries.junk_seen += failure.kind == "junk"
        out_of_tries = tries.attempt > settings.max_retries or tries.junk_seen > JUNK_RETRIES
        if failure.kind == "rejected" or out_of_tries:
            raise self._final_error(what, model, failure, tries.details) from _scrubbed(exc, self._api_key)
        delay = self._delay(tries.attempt, failure)
        logger.warning("%s to %s (model %s) %s; retry %d of %d in %.2f s", what, self.endpoint, model,
                       failure.detail, tries.attempt, settings.max_retries, delay)
        self._count_retry()
        await asyncio.sleep(delay)

    def _delay(self, attempt: int, failure: Failure) -> float:
        """Seconds before the next attempt: the server's Retry-After if it gave one, else backoff."""
        settings = self.settings
        if failure.retry_after_s is not None:
            return min(failure.retry_after_s, settings.retry_after_cap_s)
        backoff = min(settings.backoff_cap_s, settings.backoff_base_s * 2 ** (attempt - 1))
        return backoff * (1 + random.uniform(0, 0.1))  # jitter: parallel calls do not retry in lockstep

    def _final_error(self, what: str, model: str, failure: Failure, details: list[str]) -> ProviderError:
        """The error for a call that failed: ``failure`` is the last attempt's, ``details`` every attempt's."""
        where = f"the model server at {self.endpoint} (model {model!r})"
        attempts = len(details)
        if failure.kind == "rejected":
            message = f"{what} refused: {where} {failure.detail}; not retried"
            error: ProviderError = ModelRequestRejected(message, endpoint=self.endpoint, model=model,
                                                        status=failure.status)
        else:
            if attempts == 1:
                message = f"{what} failed: {where} {failure.detail}"
            elif len(set(details)) == 1:
                message = f"{what} failed: {where} {failure.detail}, {attempts} times in a row"
            else:
                message = f"{what} failed after {attempts} attempts: {where} last {failure.detail}"
            if failure.kind == "junk":
                error = ModelBadResponse(message, endpoint=self.endpoint, model=model, attempts=attempts)
            elif failure.kind == "timeout":
                error = ModelTimeout(message, endpoint=self.endpoint, model=model, status=None, attempts=attempts)
            else:
                error = ModelUnavailable(message, endpoint=self.endpoint, model=model, status=failure.status,
                                         attempts=attempts)
        error.args = (_redact(str(error), self._api_key),)  # belt and braces: the key never leaves
        logger.error("%s", error)
        return error

    # -- accounting ------------------------------------------------------------------

    def _add_tokens(self, usage: object) -> None:
        prompt = getattr(usage, "prompt_tokens", None) or 0
        completion = getattr(usage, "completion_tokens", None) or 0
        self._record(ModelUsage(prompt_tokens=int(prompt), completion_tokens=int(completion)))

    def _count(self, seconds: float, failed: bool) -> None:
        self._record(ModelUsage(calls=1, failed_calls=int(failed), seconds=seconds))

    def _count_retry(self) -> None:
        self._record(ModelUsage(retries=1))

    def _record(self, usage: ModelUsage) -> None:
        """Counts ``usage`` for this client and for the work in progress (its meter, if any)."""
        self._meter.record(usage)
        meter = current_meter()
        if meter is not None:
            meter.record(usage)


@dataclass(slots=True)
class _Tries:
    """The attempts of one call so far (for the retry policy)."""

    attempt: int = 0
    junk_seen: int = 0
    details: list[str] = field(default_factory=list)


def _stream_failure(exc: BaseException, timeout_s: float) -> Failure | None:
    """A failure in the middle of a stream, classified: the API's errors as :func:`translate`
    does, plus the transport's own (httpx raises them unwrapped while a body is being read)."""
    failure = translate(exc, timeout_s)
    if failure is None and isinstance(exc, httpx.HTTPError):
        return Failure("unavailable", f"cut the stream ({type(exc).__name__})")
    return failure


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


_END = object()


async def _bridge(client: LLMClient, source: AsyncIterator[T]) -> AsyncIterator[T]:
    """Runs ``source`` to its end on the client's loop, handing its items to this loop through
    a queue (the request reads ahead of a slow consumer); its error is raised here, and
    leaving early cancels it there. The caller's meter goes along, as for :meth:`LLMClient._on_loop`."""
    loop = client._ensure_loop()
    here = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[object, BaseException | None]] = asyncio.Queue()

    def put(item: object, error: BaseException | None = None) -> None:
        with contextlib.suppress(RuntimeError):  # the consumer's loop is gone: nobody reads any more
            here.call_soon_threadsafe(queue.put_nowait, (item, error))

    async def pump() -> None:
        try:
            async for item in source:
                put(item)
        except Exception as exc:  # noqa: BLE001 (handed to the consumer, who raises it)
            put(_END, exc)
            return
        put(_END)

    future = asyncio.run_coroutine_threadsafe(_metered_by(current_meter(), pump()), loop)
    try:
        while True:
            item, error = await queue.get()
            if error is not None:
                raise error
            if item is _END:
                return
            yield item  # type: ignore[misc]  # every item but the end marker is a T
    finally:
        future.cancel()


def _run_forever(loop: asyncio.AbstractEventLoop) -> None:
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
    finally:
        loop.close()


async def _metered_by(meter: Meter | None, call: Coroutine[Any, Any, T]) -> T:
    """Runs ``call`` with ``meter`` as the current meter (the task's own context, so nothing leaks)."""
    adopt_meter(meter)
    return await call


def _redact(text: str, secret: str) -> str:
    """``text`` with ``secret`` masked; the placeholder is no secret (masking it would garble messages)."""
    return text.replace(secret, "***") if secret and secret != PLACEHOLDER_API_KEY else text


def _scrubbed(exc: BaseException, secret: str) -> BaseException | None:
    """The cause to chain, unless its text holds the key (then none: a traceback would print it)."""
    return None if secret and secret in str(exc) else exc
