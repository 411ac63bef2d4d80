"""The Discord stand-in as tests run it: :class:`FakeDiscord`, all its layers (gateway, world,
failures, REST routes) served by one aiohttp server on 127.0.0.1 at a free port.
"""

from __future__ import annotations

from aiohttp import web

from testkit.discord_http import API
from testkit.discord_rest import DiscordRest


class FakeDiscord(DiscordRest):
    """The stand-in Discord. ``await start()`` it on the test's loop, ``await stop()`` it at the end.

    It starts with one bot user and application, and no guilds: tests add them
    with :meth:`add_guild` before the client connects (or dispatch GUILD_CREATE
    themselves after).
    """

    async def start(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_get("/", self._gateway)
        app.router.add_get("/cdn/{path:.*}", self._cdn)
        app.router.add_route("*", API + "/{path:.*}", self._rest)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        for socket in list(self._sockets):
            await socket.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
