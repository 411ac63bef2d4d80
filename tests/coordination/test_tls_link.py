"""``rediss://`` with a CA file, as the README and config.example.yaml show it: the processes'
link verifies the server against that CA, for its own calls and for RQ's. The Valkey server of
the tests is built without TLS, so a TLS terminator (Python's ``ssl``, a certificate from a
CA made here with ``openssl``) stands in front of it, as a TLS proxy or a managed Redis would."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bot.coordination.link import CoordinationDown, RedisLink
from bot.neutral import ChannelKey
from bot.rebuilds.job_queue import RebuildQueue
from testkit.cluster import BackgroundLoop
from testkit.valkey import ValkeyProcess
from tests.coordination.conftest import coordination_config

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")


def make_ca(directory: Path, name: str) -> tuple[Path, Path]:
    """A CA's certificate and key."""
    cert, key = directory / f"{name}.pem", directory / f"{name}.key"
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={name}",
            "-keyout", str(key), "-out", str(cert))
    return cert, key


def make_server_cert(directory: Path, ca: tuple[Path, Path]) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 signed by ``ca``, and its key."""
    cert, key, request, extensions = (directory / name for name in ("server.pem", "server.key", "server.csr", "ext"))
    extensions.write_text("subjectAltName=IP:127.0.0.1\n")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", str(key), "-out", str(request))
    openssl("x509", "-req", "-in", str(request), "-CA", str(ca[0]), "-CAkey", str(ca[1]), "-CAcreateserial",
            "-days", "2", "-extfile", str(extensions), "-out", str(cert))
    return cert, key


def openssl(*arguments: str) -> None:
    subprocess.run(["openssl", *arguments], check=True, capture_output=True, timeout=60)


@dataclass
class TlsServer:
    port: int
    ca: Path  # the CA that signed the server's certificate
    other_ca: Path  # a CA that did not


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


@pytest.fixture
def tls_valkey(own_valkey: ValkeyProcess, tmp_path: Path) -> Iterator[TlsServer]:
    """TLS on 127.0.0.1 in front of a private Valkey server."""
    ca = make_ca(tmp_path, "bot-ca")
    other_ca, _ = make_ca(tmp_path, "other-ca")
    cert, key = make_server_cert(tmp_path, ca)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)

    async def relay(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        server_reader, server_writer = await asyncio.open_connection(own_valkey.host, own_valkey.port)
        await asyncio.gather(_pipe(client_reader, server_writer), _pipe(server_reader, client_writer))

    loop = BackgroundLoop()

    async def start() -> asyncio.Server:
        return await asyncio.start_server(relay, "127.0.0.1", 0, ssl=context)

    async def stop() -> None:
        server.close()
        relays = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in relays:
            task.cancel()
        await asyncio.gather(*relays, return_exceptions=True)

    server = loop.run(start())
    try:
        yield TlsServer(server.sockets[0].getsockname()[1], ca[0], other_ca)
    finally:
        loop.run(stop())
        loop.close()


def test_rediss_with_the_ca_file_connects_for_the_link_and_for_the_job_queue(tls_valkey: TlsServer) -> None:
    link = RedisLink(coordination_config(f"rediss://127.0.0.1:{tls_valkey.port}/0?ssl_ca_certs={tls_valkey.ca}"))
    assert link.ping_sync()
    assert asyncio.run(link.ping())
    queue = RebuildQueue(link, 600)  # RQ's calls go through the same verified connection
    assert queue.enqueue_once(ChannelKey("slack", "T1", "C1"), "over TLS") and queue.depth() == 1


@pytest.mark.parametrize("query", ["", "?ssl_ca_certs={other_ca}"], ids=["the system's CAs", "another CA"])
def test_rediss_refuses_a_server_the_given_ca_did_not_sign(tls_valkey: TlsServer, query: str) -> None:
    url = f"rediss://127.0.0.1:{tls_valkey.port}/0" + query.format(other_ca=tls_valkey.other_ca)
    link = RedisLink(coordination_config(url))
    with pytest.raises(CoordinationDown) as down:
        link.run_sync(lambda r: r.ping())
    assert "certificate verify failed" in str(down.value.__cause__)
