"""A secured or hosted Chroma server: credentials, tenant and database, from the configuration on.

The real ``chromadb.HttpClient`` talks to a stand-in on 127.0.0.1 that plays a
secured hosted Chroma: a small reverse proxy that checks the credentials as
such a server does (401 with Chroma's ``AuthorizationError`` body without
them) and forwards everything else to the session's real ``chroma run``.
"""

from __future__ import annotations

import base64
import http.client
import json
import logging
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import chromadb
import pytest
from chromadb.config import Settings

from bot.composition import open_store
from bot.config import ChromaConfig, Config, load_config
from bot.errors import ConfigError
from raptor_engine.errors import StoreError, StoreUnavailable
from raptor_engine.store import REGISTRY_COLLECTION, ChromaStore
from raptor_engine.types import ChannelKey

TOKEN = "ck-7Hq2-secret.token"
USER, PASSWORD = "raptor", "pa55-word-secret"

Check = Callable[[Mapping[str, str]], bool]

_FORWARDED_OUT = {"host", "authorization", "x-chroma-token", "connection", "content-length"}
_FORWARDED_BACK = {"content-type", "chroma-trace-id"}


def bearer(headers: Mapping[str, str]) -> bool:
    return headers.get("Authorization") == f"Bearer {TOKEN}"


def chroma_token(headers: Mapping[str, str]) -> bool:
    return headers.get("X-Chroma-Token") == TOKEN


def basic(headers: Mapping[str, str]) -> bool:
    return headers.get("Authorization") == "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()


