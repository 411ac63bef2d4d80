"""discord.py's connection, kept up: its endpoints (Discord's, or a proxy's or stand-in's),
reconnection after unexpected failures (counted, reason ``"error"``, by a client that
:class:`CountsReconnects`), and malformed gateway events dropped rather than allowed to
end the gateway loop. discord.py's own reconnects (a silent gateway, missing heartbeat
ACKs) are logged and counted by :mod:`~adapters.discord_bot.lifecycle`."""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any, Protocol, runtime_checkable

import discord
import yarl

from bot.errors import log_failure

log = logging.getLogger(__name__)

API_VERSION_PATH = re.compile(r"/api/v\d+$")
RECONNECT_MAX_S = 60.0
STABLE_CONNECTION_S = 60.0  # a connection that lasted this long resets the reconnect back-off


@runtime_checkable
class CountsReconnects(Protocol):
    """A client that counts its reconnects (:class:`~adapters.discord_bot.lifecycle.ClientCore`)."""

    def note_reconnect(self, reason: str) -> None: ...


# -- resilience to malformed events -----------------------------------------------------------------


def guard_parsers(state: Any) -> None:
    """Wraps discord.py's gateway event parsers so that a malformed event (a missing key,
    a wrong type) is logged and dropped: discord.py lets such an exception end its
    gateway loop, which would take the bot down. READY is left alone: without it
    nothing works, and the runner's reconnect is the better answer."""
    parsers = getattr(state, "parsers", None)
    if not isinstance(parsers, dict):
        log.warning("discord.py's parsers are not where expected; malformed events will make the bot reconnect")
        return
    for event, parse in list(parsers.items()):
        if event != "READY":
            parsers[event] = _guarded(event, parse)


def _guarded(event: str, parse: Callable[[Any], None]) -> Callable[[Any], None]:
    def parse_safely(data: Any) -> None:
        try:
            parse(data)
        except Exception:
            log_failure(log, "dropped a malformed %s event from Discord (reference %s)", event)

    return parse_safely


# -- endpoints and reconnection -------------------------------------------------------------------


def api_base(url: str) -> str:
    """The REST base discord.py puts before every route: the URL as given when it ends with
    ``/api/vN``, else with ``/api/v10`` added."""
    url = url.rstrip("/")
    return url if API_VERSION_PATH.search(url) else url + "/api/v10"


@contextmanager
def discord_endpoints(api_base_url: str | None, gateway_url: str | None) -> Iterator[None]:
    """Points discord.py (process-wide) at other REST and gateway endpoints while the block
    runs, and restores what was there on exit. None keeps Discord's."""
    route_base = discord.http.Route.BASE
    gateway = discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY
    try:
        if api_base_url:
            discord.http.Route.BASE = api_base(api_base_url)
        if gateway_url:
            discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(gateway_url)
        yield
    finally:
        discord.http.Route.BASE = route_base
        discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = gateway


async def stay_connected(client: discord.Client) -> None:
    """``client.connect()`` until the client is closed. discord.py reconnects by itself after
    network failures; an exception it does not expect (a garbage frame) escapes its loop
    with the client still open: then the old connection is dropped and a new one made, at
    once the first time, backing off when it keeps happening. What discord.py gives up on
    (it closes the client, e.g. a refused token) and its ``ClientException`` s (missing
    privileged intents) are raised."""
    failures = 0
    while not client.is_closed():
        started = time.monotonic()
        try:
            await client.connect(reconnect=True)
            return
        except (discord.ClientException, discord.LoginFailure):
            raise
        except Exception:
            if client.is_closed():
                raise
            log_failure(log, "the Discord connection failed unexpectedly (reference %s); reconnecting")
        if isinstance(client, CountsReconnects):
            client.note_reconnect("error")
        await _drop_connection(client)
        failures = 1 if time.monotonic() - started > STABLE_CONNECTION_S else failures + 1
        await asyncio.sleep(0 if failures == 1 else min(RECONNECT_MAX_S, 2.0 ** (failures - 1)))


async def _drop_connection(client: discord.Client) -> None:
    """Closes the websocket an unexpected exception left open (its heartbeat thread with it)."""
    socket = getattr(client, "ws", None)
    if socket is not None:
        with suppress(Exception):
            await socket.close(code=4000)
