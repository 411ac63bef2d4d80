"""The HTTP endpoint Slack posts events, slash commands and clicks to (HTTP mode).

Contract, in this order, for every POST:

1. the signature is checked first, on the body's bytes as they came, with slack_sdk's
   ``SignatureVerifier`` (``v0`` HMAC of the timestamp and body with the signing secret,
   the timestamp within 5 minutes): a request without a valid one gets 401 and nothing
   of it is read. The verifier reads a body as UTF-8 text, as Slack sends it, so a body
   that is not UTF-8 cannot carry Slack's signature and gets 401 too;
2. the body is then read as slack-bolt reads it (JSON, a form, or a form's ``payload``
   JSON): one that cannot be read, or is not a JSON object, gets 400;
3. everything else goes to the bolt app, whose answer is returned.

Refusals are logged in one line, never with a traceback: an unsigned request at INFO (the
endpoint is open to anyone), a signed one Slack could not have meant at WARNING.
"""

from __future__ import annotations

import logging

from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response
from slack_bolt.app.async_app import AsyncApp
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.request.internals import parse_body
from slack_sdk.signature import SignatureVerifier

log = logging.getLogger(__name__)


class EventsEndpoint:
    """The endpoint of ``app`` (see the module docstring), checking signatures with
    ``signing_secret``; :meth:`handle` is the aiohttp handler."""

    def __init__(self, app: AsyncApp, signing_secret: str) -> None:
        self._app = app
        self._verifier = SignatureVerifier(signing_secret)

    async def handle(self, request: web.Request) -> web.Response:
        """Answers one POST (see the module docstring)."""
        raw = await request.read()
        if not self._signed(raw, request):
            log.info("Slack HTTP: refused a request to %s without a valid signature", request.path)
            return web.Response(status=401, text="invalid signature")
        bolt_request = read_request(raw.decode(), request)
        if bolt_request is None:
            log.warning("Slack HTTP: refused a signed request to %s whose body is not a readable payload "
                        "(%d bytes, %s)", request.path, len(raw), request.content_type)
            return web.Response(status=400, text="unreadable body")
        return await to_aiohttp_response(await self._app.async_dispatch(bolt_request))

    def _signed(self, raw: bytes, request: web.Request) -> bool:
        try:
            return self._verifier.is_valid_request(raw, dict(request.headers))
        except ValueError:  # a body that is not UTF-8, a timestamp that is not a number
            return False


def read_request(body: str, request: web.Request) -> AsyncBoltRequest | None:
    """``request`` with its ``body`` (text) as slack-bolt's request; None when bolt could not
    read the body or it is not a JSON object (a truncated body, an array, a cut ``payload=``
    form). It is read with bolt's own ``parse_body`` first: bolt would raise on the first
    kind and fail later, with a traceback, on the others."""
    try:
        payload = parse_body(body, request.content_type)
    except ValueError:  # json.JSONDecodeError is one
        return None
    if not isinstance(payload, dict):
        return None
    return AsyncBoltRequest(body=body, query=request.query_string, headers=dict(request.headers))
