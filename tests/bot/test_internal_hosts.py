"""Error replies in chat never name the bot's internal servers (issue 28, point 8).

A failing language-model endpoint (the OpenAI stand-in on 127.0.0.1, answering 500, 401,
junk or nothing) and a failing Chroma host (a real ``chroma run`` whose port is then
taken by a reverse proxy's "502 Bad Gateway" page naming its upstream) are driven
through the real chat handler and rebuild scheduler. The replies say what kind of server
failed and give a reference; the host, the URL and the port are in the log only.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from bot.config import BotConfig, Config
from bot.engine_calls import AsyncEngine
from bot.handler import ChatHandler
from bot.neutral import Command, Person, Question, Reply, ReplyKind
from bot.rebuilds.in_process import RebuildScheduler
from raptor_engine import ChannelKey, Document, Engine, ExtractiveSummarizer
from raptor_engine.llm import LLMAnswerer, LLMClient, LLMSettings
from raptor_engine.store import ChromaStore
from testkit.openai_stub import Behaviour, running_stub
from tests.conftest import make_engine, start_chroma_server

KEY = ChannelKey("slack", "T1", "C-hosts")
ASKER = Person("U-asker", "Asker")
ADMIN = Person("U-admin", "Admin")
NOTE = "Deploys are frozen on Fridays after noon, so that nobody is paged over the weekend."
UPSTREAM = "chroma-0.db.internal:8000"  # what the proxy's error page names, as nginx's does


class Replies:
    """The replies sent, and a handler and scheduler on ``engine`` to send them."""

    def __init__(self, engine: Engine) -> None:
        self.sent: list[Reply] = []
        config = Config(bot=BotConfig(admins=[ADMIN.id], progress_every_s=3600))
        self.scheduler = RebuildScheduler(AsyncEngine(engine), config.bot)
        self.handler = ChatHandler(AsyncEngine(engine), config, self.scheduler)

    async def send(self, reply: Reply) -> None:
        self.sent.append(reply)

    async def ask(self) -> Reply:
        await self.handler.handle(Question(KEY, ASKER, "When are deploys frozen?"), self.send)
        return self.sent[-1]


def assert_names_no_server(reply: Reply, *places: str) -> None:
    assert reply.kind is ReplyKind.ERROR, reply
    for place in places:
        assert place not in reply.text, reply.text
    assert reply.reference and reply.reference in reply.text, reply.text


def test_a_failing_model_endpoint_is_named_in_the_log_only(
        embedder: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    with running_stub() as stub:
        host_port = stub.base_url.split("//", 1)[1].split("/", 1)[0]
        port = host_port.rsplit(":", 1)[1]
        settings = LLMSettings(base_url=stub.base_url, model="stub-model", max_retries=1, backoff_base_s=0.01,
                               timeout_s=1.0)
        with LLMClient(settings) as client:
            counter = embedder.token_counter()
            engine = Engine(ChromaStore.embedded(tmp_path / "chroma"), embedder, counter,
                            ExtractiveSummarizer(counter), LLMAnswerer(client, settings))
            engine.ingest(KEY, Document(NOTE, "deploys"))
            said: dict[str, str] = {}

            async def body() -> None:
                chat = Replies(engine)
                for name, behaviour in (("500", Behaviour.error(500)), ("401", Behaviour.error(401)),
                                        ("hang", Behaviour.hang()), ("junk", Behaviour.malformed())):
                    stub.default = behaviour
                    reply = await chat.ask()
                    assert_names_no_server(reply, stub.base_url, host_port, "127.0.0.1", port)
                    said[name] = reply.text
                    assert any(reply.reference in r.getMessage() and host_port in r.getMessage()
                               for r in caplog.records), "the log has the server and the reference"

            asyncio.run(body())
    assert "HTTP 500" in said["500"] and "refused" in said["401"]
    assert "did not answer in time" in said["hang"] and "unusable response" in said["junk"]


class BadGateway(BaseHTTPRequestHandler):
    """A reverse proxy whose upstream is gone: every request gets its 502 page, naming the upstream."""

    def _fail(self) -> None:
        body = (f"<html><body><h1>502 Bad Gateway</h1>upstream {UPSTREAM} refused the connection "
                f"(proxy at {self.server.server_address[0]}:{self.server.server_address[1]})</body></html>").encode()
        self.send_response(502)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_DELETE = _fail

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
        pass


@contextmanager
def bad_gateway(port: int) -> Iterator[None]:
    server = ThreadingHTTPServer(("127.0.0.1", port), BadGateway)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()


def test_a_failing_chroma_host_is_named_in_the_log_only(
        embedder: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    process, port = start_chroma_server(tmp_path / "db", tmp_path / "server.log")
    try:
        engine = make_engine(ChromaStore.remote("127.0.0.1", port), embedder)
        engine.ingest(KEY, Document(NOTE, "deploys"))
    finally:
        process.terminate()
        process.wait(timeout=15)
    places = (UPSTREAM, "chroma-0", f":{port}", str(port), "127.0.0.1")

    async def body() -> list[Reply]:
        chat = Replies(engine)
        asked = await chat.ask()
        await chat.handler.handle(Command(KEY, ADMIN, "status"), chat.send)
        status = chat.sent[-1]
        await chat.handler.handle(Command(KEY, ADMIN, "rebuild"), chat.send)
        await chat.scheduler.wait_idle()
        return [asked, status, chat.sent[-1]]

    with bad_gateway(port):
        replies = asyncio.run(body())
    for reply in replies:
        assert_names_no_server(reply, *places)
        assert "Chroma" in reply.text, reply.text
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert UPSTREAM in logged  # the operator still learns which server failed
