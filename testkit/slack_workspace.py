"""The workspace the Slack stand-in keeps: its identities, people, conversations and files.

:class:`SlackWorkspace` is the base of :class:`~testkit.slack_api.SlackStandIn`: the app's
credentials, the users (guests of another organisation among them), the messages of each
conversation (so that what the bot posts can be read back by ``conversations.replies`` as on
Slack), Slack Connect channels, hosted files, Slack-style timestamps and the stand-in's
loopback address. The Web API, Socket Mode, the events sender and the people's actions are
built on it in their own modules; nothing here talks over the network.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

BOT_TOKEN = "xoxb-stand-in-bot"
APP_TOKEN = "xapp-1-A111-stand-in"
SIGNING_SECRET = "stand-in-signing-secret"
TEAM = "T111"
APP_ID = "A111"
BOT_USER = "UBOT"
BOT_ID = "BBOT"


@dataclass(slots=True)
class _User:
    id: str
    name: str
    admin: bool = False
    owner: bool = False
    team: str = ""  # another organisation's, for a Slack Connect guest; empty: the stand-in's own


@dataclass(slots=True)
class _File:
    meta: dict[str, Any]
    data: bytes


class SlackWorkspace:
    """The stand-in's state of the workspace and its lookups; ``port`` is set when the
    stand-in's server starts (:meth:`~testkit.slack_api.SlackStandIn.start`)."""

    def __init__(
        self,
        *,
        bot_token: str = BOT_TOKEN,
        app_token: str = APP_TOKEN,
        signing_secret: str = SIGNING_SECRET,
        team: str = TEAM,
    ) -> None:
        self.bot_token = bot_token
        self.app_token = app_token
        self.signing_secret = signing_secret
        self.team = team
        self.messages: dict[str, list[dict[str, Any]]] = {}
        self.users: dict[str, _User] = {}
        self.files: dict[str, _File] = {}
        self.shared_with: dict[str, str] = {}  # channel -> the other organisation's team (Slack Connect)
        self._counter = itertools.count(1)  # one sequence for every ts and id the stand-in hands out
        self.port = 0
        self.add_user(BOT_USER, "raptor")

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """The Web API base URL for ``AsyncWebClient(base_url=...)``."""
        return f"{self.root}/api/"

    # -- the workspace ------------------------------------------------------------------

    def add_user(self, user_id: str, name: str, admin: bool = False, owner: bool = False, team: str = "") -> None:
        """A person; ``team`` makes them a member of another organisation (admin or owner there)."""
        self.users[user_id] = _User(user_id, name, admin, owner, team)

    def share_channel(self, channel: str, other_team: str) -> None:
        """Makes ``channel`` a Slack Connect channel shared with ``other_team``: ``conversations.info``
        says ``is_ext_shared``, and its events carry ``is_ext_shared_channel: true``."""
        self.shared_with[channel] = other_team

    def team_of(self, user_id: str) -> str:
        """The team a person belongs to: their organisation's, else the stand-in's."""
        user = self.users.get(user_id)
        return (user.team if user is not None else "") or self.team

    def next_ts(self) -> str:
        return f"1700000000.{next(self._counter):06d}"

    def _store(self, channel: str, message: dict[str, Any]) -> dict[str, Any]:
        self.messages.setdefault(channel, []).append(message)
        return message

    def store_message(self, channel: str, message: dict[str, Any]) -> dict[str, Any]:
        """Keeps ``message`` in ``channel`` as Slack would (nothing delivered)."""
        return self._store(channel, message)

    def message(self, channel: str, ts: str) -> dict[str, Any] | None:
        return next((m for m in self.messages.get(channel, ()) if m.get("ts") == ts), None)

    def thread(self, channel: str, ts: str) -> list[dict[str, Any]]:
        """A thread's messages, root first (the message alone if it has no replies)."""
        found = self.message(channel, ts)
        if found is None:
            return []
        root = str(found.get("thread_ts") or ts)
        members = [m for m in self.messages.get(channel, ()) if m.get("ts") == root or m.get("thread_ts") == root]
        return sorted(members, key=lambda m: str(m["ts"]))

    def permalink_of(self, channel: str, ts: str) -> str:
        return f"{self.root}/archives/{channel}/p{ts.replace('.', '')}"

    def add_file(self, user: str, name: str, data: bytes, mimetype: str = "text/plain",
                 url_root: str = "") -> dict[str, Any]:
        """A hosted file; its links point at this stand-in, or at ``url_root`` (a file whose
        links lead elsewhere, which the bot must not send its token to)."""
        file_id = f"F{next(self._counter):06d}"
        path = f"{self.team}-{file_id}"
        root = url_root or self.root
        meta = {
            "id": file_id, "name": name, "title": name, "mimetype": mimetype, "filetype": name.rsplit(".", 1)[-1],
            "user": user, "size": len(data), "mode": "hosted", "is_external": False,
            "url_private": f"{root}/files-pri/{path}/{name}",
            "url_private_download": f"{root}/files-pri/{path}/download/{name}",
            "permalink": f"{self.root}/files/{user}/{file_id}/{name}",
        }
        self.files[file_id] = _File(meta, data)
        return meta

    async def wait_until(self, condition: Callable[[], Any], timeout: float = 15.0, what: str = "") -> Any:
        """Polls ``condition`` until it returns something truthy; raises TimeoutError naming ``what``."""
        deadline = time.monotonic() + timeout
        while True:
            value = condition()
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out waiting for {what or condition}")
            await asyncio.sleep(0.01)
