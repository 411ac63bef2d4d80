"""The readiness probes of a process: the Chroma store, the coordination server, the model endpoint.

Each probe is a blocking check that bounds its own wait (the store's deadline,
``chroma.timeout_s``; Redis's socket timeout; a connect timeout), which the health server
runs on a thread of its own (``endpoints.py``): never on the engine's threads, whose calls a
hung store would otherwise have to share with every probe.
"""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

from bot.config import Config
from bot.coordination.link import RedisLink
from bot.observability.endpoints import HealthServer
from raptor_engine import Engine

PROBE_CONNECT_S = 2.0


def add_probes(server: HealthServer, config: Config, engine: Engine, link: RedisLink | None) -> None:
    """Adds ``chroma`` always, ``redis`` with coordination, ``model`` with a language model."""
    server.add_probe("chroma", engine.store_reachable)
    if link is not None:
        server.add_probe("redis", link.ping_sync)
    if config.llm.base_url:
        url = config.llm.base_url
        server.add_probe("model", lambda: _accepts_connections(url))


def _accepts_connections(url: str) -> bool:
    """Whether the endpoint's host takes a TCP connection: enough to say it is there, without
    spending a request (and an API key's quota) on every probe."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname or "localhost", port), timeout=PROBE_CONNECT_S):
            return True
    except OSError:
        return False
