"""What the Discord stand-in refuses on demand, and its rate limit: failures armed by a test
(:meth:`DiscordFaults.fail_next`), an API without Components v2
(:attr:`DiscordFaults.refuses_components_v2`) and Discord's limit on edits
(:attr:`DiscordFaults.edit_limit`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from testkit.discord_http import json_response
from testkit.discord_limits import components_v2_refusal, is_components_v2, message_errors
from testkit.discord_records import Failure
from testkit.discord_state import DiscordState


class DiscordFaults(DiscordState):
    """Failure injection and rate limiting, consulted by the REST routes."""

    def fail_next(self, method: str, path_pattern: str, status: int = 500, body: dict[str, Any] | None = None,
                  times: int = 1) -> None:
        """The next ``times`` requests matching (method, regex on the path after ``/api/v10``
        or ``/cdn``) fail with ``status`` and ``body``."""
        error = body or {"message": "500: Internal Server Error", "code": 0}
        self.failures.append(Failure(method, re.compile(path_pattern), status, error, times))

    def _injected_failure(self, method: str, path: str) -> web.Response | None:
        for failure in self.failures:
            if failure.times > 0 and failure.method == method and failure.path.search(path):
                failure.times -= 1
                return json_response(failure.body, failure.status)
        return None

    # An API without Components v2: a message or edit with IS_COMPONENTS_V2 gets a 400. Class-level: set per instance.
    refuses_components_v2 = False

    def _message_errors(self, body: Mapping[str, Any], files: int) -> tuple[int, dict[str, Any]] | None:
        """:func:`message_errors`, and the refusal of Components v2 when :attr:`refuses_components_v2`."""
        if self.refuses_components_v2 and is_components_v2(body):
            return components_v2_refusal()
        return message_errors(body, files)

    # Discord's limit on editing messages: 5 edits per 5 s in a channel; more get a 429 with
    # ``retry_after`` (discord.py waits and retries). None: no limit. Class-level: set per instance.
    edit_limit: tuple[int, float] | None = (5, 5.0)

    def _edit_wait(self, channel: str, at: float) -> float:
        """Seconds until one more edit in ``channel`` keeps :attr:`edit_limit` (0: now)."""
        if self.edit_limit is None:
            return 0.0
        count, window = self.edit_limit
        pattern = re.compile(rf"^/channels/{channel}/messages/\d+$")
        recent = [c.at for c in self.calls if c.method == "PATCH" and c.status == 200 and pattern.match(c.path)
                  and c.at > at - window]
        return 0.0 if len(recent) < count else round(min(recent) + window - at, 3)
