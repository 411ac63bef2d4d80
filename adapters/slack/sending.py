"""The ``send`` the handler gets for a Slack event (:class:`SlackSend`), and the answer it
shows while a language model writes it (:class:`SlackDraft`).

Contract: :class:`SlackSend` delivers every reply through
:meth:`~adapters.slack.outbox.Outbox.deliver`. :class:`SlackDraft` shows an answer while
it is written. In a thread it uses Slack's native streaming (``chat.startStream``, then
``chat.appendStream`` at most every :data:`STREAM_EVERY_S`); where Slack refuses
streaming (an older workspace or plan, a conversation that does not allow it, no
thread) it posts a message and edits it with ``chat.update`` at most every
:data:`UPDATE_EVERY_S`, well under Slack's limit of about 50 updates a minute. Slack
answers an update over its limit with HTTP 200 and ``ok: false, "ratelimited"``: such
an update is skipped (the next carries all the text) and the next one waits the delay
out. At the end the stream is stopped and the message replaced by the reply exactly as
:meth:`~adapters.slack.outbox.Outbox.deliver` renders it (a ``ratelimited`` replacement
is retried after its delay); should that fail, the whole reply is posted anew and the
draft removed, so no text is lost. An answer's stream is stopped with its native 👍/👎
(the ``blocks`` of ``chat.stopStream``, :func:`~adapters.slack.blocks.feedback_blocks`);
the reply that replaces it carries them too, so they show once.

What a draft shows is the answer's text made safe as a finished reply's is (see
:mod:`adapters.slack.blocks`): links unmasked, then ``<`` escaped in a stream or the
text escaped as mrkdwn in an edit. A stream only ever appends: the safe form of the text
so far always begins the safe form of the text later (see
:mod:`adapters.untrusted_text`), so what is appended is what the safe form gained.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from slack_sdk.errors import SlackApiError

from adapters.slack.blocks import SlackMessage, escape, feedback_blocks, markdown_text, render_reply
from adapters.slack.outbox import Outbox, Target
from adapters.slack.web import TRANSPORT_ERRORS, error_code, in_thread
from adapters.untrusted_text import unmask_links
from bot.neutral import Reply, ReplyKind

log = logging.getLogger(__name__)

STREAM_EVERY_S = 1.0  # between two chat.appendStream calls of one answer
UPDATE_EVERY_S = 2.0  # between two chat.update calls of one answer: 30 a minute, Slack allows about 50
RATELIMITED_WAIT_S = 3.0  # after "ratelimited" without a Retry-After
MAX_RATELIMITED_WAIT_S = 30.0
FINAL_TRIES = 5  # attempts at putting the finished reply in the draft's place
DRAFT_CHARS = 3000  # a draft shows at most this much (the finished reply is paginated as always)


class SlackSend:
    """The ``Send`` of replies to one :class:`Target` (:meth:`Outbox.deliver`), which can also
    show an answer while it is written (:meth:`draft`, a :class:`~bot.neutral.DraftingSend`)."""

    def __init__(self, outbox: Outbox, target: Target) -> None:
        self._outbox = outbox
        self._target = target

    async def __call__(self, reply: Reply) -> None:
        await self._outbox.deliver(self._target, reply)

    def draft(self, thread: str = "") -> SlackDraft:
        return SlackDraft(self._outbox, self._target, thread or self._target.thread)


class SlackDraft:
    """An answer shown while it is written: a native stream in a thread, else a message edited
    by ``chat.update``; see the module docstring. An :class:`~bot.neutral.AnswerDraft`."""

    def __init__(self, outbox: Outbox, target: Target, thread: str, clock: Callable[[], float] = time.monotonic) -> None:
        self._outbox = outbox
        self._client = outbox.client
        self._target = target
        self._thread = thread
        self._clock = clock
        self._mode = "new"  # new, stream (native), edits (chat.update), or stuck (neither works any more)
        self._ts = ""
        self._streamed_text = ""  # the text appended to the native stream so far
        self._not_before = 0.0  # no update before this (Slack said "ratelimited")

    @property
    def interval_s(self) -> float:
        return STREAM_EVERY_S if self._mode == "stream" else UPDATE_EVERY_S

    @property
    def ts(self) -> str:
        """The draft message's ``ts``; empty before anything was shown."""
        return self._ts

    async def show(self, text: str) -> None:
        """Shows ``text`` (the answer so far); raises only what the network raises."""
        if self._mode == "new":
            if not (self._thread and await self._start_stream(streamed_text(text))):
                await self._post(text)
        elif self._mode == "stream":
            await self._append(streamed_text(text))
        elif self._mode == "edits" and self._clock() >= self._not_before:
            await self._edit(text)

    async def finish(self, reply: Reply) -> None:
        """Puts ``reply`` in the draft's place (see the module docstring); never raises for Slack's failures."""
        if not self._ts:
            await self._outbox.deliver(self._target, reply)
            return
        if self._mode == "stream":
            await self._stop_stream(reply)
        if reply.private:  # it cannot replace a message everyone sees: delivered to the person, the draft goes
            await self._outbox.deliver(self._target, reply)
            await self._delete()
            return
        thread = reply.thread or self._thread
        messages = render_reply(reply)
        try:
            await self._replace(messages[0])
        except SlackApiError as exc:
            log.warning("could not put the finished answer in place of its draft %s in %s (%s): posting it anew",
                        self._ts, self._target.channel, error_code(exc))
            await self._outbox.deliver(self._target, reply)
            await self._delete()
            return
        except TRANSPORT_ERRORS as exc:
            await self._outbox.report(self._target, thread, f"a {reply.kind.value} reply", exc)
            return
        try:
            for message in messages[1:]:
                await self._outbox.post(self._target, message, thread)
            for attachment in reply.attachments:
                await self._outbox.upload(self._target, attachment, thread, private=False)
        except TRANSPORT_ERRORS as exc:
            await self._outbox.report(self._target, thread, f"a {reply.kind.value} reply", exc)

    # -- native streaming ----------------------------------------------------------------------

    async def _start_stream(self, text: str) -> bool:
        """Starts a native stream with ``text`` (safe already); False (logged) when Slack refuses
        streaming here."""
        try:
            response = await self._client.chat_startStream(
                channel=self._target.channel, thread_ts=self._thread, markdown_text=text,
                recipient_team_id=self._outbox.team or None, recipient_user_id=self._target.user or None,
            )
        except SlackApiError as exc:
            log.info("Slack refused to stream an answer in %s (%s): showing it by edits instead",
                     self._target.channel, error_code(exc))
            return False
        self._ts = str(response.get("ts") or "")
        if not self._ts:
            return False
        self._mode, self._streamed_text = "stream", text
        return True

    async def _append(self, text: str) -> None:
        """Appends what ``text`` (safe already, and beginning with what was streamed) adds."""
        delta = text[len(self._streamed_text):]
        if not delta:
            return
        try:
            await self._client.chat_appendStream(channel=self._target.channel, ts=self._ts, markdown_text=delta)
        except SlackApiError as exc:
            if error_code(exc) == "ratelimited":
                return  # the next append carries this text too
            log.warning("appending to the answer stream %s in %s failed (%s): the finished answer will replace it",
                        self._ts, self._target.channel, error_code(exc))
            self._mode = "stuck"
            return
        self._streamed_text = text

    async def _stop_stream(self, reply: Reply) -> None:
        """Stops the stream, with the rest of an answer's text and its native 👍/👎 (the stream
        itself ends complete, and can be voted on)."""
        shown, whole = self._streamed_text, streamed_text(reply.text)
        rest = whole[len(shown):] if reply.kind is ReplyKind.ANSWER and whole.startswith(shown) else ""
        try:
            await self._client.chat_stopStream(channel=self._target.channel, ts=self._ts, markdown_text=rest or None,
                                               blocks=feedback_blocks(reply) or None)
        except SlackApiError as exc:  # the update below replaces the text all the same
            log.info("stopping the answer stream %s in %s failed (%s)", self._ts, self._target.channel, error_code(exc))

    # -- edits -------------------------------------------------------------------------------------

    async def _post(self, text: str) -> None:
        response = await self._client.chat_postMessage(channel=self._target.channel, text=_draft_text(text),
                                                       unfurl_links=False, unfurl_media=False, **in_thread(self._thread))
        self._ts = str(response.get("ts") or "")
        self._mode = "edits" if self._ts else "stuck"

    async def _edit(self, text: str) -> None:
        try:
            await self._client.chat_update(channel=self._target.channel, ts=self._ts, text=_draft_text(text))
        except SlackApiError as exc:
            if error_code(exc) != "ratelimited":
                raise
            delay = _ratelimited_delay(exc)
            log.info("Slack limited the edits of answer %s in %s: the next in %.1f s", self._ts,
                     self._target.channel, delay)
            self._not_before = self._clock() + delay

    async def _replace(self, message: SlackMessage) -> None:
        """``chat.update`` of the draft with ``message``, retried after Slack's delay when
        ``ratelimited``; raises the last failure."""
        for attempt in range(1, FINAL_TRIES + 1):
            wait = self._not_before - self._clock()
            if wait > 0:
                await asyncio.sleep(wait)
            try:
                await self._client.chat_update(channel=self._target.channel, ts=self._ts, **message.payload())
                return
            except SlackApiError as exc:
                if error_code(exc) != "ratelimited" or attempt == FINAL_TRIES:
                    raise
                self._not_before = self._clock() + _ratelimited_delay(exc)

    async def _delete(self) -> None:
        try:
            await self._client.chat_delete(channel=self._target.channel, ts=self._ts)
        except TRANSPORT_ERRORS as exc:
            log.warning("could not remove the draft %s in %s (%s)", self._ts, self._target.channel, error_code(exc))


def streamed_text(text: str) -> str:
    """An answer's text (so far) as a native stream carries it: its links unmasked, its ``<``
    escaped (:func:`~adapters.slack.blocks.markdown_text`)."""
    return markdown_text(unmask_links(text))


def _draft_text(text: str) -> str:
    """A draft's text as a message's ``text``: links unmasked, escaped for mrkdwn, within
    :data:`DRAFT_CHARS`."""
    return escape(unmask_links(text if len(text) <= DRAFT_CHARS else text[: DRAFT_CHARS - 1] + "…"))


def _ratelimited_delay(error: SlackApiError) -> float:
    """Seconds to wait after ``ratelimited``: Slack's Retry-After if it sent one, else :data:`RATELIMITED_WAIT_S`."""
    headers = getattr(error.response, "headers", None) or {}
    value = next((v for k, v in headers.items() if str(k).lower() == "retry-after"), None)
    try:
        return min(max(float(value), 0.0), MAX_RATELIMITED_WAIT_S) if value is not None else RATELIMITED_WAIT_S
    except (TypeError, ValueError):
        return RATELIMITED_WAIT_S
