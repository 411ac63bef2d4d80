"""The HTTP shapes the Discord stand-in's REST routes share: the API's path prefix, JSON answers as
discord.py reads them, Discord's error body, and the JSON and files of a request (plain JSON, or
multipart with ``payload_json``).
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

API = "/api/v10"


def json_response(data: Any, status: int = 200) -> web.Response:
    """``data`` as a JSON answer with ``status``."""
    # Exactly "application/json": discord.py compares the header as a string (see the notes).
    return web.Response(status=status, body=json.dumps(data).encode(), headers={"Content-Type": "application/json"})


def error_response(status: int, code: int, message: str) -> web.Response:
    """Discord's error body (``{"message", "code"}``) with ``status``."""
    return json_response({"message": message, "code": code}, status)


async def read_body(request: web.Request) -> tuple[Any, list[tuple[str, bytes]]]:
    """The JSON body (``payload_json`` of a multipart body) and the files sent with it."""
    if not request.can_read_body:
        return None, []
    content_type = request.headers.get("Content-Type", "")
    if content_type.startswith("multipart/"):
        files: list[tuple[str, bytes]] = []
        body: Any = None
        reader = await request.multipart()
        while (part := await reader.next()) is not None:
            data = await part.read()  # type: ignore[union-attr]
            if part.name == "payload_json":  # type: ignore[union-attr]
                body = json.loads(data)
            elif part.filename:  # type: ignore[union-attr]
                files.append((part.filename, bytes(data)))  # type: ignore[union-attr]
        return body, files
    raw = await request.read()
    if not raw:
        return None, []
    try:
        return json.loads(raw), []
    except ValueError:
        return raw.decode(errors="replace"), []
