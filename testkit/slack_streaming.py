"""Streamed answers and edits in the Slack stand-in's Web API.

:class:`SlackStreaming` adds ``chat.startStream``/``appendStream``/``stopStream`` (a streamed
message is a reply in a thread; ``stopStream``'s ``blocks`` are checked as a message's, so a
malformed ``context_actions`` block is refused there too), ``chat.update`` and ``chat.delete``
to :class:`~testkit.slack_web_api.SlackWebApi`. Two switches reproduce how Slack refuses:
:attr:`SlackStreaming.streaming_refusal` refuses streaming, and
:attr:`SlackStreaming.update_limit` rate-limits updates with HTTP 200 ``ok: false,
"ratelimited"`` as Slack does.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from testkit.slack_limits import MAX_STREAM_TEXT, as_slack_keeps, stop_blocks_problem
from testkit.slack_web_api import SlackWebApi
from testkit.slack_workspace import BOT_ID, BOT_USER


class SlackStreaming(SlackWebApi):
    """The streaming and editing methods of :class:`~testkit.slack_api.SlackStandIn`."""

    # Class-level switches (immutable defaults; a test sets them on its instance):
    streaming_refusal = ""  # when set, the streaming methods answer ok: false with this error (e.g. "unknown_method")
    # (n, seconds): a chat.update beyond n in `seconds` in one channel answers HTTP 200
    # ok: false "ratelimited", as Slack does; None: no limit.
    update_limit: tuple[int, float] | None = None

    def _m_chat_startStream(self, params: dict[str, Any]) -> dict[str, Any]:
        channel, thread_ts = str(params.get("channel", "")), str(params.get("thread_ts", ""))
        problem = self.streaming_refusal or self._stream_problem(params)
        if not problem and not thread_ts:
            problem = "invalid_arguments"  # streamed messages are replies in a thread
        if not problem and not channel.startswith("D") and not (
                params.get("recipient_team_id") and params.get("recipient_user_id")):
            problem = "invalid_arguments"  # required when streaming to a channel
        if problem:
            return {"ok": False, "error": problem}
        message = {"type": "message", "user": BOT_USER, "bot_id": BOT_ID, "ts": self.next_ts(), "team": self.team,
                   "text": _stream_text(params), "blocks": [], "thread_ts": thread_ts, "streaming": True}
        self._store(channel, message)
        return {"channel": channel, "ts": message["ts"]}

    def _m_chat_appendStream(self, params: dict[str, Any]) -> dict[str, Any]:
        found, problem = self._streaming_message(params)
        if found is None:
            return {"ok": False, "error": problem}
        found["text"] += _stream_text(params)
        return {"channel": params.get("channel"), "ts": found["ts"]}

    def _m_chat_stopStream(self, params: dict[str, Any]) -> dict[str, Any]:
        found, problem = self._streaming_message(params)
        problem = problem or stop_blocks_problem(params)
        if found is None or problem:
            return {"ok": False, "error": problem}
        found["text"] += _stream_text(params)
        found["streaming"] = False
        if params.get("blocks"):
            found["blocks"] = as_slack_keeps(params["blocks"])
        return {"channel": params.get("channel"), "ts": found["ts"], "message": dict(found)}

    def _stream_problem(self, params: dict[str, Any]) -> str:
        return self._channel_problem(params) or ("msg_too_long" if len(_stream_text(params)) > MAX_STREAM_TEXT else "")

    def _streaming_message(self, params: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
        """The message a streaming call names, still streaming; else None and Slack's error."""
        problem = self.streaming_refusal or self._stream_problem(params)
        if problem:
            return None, problem
        found = self.message(str(params.get("channel", "")), str(params.get("ts", "")))
        if found is None:
            return None, "message_not_found"
        if not found.get("streaming"):
            return None, "message_not_in_streaming_state"
        return found, ""

    def _m_chat_update(self, params: dict[str, Any]) -> dict[str, Any]:
        channel, ts = str(params.get("channel", "")), str(params.get("ts", ""))
        problem = self._check_message(params)
        found = self.message(channel, ts)
        if not problem and found is None:
            problem = "message_not_found"
        if not problem and self._update_limited(channel):
            problem = "ratelimited"
        if problem or found is None:
            return {"ok": False, "error": problem}
        found["text"] = params.get("text", "")
        found["blocks"] = as_slack_keeps(params.get("blocks"))
        found["edited"] = {"user": BOT_USER, "ts": self.next_ts()}
        return {"channel": channel, "ts": ts, "text": found["text"], "message": dict(found)}

    def _update_limited(self, channel: str) -> bool:
        """Whether one more chat.update in ``channel`` now exceeds :attr:`update_limit`."""
        if self.update_limit is None:
            return False
        count, window = self.update_limit
        since = time.perf_counter() - window
        recent = [c for c in self.calls_of("chat.update", channel=channel) if c.at >= since]
        return len(recent) >= count

    def _m_chat_delete(self, params: dict[str, Any]) -> dict[str, Any]:
        channel, ts = str(params.get("channel", "")), str(params.get("ts", ""))
        found = self.message(channel, ts)
        if found is None:
            return {"ok": False, "error": "message_not_found"}
        self.messages[channel].remove(found)
        return {"channel": channel, "ts": ts}

    def shown(self, channel: str, ts: str) -> dict[str, Any] | None:
        """The bot's message ``ts`` as people see it now (after streaming and edits)."""
        return self.message(channel, ts)


def _stream_text(params: Mapping[str, Any]) -> str:
    """The text a streaming call adds: its ``markdown_text`` and the text of its markdown chunks."""
    text = str(params.get("markdown_text") or "")
    chunks = params.get("chunks")
    if isinstance(chunks, str):
        try:
            chunks = json.loads(chunks)
        except ValueError:
            chunks = []
    for chunk in chunks or ():
        if isinstance(chunk, Mapping) and chunk.get("type") == "markdown_text":
            text += str(chunk.get("text") or "")
    return text
