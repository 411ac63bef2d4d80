"""Fixtures of the coordination tests: a real Valkey server (:class:`testkit.valkey.ValkeyProcess`).

``valkey`` is one server for the whole session; ``redis_url`` empties it (FLUSHALL) before
each test and gives its URL. ``own_valkey`` is a private server for a test that stops,
restarts, kills or pauses it; it is stopped at the test's end whatever happened.
:func:`coordination_config` is the configuration of a process of the tests' bot (its
``coordination.secret`` is the one the test cluster's processes share).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import redis

from bot.coordination.link import RedisLink
from bot.coordination.reply_stream import ReplyReader
from bot.coordination.signing import RecordSigner
from bot.deploy_config import REPLY_MAX_AGE_S, CoordinationConfig
from bot.neutral import Courier
from bot.rebuilds.requests import RebuildRequests
from testkit.cluster import COORDINATION_SECRET
from testkit.valkey import ValkeyProcess


def coordination_config(url: str, **settings: Any) -> CoordinationConfig:
    """Coordination through ``url`` with the tests' secret and a short connect time-out;
    ``settings`` override any key."""
    return CoordinationConfig.model_validate(
        {"redis_url": url, "secret": COORDINATION_SECRET, "connect_timeout_s": 0.5, **settings})


def signer() -> RecordSigner:
    """The signer of the tests' bot (what its front-ends and workers sign with)."""
    return RecordSigner(COORDINATION_SECRET)


def reply_reader(link: RedisLink, couriers: Mapping[str, Courier], consumer: str,
                 max_age_s: float = REPLY_MAX_AGE_S) -> ReplyReader:
    """A front-end's reader of rebuild replies, as ``bot.front_end.FrontEnd.reader`` makes it."""
    return ReplyReader(link, couriers, consumer, signer(), RebuildRequests(link, signer()).asked, max_age_s)


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
