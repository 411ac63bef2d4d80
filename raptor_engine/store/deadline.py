"""A deadline on every request to a Chroma server.

Contract: :func:`open_with_deadline` opens a client within ``timeout_s`` and leaves it giving up
each later request after ``timeout_s``, when ``httpx`` raises a ``TimeoutException`` that
:func:`~raptor_engine.store.common.translated` turns into
:class:`~raptor_engine.errors.StoreTimeout`. A server that accepts connections but never answers
(paused with SIGSTOP, overloaded, or behind a network that drops packets silently) would
otherwise hold the calling thread for ever.

Why it takes two steps: chromadb 1.5 makes its HTTP session with ``timeout=None`` and offers no
setting for a client-side timeout (its ``Settings`` carry only the server's own timeouts; chroma
issue 5805 kept the session without one). So:

- opening (``chromadb.HttpClient`` sends its first requests while it is made) runs on a daemon
  thread that the caller waits for at most the deadline; a server silent that long is a
  ``StoreTimeout``, and the thread is left to end when the server answers (one per failed open:
  a process opens its store once);
- once open, the session's own timeout (httpx's public ``Client.timeout``) is set, which bounds
  every later request: connecting, sending, and each wait for the answer.

The session is reached through the client's private attributes, the one place this package does
so (listed in ``tests/test_architecture.py``). A chromadb that moved them fails here, at open,
with a ``StoreError``, rather than running without a deadline.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, TimeoutError as FutureTimeout
from typing import Any

import httpx

from raptor_engine.errors import StoreError, StoreTimeout


def open_with_deadline(open_client: Callable[[], Any], timeout_s: float, where: str) -> Any:
    """``open_client()``'s client, each of its requests then given up after ``timeout_s``.
    Raises ``StoreTimeout`` when opening takes longer (``where`` names the server in the
    message), what ``open_client`` raised otherwise, and ``StoreError`` when the installed
    chromadb's client cannot be given a deadline."""
    client = _within(open_client, timeout_s, where)
    session = getattr(getattr(client, "_server", None), "_session", None)
    if not isinstance(session, httpx.Client):
        raise StoreError("the installed chromadb's HTTP client cannot be given a deadline (its session moved): "
                         "use a chromadb version this bot supports")
    session.timeout = httpx.Timeout(timeout_s)
    return client


def _within(work: Callable[[], Any], timeout_s: float, where: str) -> Any:
    """``work()`` on a daemon thread of its own, waited for ``timeout_s`` at most."""
    outcome: Future[Any] = Future()
    outcome.set_running_or_notify_cancel()

    def run() -> None:
        try:
            outcome.set_result(work())
        except BaseException as exc:  # noqa: BLE001 (handed to the caller, who raises it)
            outcome.set_exception(exc)

    threading.Thread(target=run, name="chroma-open", daemon=True).start()
    try:
        return outcome.result(timeout_s)
    except FutureTimeout:
        raise StoreTimeout(f"{where} did not answer within {timeout_s:g} s") from None
