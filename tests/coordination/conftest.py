"""Fixtures of the coordination tests: a real Valkey server (:class:`testkit.valkey.ValkeyProcess`).

``valkey`` is one server for the whole session; ``redis_url`` empties it (FLUSHALL) before
each test and gives its URL. ``own_valkey`` is a private server for a test that stops,
restarts, kills or pauses it; it is stopped at the test's end whatever happened.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from testkit.valkey import ValkeyProcess


@pytest.fixture(scope="session")
def valkey(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ValkeyProcess]:
    """One Valkey server on 127.0.0.1 for the session. Tests must not stop it: use ``own_valkey``."""
    server = ValkeyProcess(directory=tmp_path_factory.mktemp("valkey"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def redis_url(valkey: ValkeyProcess) -> str:
    """The session server's URL, emptied of every key (all databases) before the test."""
    if not valkey.running or valkey.paused:
        pytest.fail("a test stopped or paused the session's Valkey server; use own_valkey for that", pytrace=False)
    client = redis.Redis.from_url(valkey.url, socket_timeout=5)
    try:
        client.flushall()
    finally:
        client.close()
    return valkey.url


@pytest.fixture
def own_valkey(tmp_path: Path) -> Iterator[ValkeyProcess]:
    """A private, started Valkey server for this test alone; stopped at teardown."""
    server = ValkeyProcess(directory=tmp_path / "valkey")
    try:
        server.start()
        yield server
    finally:
        server.stop()