class _Proxy(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: SecuredChroma

    def do_GET(self) -> None:
        self._forward()

    do_POST = do_PUT = do_DELETE = do_PATCH = do_GET

    def _forward(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        self.server.seen.append(dict(self.headers))
        if not self.server.check(self.headers):
            refusal = json.dumps({"error": "AuthorizationError", "message": "Unauthorized"}).encode()
            self._reply(401, {"Content-Type": "application/json"}, refusal)
            return
        upstream = http.client.HTTPConnection(*self.server.upstream, timeout=30)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _FORWARDED_OUT}
            upstream.request(self.command, self.path, body=body, headers=headers)
            answer = upstream.getresponse()
            data = answer.read()
            self._reply(answer.status, {k: v for k, v in answer.getheaders() if k.lower() in _FORWARDED_BACK}, data)
        finally:
            upstream.close()

    def _reply(self, status: int, headers: Mapping[str, str], body: bytes) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


class SecuredChroma(ThreadingHTTPServer):
    """The stand-in: accepts requests whose headers pass ``check`` and records every request's headers."""

    daemon_threads = True

    def __init__(self, upstream: tuple[str, int], check: Check) -> None:
        super().__init__(("127.0.0.1", 0), _Proxy)
        self.upstream = upstream
        self.check = check
        self.seen: list[dict[str, str]] = []

    @property
    def port(self) -> int:
        return int(self.server_address[1])


@pytest.fixture
def secured(chroma_server: tuple[str, int]) -> Iterator[Callable[[Check], SecuredChroma]]:
    """Starts stand-ins in front of the session's ``chroma run`` (stopped at the end)."""
    started: list[SecuredChroma] = []

    def start(check: Check) -> SecuredChroma:
        server = SecuredChroma(chroma_server, check)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.shutdown()
        server.server_close()


def config(port: int, **chroma: str) -> Config:
    return Config(chroma=ChromaConfig(host="127.0.0.1", port=port, **chroma))


def key() -> ChannelKey:
    return ChannelKey("test", "secured", uuid.uuid4().hex[:12])


def test_a_bearer_token_opens_a_secured_server(secured: Callable[[Check], SecuredChroma],
                                               caplog: pytest.LogCaptureFixture) -> None:
    server = secured(bearer)
    with caplog.at_level(logging.DEBUG):
        store = open_store(config(server.port, token=TOKEN))
        channel = key()
        store.channel(channel)
    assert channel in store.channels()
    assert server.seen and all(bearer(headers) for headers in server.seen)
    assert TOKEN not in caplog.text and "with a token" in caplog.text


def test_basic_credentials_open_a_secured_server(secured: Callable[[Check], SecuredChroma]) -> None:
    server = secured(basic)
    channel = key()
    open_store(config(server.port, username=USER, password=PASSWORD)).channel(channel)
    assert server.seen and all(basic(headers) for headers in server.seen)


def test_hosted_chroma_with_its_token_header_tenant_and_database(
    secured: Callable[[Check], SecuredChroma], chroma_server: tuple[str, int]
) -> None:
    host, port = chroma_server
    tenant, database = f"acme-{uuid.uuid4().hex[:8]}", "raptor-bots"
    admin = chromadb.AdminClient(Settings(chroma_api_impl="chromadb.api.fastapi.FastAPI", chroma_server_host=host,
                                          chroma_server_http_port=port, anonymized_telemetry=False))
    admin.create_tenant(tenant)
    admin.create_database(database, tenant=tenant)
    server = secured(chroma_token)

    store = open_store(config(server.port, token=TOKEN, token_header="X-Chroma-Token", tenant=tenant,
                              database=database))
    channel = key()
    store.channel(channel)
    assert all(chroma_token(headers) and "Authorization" not in headers for headers in server.seen)
    # The channel lives in that tenant's database, and not in the default one.
    direct = chromadb.HttpClient(host=host, port=port, tenant=tenant, database=database,
                                 settings=Settings(anonymized_telemetry=False))
    assert REGISTRY_COLLECTION in [c.name for c in direct.list_collections()]
    assert channel in store.channels() and channel not in ChromaStore.remote(host, port).channels()

    with pytest.raises(StoreError, match="has no tenant") as missing:
        open_store(config(server.port, token=TOKEN, token_header="X-Chroma-Token", tenant=tenant,
                          database="no-such-database"))
    assert not isinstance(missing.value, StoreUnavailable)


@pytest.mark.parametrize("credentials", [{}, {"token": "ck-wrong-token"}, {"username": USER, "password": "not-the-pa55word"}])
def test_refused_credentials_are_a_clear_store_error(secured: Callable[[Check], SecuredChroma],
                                                     credentials: dict[str, str]) -> None:
    server = secured(bearer)
    refusal = r"the Chroma server at 127\.0\.0\.1:\d+ refused access: the credentials are missing or wrong"
    with pytest.raises(StoreError, match=refusal) as refused:
        open_store(config(server.port, **credentials))
    assert not isinstance(refused.value, StoreUnavailable)  # retrying will not help
    text = str(refused.value)
    assert all(secret not in text for secret in ("ck-wrong-token", "not-the-pa55word", PASSWORD, TOKEN))
    assert refused.value.__cause__ is None


def test_a_token_chroma_cannot_send_is_refused_before_connecting() -> None:
    with pytest.raises(StoreError, match="ASCII letters, digits and punctuation") as refused:
        ChromaStore.remote("127.0.0.1", 9, token="two words")
    assert "two words" not in str(refused.value)


def test_the_chroma_section_is_validated_without_echoing_secrets(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    problems = {
        f"chroma:\n  token: {TOKEN}\n": "need host",
        f"chroma:\n  host: db\n  token: {TOKEN}\n  username: u\n  password: {PASSWORD}\n": "not both",
        "chroma:\n  host: db\n  username: u\n": "go together",
        f"chroma:\n  host: db\n  username: 'a:b'\n  password: {PASSWORD}\n": "cannot contain ':'",
        "chroma:\n  database: mine\n": "need host",
        "chroma:\n  host: db\n  token_header: Bearer\n": "Authorization' or 'X-Chroma-Token",
    }
    for text, problem in problems.items():
        path.write_text(text)
        with pytest.raises(ConfigError, match=problem) as error:
            load_config(path)
        assert TOKEN not in str(error.value) and PASSWORD not in str(error.value)
    path.write_text("chroma:\n  host: db.internal\n  token: ${CHROMA_TOKEN}\n  token_header: X-Chroma-Token\n")
    loaded = load_config(path, {"CHROMA_TOKEN": TOKEN}).chroma
    assert loaded.token.get_secret_value() == TOKEN and TOKEN not in repr(loaded)
