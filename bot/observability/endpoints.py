"""``/metrics``, ``/healthz`` and ``/readyz`` over aiohttp, for Prometheus and an orchestrator.

* ``GET /metrics``: :meth:`Metrics.render`, with :data:`CONTENT_TYPE`;
* ``GET /healthz``: 200 ``ok`` whenever the server's event loop answers (liveness);
* ``GET /readyz``: runs every readiness probe concurrently, each under a timeout; 200 when all
  returned True, else 503; the body is ``{"ready": bool, "checks": {name: status}}`` with status
  ``ok``, ``failing`` (returned False), ``timeout`` or ``error`` (raised). A probe is a blocking
  check, run on a thread of its own and never twice at once (:class:`SingleFlight`): a check
  still running when the next ``/readyz`` comes is waited on again, not started anew, so a hung
  server holds one thread per probe whatever the orchestrator does, and none of any executor.

Two ways to run it:

* :meth:`HealthServer.start` / :meth:`HealthServer.stop` on the caller's running event loop
  (the bot's front end);
* :meth:`HealthServer.start_in_thread` / :meth:`HealthServer.stop_thread` for a process whose
  main thread is busy with blocking work (a queue worker): the server gets its own event loop
  in a daemon thread; ``/healthz`` then only shows that the server's thread is alive, not the
  main thread.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable

from aiohttp import web

from bot.observability.metrics import CONTENT_TYPE, Metrics
from bot.observability.single_flight import SingleFlight

log = logging.getLogger(__name__)

# A readiness check: True when the dependency it checks is usable. It blocks (it asks a server),
# on a thread of its own; it should bound its own wait, so that its thread ends.
Probe = Callable[[], bool]

# How long start_in_thread waits for the server's loop to bind its port.
THREAD_START_TIMEOUT = 10.0


class HealthServer:
    """An aiohttp server for the process's metrics, liveness and readiness.

    ``probe_timeout`` (seconds) bounds each readiness probe, so a hung dependency makes
    ``/readyz`` answer 503 promptly instead of hanging the orchestrator's check.
    """

    def __init__(self, metrics: Metrics, *, probe_timeout: float = 2.0) -> None:
        self._metrics = metrics
        self._probe_timeout = probe_timeout
        self._probes: dict[str, SingleFlight] = {}
        self._runner: web.AppRunner | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def add_probe(self, name: str, probe: Probe) -> None:
        """Check ``probe`` on every ``/readyz`` as ``name`` (replacing a probe of that name)."""
        self._probes[name] = SingleFlight(name, probe)

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/metrics", self._serve_metrics)
        app.router.add_get("/healthz", self._serve_health)
        app.router.add_get("/readyz", self._serve_ready)
        return app

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        """Serve on ``host:port`` from the running loop and return the bound port (``port`` 0
        picks a free one). Raises RuntimeError when already started."""
        if self._runner is not None:
            raise RuntimeError("HealthServer already started")
        # No access log: a scrape every few seconds would drown the bot's own lines. A short
        # shutdown timeout: stop() should not wait a minute for a hung readiness check.
        runner = web.AppRunner(self._app(), access_log=None, shutdown_timeout=self._probe_timeout + 1.0)
        await runner.setup()
        try:
            site = web.TCPSite(runner, host, port)
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        bound: int = runner.addresses[0][1]
        log.info("health server listening on %s:%d", host, bound)
        return bound

    async def stop(self) -> None:
        """Stop serving; a no-op when not started."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    def start_in_thread(self, host: str = "127.0.0.1", port: int = 0) -> int:
        """Serve from a new event loop in a daemon thread and return the bound port.

        For processes whose main thread blocks; readiness probes then run on the server's own
        loop (see the module docstring). Raises RuntimeError when already started in a thread,
        and whatever binding raised (the thread is then stopped again).
        """
        if self._thread is not None:
            raise RuntimeError("HealthServer already running in a thread")
        loop = asyncio.new_event_loop()
        # Daemon: a worker that exits without calling stop_thread must not hang on this thread.
        thread = threading.Thread(target=_run_loop, args=(loop,), name="health-server", daemon=True)
        thread.start()
        self._loop, self._thread = loop, thread
        try:
            return asyncio.run_coroutine_threadsafe(self.start(host, port), loop).result(THREAD_START_TIMEOUT)
        except BaseException:
            self._end_thread(loop, thread)
            raise

    def stop_thread(self) -> None:
        """Stop the server started by :meth:`start_in_thread` and its thread; a no-op when not started."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(self.stop(), loop).result(self._probe_timeout + 5.0)
        finally:
            self._end_thread(loop, thread)

    def _end_thread(self, loop: asyncio.AbstractEventLoop, thread: threading.Thread) -> None:
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        self._loop = self._thread = None

    async def _serve_metrics(self, request: web.Request) -> web.Response:
        # Set as a header: aiohttp's content_type argument refuses one carrying a charset.
        # In a thread: a gauge's callable may ask a server (the queue depth), which must not stall the loop.
        body = await asyncio.to_thread(self._metrics.render)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})

    async def _serve_health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _serve_ready(self, request: web.Request) -> web.Response:
        checks = await self.check_readiness()
        ready = all(status == "ok" for status in checks.values())
        return web.json_response({"ready": ready, "checks": checks}, status=200 if ready else 503)

    async def check_readiness(self) -> dict[str, str]:
        """Run every probe concurrently; each name -> ``ok``, ``failing``, ``timeout`` or ``error``."""
        probes = dict(self._probes)  # a snapshot: add_probe may run meanwhile from another thread
        statuses = await asyncio.gather(*(self._check(probe) for probe in probes.values()))
        return dict(zip(probes, statuses))

    async def _check(self, probe: SingleFlight) -> str:
        name = probe.name
        try:
            async with asyncio.timeout(self._probe_timeout):
                ok = await probe.run()
        except TimeoutError:
            log.debug("readiness probe %s timed out after %.1f s", name, self._probe_timeout)
            return "timeout"
        except Exception:
            log.debug("readiness probe %s raised", name, exc_info=True)
            return "error"
        # Only a real True counts: a probe returning None by mistake must not read as ready.
        return "ok" if ok is True else "failing"


def _run_loop(loop: asyncio.AbstractEventLoop) -> None:
    """The server thread's body: run ``loop`` until stopped, then close it on this thread."""
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
