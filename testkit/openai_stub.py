"""An OpenAI-compatible HTTP server on 127.0.0.1, scripted per test.

It speaks the two endpoints the engine uses, ``POST /v1/chat/completions`` and
``POST /v1/embeddings``, with response bodies shaped like OpenAI's, so the
real ``openai`` client is exercised end to end. Content is deterministic:

* a summary request (system prompt mentions "Summarizing") gets
  ``"Summary: "`` + the first 20 words of the text after the instruction
  (its ``<excerpt>`` delimiters left out);
* any other chat request gets :attr:`OpenAIStub.answer_text` (by default a
  sentence citing ``[1]`` and the out-of-range ``[99]``), or, with
  :attr:`OpenAIStub.answer_from_sources` set, an answer made of the numbered
  ``<source>`` blocks of the request: the first sentence of each of the first
  :data:`SOURCES_ANSWERED` sources, citing its own source (``"faithful"``) or
  the next one (``"miscite"``: a model citing wrongly);
* an embedding is a vector derived from a hash of the text.

A chat request with ``"stream": true`` is answered as OpenAI streams: a
``text/event-stream`` of ``data: {chat.completion.chunk}`` events (the role
first, then the text a token at a time, then an empty delta carrying
``finish_reason``, the usage when ``stream_options.include_usage`` asks for
it), closed by ``data: [DONE]``. Tokens come at
:attr:`OpenAIStub.tokens_per_s` (0: as fast as possible); a token is a word
with the whitespace before it, or one punctuation character, so a ``[1]``
marker arrives in three pieces as real tokenizers split it.
:meth:`Behaviour.broken` cuts a stream after some tokens, as a dropped
connection does (no ``finish_reason``, no ``[DONE]``).

Behaviour is scripted: :meth:`OpenAIStub.script` queues behaviours consumed
by the next requests, in order (any endpoint); when the queue is empty
:attr:`OpenAIStub.default` applies. Every request is recorded and the peak
number of requests in flight is measured.

Bounded: every wait the server does (latency, slow, hang) is on an event set
when the server stops, so stopping ends them all; hangs also end after
``MAX_HANG_S``.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

MAX_HANG_S = 30.0
SUMMARY_WORDS = 20
DEFAULT_ANSWER = "The launch is planned for March [1], after the review [99]."
_INSTRUCTION = re.compile(r"including as many key details as possible:\s*(.*)", re.DOTALL)
_EXCERPT_TAG = re.compile(r"</?excerpt\b[^>]*>")  # the summary prompt's delimiters, not echoed
_SOURCE_BLOCK = re.compile(r'<source n="(\d+)"[^>]*>\n(.*?)\n</source>', re.DOTALL)
_FIRST_SENTENCE = re.compile(r"\S.*?[.!?](?=\s|$)", re.DOTALL)
SOURCES_ANSWERED = 3
ANSWER_MODES = ("", "faithful", "miscite")


@dataclass(frozen=True, slots=True)
class Behaviour:
    """What the server does with one request.

    ``kind`` is one of ``ok``, ``slow`` (ok after ``seconds``), ``status``
    (answer ``status`` with an OpenAI-style error body; ``retry_after`` adds a
    Retry-After header), ``malformed`` (invalid JSON body),
    ``empty`` (a completion whose content is whitespace), ``no_choices`` and
    ``hang`` (never answer until the server stops), ``broken`` (a stream cut
    after ``tokens`` tokens; a non-streamed answer cut mid-body). ``content``
    overrides the chat text of an ``ok``/``slow`` answer.
    """

    kind: str = "ok"
    seconds: float = 0.0
    status: int = 200
    retry_after: str | None = None
    content: str | None = None
    message: str | None = None  # the error body's message for ``status``
    tokens: int = 0  # ``broken``: tokens streamed before the cut

    @staticmethod
    def ok(content: str | None = None) -> Behaviour:
        return Behaviour("ok", content=content)

    @staticmethod
    def slow(seconds: float) -> Behaviour:
        return Behaviour("slow", seconds=seconds)

    @staticmethod
    def error(status: int = 500, retry_after: str | None = None, message: str | None = None) -> Behaviour:
        return Behaviour("status", status=status, retry_after=retry_after, message=message)

    @staticmethod
    def rate_limited(retry_after: str = "1") -> Behaviour:
        return Behaviour("status", status=429, retry_after=retry_after)

    @staticmethod
    def malformed() -> Behaviour:
        return Behaviour("malformed")

    @staticmethod
    def empty() -> Behaviour:
        return Behaviour("empty")

    @staticmethod
    def no_choices() -> Behaviour:
        return Behaviour("no_choices")

    @staticmethod
    def hang() -> Behaviour:
        return Behaviour("hang")

    @staticmethod
    def broken(after_tokens: int, content: str | None = None) -> Behaviour:
        return Behaviour("broken", tokens=after_tokens, content=content)


@dataclass(slots=True)
class Recorded:
    """One request as the server saw it, with what it answered (filled in as it goes)."""

    path: str
    body: dict[str, Any]
    headers: dict[str, str]
    started: float  # time.monotonic() when the body was read
    finished: float
    status: int
    behaviour: str
    usage: dict[str, int] = field(default_factory=dict)


class OpenAIStub:
    """The server's state and controls; start it with :func:`running_stub`."""

    def __init__(self, dimension: int = 32) -> None:
        self.dimension = dimension
        self.latency_s = 0.0  # added to every request
        self.answer_text = DEFAULT_ANSWER
        self.answer_from_sources = ""  # one of ANSWER_MODES: "" answers answer_text
        self.tokens_per_s = 0.0  # the pace of streamed answers (0: as fast as possible)
        self.default = Behaviour.ok()
        self.requests: list[Recorded] = []
        self.max_in_flight = 0
        self._queue: deque[Behaviour] = deque()
        self._lock = threading.Lock()
        self._in_flight = 0
        self.stopping = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- controls -----------------------------------------------------------

    @property
    def base_url(self) -> str:
        assert self._server is not None, "the stub is not running"
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def script(self, *behaviours: Behaviour) -> None:
        """Queues behaviours for the next requests, in order."""
        with self._lock:
            self._queue.extend(behaviours)

    def paths(self) -> list[str]:
        with self._lock:
            return [r.path for r in self.requests]

    # -- lifecycle ------------------------------------------------------------

    def start(self) -> None:
        handler = type("Handler", (_Handler,), {"stub": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        # serve_forever polls for shutdown every 0.05 s (0.5 s by default would slow every test's teardown).
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), name="openai-stub", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Ends every pending wait, stops serving and closes the socket and handler threads."""
        self.stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()  # joins handler threads: all their waits end on `stopping`
        if self._thread is not None:
            self._thread.join(timeout=5)

    # -- used by the handler -------------------------------------------------

    def _next(self) -> Behaviour:
        with self._lock:
            return self._queue.popleft() if self._queue else self.default

    def _enter(self) -> None:
        with self._lock:
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)

    def _leave(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def _record(self, entry: Recorded) -> None:
        with self._lock:
            self.requests.append(entry)


class _Handler(BaseHTTPRequestHandler):
    stub: OpenAIStub
    # HTTP/1.0: one request per connection, so no idle keep-alive thread outlives stop().
    protocol_version = "HTTP/1.0"

    def log_message(self, format: str, *args: Any) -> None:  # silence the default stderr log
        pass

    def do_POST(self) -> None:  # http.server's naming
        stub = self.stub
        length = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(length)
        body: dict[str, Any] = json.loads(raw or b"{}")
        started = time.monotonic()
        headers = {k.lower(): v for k, v in self.headers.items()}
        # Recorded on arrival and completed before the answer is written: a test that
        # reads stub.requests as soon as its client returns sees the whole request.
        entry = Recorded(self.path, body, headers, started, 0.0, 0, "?")
        stub._record(entry)
        stub._enter()
        try:
            chosen = stub._next()
            entry.behaviour = chosen.kind
            if stub.latency_s:
                stub.stopping.wait(stub.latency_s)
            self._respond(body, chosen, entry)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout): nothing to answer
        finally:
            stub._leave()
            entry.finished = time.monotonic()

    def _respond(self, body: dict[str, Any], behaviour: Behaviour, entry: Recorded) -> None:
        """Writes the response for ``behaviour``, noting its status and usage in ``entry`` first."""
        if behaviour.kind == "hang":
            self.stub.stopping.wait(MAX_HANG_S)
            return
        if behaviour.kind == "slow":
            self.stub.stopping.wait(behaviour.seconds)
        if behaviour.kind == "status":
            self._error(behaviour, entry)
            return
        if behaviour.kind == "malformed" or (behaviour.kind == "broken" and not body.get("stream")):
            entry.status = 200
            self._send(200, b'{"id": "chatcmpl-broken", "choices": [')
            return
        if self.path.endswith("/chat/completions") and body.get("stream"):
            payload = _completion(body, behaviour, self.stub.answer_text, self.stub.answer_from_sources)
            entry.status, entry.usage = 200, payload.get("usage", {})
            self._stream(body, payload, behaviour)
            return
        if self.path.endswith("/embeddings"):
            payload = _embeddings(body, self.stub.dimension)
        elif self.path.endswith("/chat/completions"):
            payload = _completion(body, behaviour, self.stub.answer_text, self.stub.answer_from_sources)
        else:
            entry.status = 404
            self._send(404, json.dumps({"error": {"message": "no such path", "type": "invalid_request_error"}}).encode())
            return
        entry.status, entry.usage = 200, payload.get("usage", {})
        self._send(200, json.dumps(payload).encode())

    def _error(self, behaviour: Behaviour, entry: Recorded) -> None:
        error = {"error": {"message": behaviour.message or f"stub error {behaviour.status}", "type": "server_error", "code": None}}
        extra = {"Retry-After": behaviour.retry_after} if behaviour.retry_after is not None else {}
        entry.status = behaviour.status
        self._send(behaviour.status, json.dumps(error).encode(), extra)

    def _stream(self, body: dict[str, Any], payload: dict[str, Any], behaviour: Behaviour) -> None:
        """Writes ``payload`` (a chat.completion) as OpenAI streams it, a token at a time at the
        stub's pace; a ``broken`` behaviour stops after its tokens, as a cut connection."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()  # no length: HTTP/1.0 ends the body when the connection closes
        head = {key: payload[key] for key in ("id", "created", "model")}
        choices = payload["choices"]
        text = choices[0]["message"]["content"] if choices else ""
        self._event({**head, "choices": [_delta({"role": "assistant", "content": ""})] if choices else []})
        pace = 1.0 / self.stub.tokens_per_s if self.stub.tokens_per_s > 0 else 0.0
        for count, token in enumerate(stream_tokens(text)):
            if behaviour.kind == "broken" and count >= behaviour.tokens:
                self.wfile.flush()
                return
            if pace and self.stub.stopping.wait(pace):
                return
            self._event({**head, "choices": [_delta({"content": token})]})
        if behaviour.kind == "broken":
            return
        if choices:
            self._event({**head, "choices": [_delta({}, "stop")]})
        if (body.get("stream_options") or {}).get("include_usage"):
            self._event({**head, "choices": [], "usage": payload["usage"]})
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()

    def _event(self, chunk: dict[str, Any]) -> None:
        data = json.dumps({**chunk, "object": "chat.completion.chunk"})
        self.wfile.write(f"data: {data}\n\n".encode())
        self.wfile.flush()

    def _send(self, status: int, data: bytes, extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)


def _words(text: str) -> int:
    return len(text.split())


def _completion(body: dict[str, Any], behaviour: Behaviour, answer_text: str, mode: str = "") -> dict[str, Any]:
    """A chat.completion object answering ``body`` (``mode``: see the module docstring)."""
    messages = body.get("messages", [])
    system = " ".join(m.get("content", "") for m in messages if m.get("role") == "system")
    user = " ".join(m.get("content", "") for m in messages if m.get("role") == "user")
    if behaviour.content is not None:
        content = behaviour.content
    elif "Summarizing" in system:
        match = _INSTRUCTION.search(user)
        cluster = _EXCERPT_TAG.sub(" ", match.group(1) if match else user).rstrip(":").split()
        content = "Summary: " + " ".join(cluster[:SUMMARY_WORDS])
    elif mode:
        content = answer_from_sources(user, mode) or answer_text
    else:
        content = answer_text
    if behaviour.kind == "empty":
        content = "   "
    prompt_tokens = _words(system) + _words(user)
    completion_tokens = _words(content)
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
             "total_tokens": prompt_tokens + completion_tokens}
    choices = [] if behaviour.kind == "no_choices" else [
        {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop", "logprobs": None}
    ]
    return {"id": "chatcmpl-" + hashlib.sha1(user.encode()).hexdigest()[:12], "object": "chat.completion",
            "created": int(time.time()), "model": body.get("model", ""), "choices": choices, "usage": usage}


def answer_from_sources(prompt: str, mode: str) -> str:
    """An answer made of the first sentence of each of the first :data:`SOURCES_ANSWERED`
    source blocks of ``prompt``, each citing its own number (``"faithful"``) or the next
    source's (``"miscite"``, wrapping round); empty when the prompt holds no source."""
    if mode not in ANSWER_MODES:
        raise ValueError(f"unknown answer mode {mode!r}; expected one of {ANSWER_MODES}")
    blocks = [(int(n), text) for n, text in _SOURCE_BLOCK.findall(prompt)]
    parts = []
    for place, (number, text) in enumerate(blocks[:SOURCES_ANSWERED]):
        first = _FIRST_SENTENCE.search(text)
        sentence = " ".join((first.group(0) if first else text).split())
        cited = number if mode == "faithful" else blocks[(place + 1) % len(blocks)][0]
        parts.append(f"{sentence} [{cited}]")
    return " ".join(parts)


_TOKEN = re.compile(r"\s*\w+|\s*[^\w\s]|\s+")


def stream_tokens(text: str) -> list[str]:
    """``text`` cut as the stub streams it: words with the whitespace before them, punctuation
    one character at a time (joined, they are ``text``)."""
    return _TOKEN.findall(text)


def _delta(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
    return {"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}


def stub_vector(text: str, dimension: int) -> list[float]:
    """The deterministic (not normalised) vector the stub returns for ``text``."""
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    return (np.random.default_rng(seed).standard_normal(dimension) * 3.0).tolist()


def _embeddings(body: dict[str, Any], dimension: int) -> dict[str, Any]:
    """An embeddings list object for ``body["input"]`` (a string or a list of strings)."""
    texts = body.get("input", [])
    texts = [texts] if isinstance(texts, str) else list(texts)
    tokens = sum(_words(t) for t in texts)
    data = [{"object": "embedding", "index": i, "embedding": stub_vector(t, dimension)} for i, t in enumerate(texts)]
    return {"object": "list", "data": data, "model": body.get("model", ""),
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}


@contextmanager
def running_stub(dimension: int = 32, answer_text: str | None = None, tokens_per_s: float = 0.0) -> Iterator[OpenAIStub]:
    """A started stub, stopped (all waits ended, sockets closed) on exit; ``answer_text`` and
    ``tokens_per_s`` set :attr:`OpenAIStub.answer_text` and :attr:`OpenAIStub.tokens_per_s`."""
    stub = OpenAIStub(dimension)
    if answer_text is not None:
        stub.answer_text = answer_text
    stub.tokens_per_s = tokens_per_s
    stub.start()
    try:
        yield stub
    finally:
        stub.stop()
