"""Pure classification of Events API payloads, and the neutral events they become.

An ``event_callback`` payload is first *classified* (:func:`classify_event`) into one
small value saying what arrived and where (an :class:`~adapters.slack.payload.Origin`):
a question addressed to the bot (:class:`Asked`), a message in a thread that may be a
follow-up (:class:`FollowUp`), shared files (:class:`FilesShared`, :class:`FileNotice`),
a pin change (:class:`Pinned`, :class:`Unpinned`), an assistant thread opened or viewed beside
another channel (:class:`~adapters.slack.assistant_events.ThreadViewed`), or :class:`Ignored`
with the reason.
The app then fetches what Slack did not send (the person, the thread) and calls
:func:`question`, :func:`pin` or :func:`unpin` to make the neutral event.

Contract: classification never raises on odd payloads; a missing or mistyped field gives
:class:`Ignored`, so a malformed event is dropped with a log line, not an exception.
Bots' messages (this bot's included) are never questions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from adapters.slack.assistant_events import ASSISTANT_EVENTS, ThreadViewed, thread_viewed
from adapters.slack.files import SlackFile, slack_file
from adapters.slack.payload import (
    BotIdentity,
    Origin,
    Payload,
    as_list,
    as_mapping,
    as_text,
    mentions,
    message_external_id,
    plain_text,
)
from bot.neutral import Person, Pin, Question, Unpin

# -- what arrived --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Asked:
    """A question addressed to the bot: a mention in a channel, or any message in a
    direct conversation (``direct``). ``text`` is plain, the bot's mention removed."""

    origin: Origin
    text: str
    direct: bool = False

    @property
    def reply_thread(self) -> str:
        """Where the answer goes: in a channel, always a thread (the question's own, or one
        started under it); in a direct conversation, the thread if any, else directly."""
        if self.direct:
            return self.origin.thread_ts
        return self.origin.thread_ts or self.origin.ts

    @property
    def in_assistant_thread(self) -> bool:
        """A direct message in a thread: a question in the assistant container (bolt-python's
        ``is_user_message_event_in_assistant_thread``)."""
        return self.direct and bool(self.origin.thread_ts)


@dataclass(frozen=True, slots=True)
class FollowUp:
    """A message in a channel thread that does not tag the bot: a question only if the bot
    has answered in that thread (the app checks with ``conversations.replies``)."""

    origin: Origin
    text: str


@dataclass(frozen=True, slots=True)
class FilesShared:
    """Files shared in a conversation (a ``message`` of subtype ``file_share``)."""

    origin: Origin
    files: tuple[SlackFile, ...]


@dataclass(frozen=True, slots=True)
class FileNotice:
    """A ``file_shared`` event: only the file's id; ``files.info`` tells the rest."""

    origin: Origin
    file_id: str


@dataclass(frozen=True, slots=True)
class Pinned:
    """A message pinned. ``origin.ts`` is the pinned message, ``origin.user`` who pinned it;
    ``text`` is the message's plain text as the event carried it (possibly empty: the app
    then reads it), ``author`` its author's user id, ``permalink`` as the event carried it."""

    origin: Origin
    text: str = ""
    author: str = ""
    permalink: str = ""
    edited: bool = False  # not a pin: a message edited (``origin.user`` its author), perhaps a pinned one
    revision: float = 0.0  # an edit's ``edited.ts`` (when it was made), to apply edits in order

    @property
    def is_reply(self) -> bool:
        """True for a reply inside a thread (pinned alone); a root may carry a whole thread."""
        return bool(self.origin.thread_ts) and self.origin.thread_ts != self.origin.ts


@dataclass(frozen=True, slots=True)
class Unpinned:
    """A message unpinned; ``origin.ts`` is the message."""

    origin: Origin


@dataclass(frozen=True, slots=True)
class Ignored:
    """Nothing for the bot to do, and why (logged at debug level)."""

    reason: str


Arrival = Asked | FollowUp | FilesShared | FileNotice | Pinned | Unpinned | ThreadViewed | Ignored


# -- classification ----------------------------------------------------------------


def classify_event(body: Payload, identity: BotIdentity) -> Arrival:
    """What an Events API payload (``event_callback``) means for the bot. Never raises."""
    event = as_mapping(body.get("event"))
    kind = as_text(event.get("type"))
    # The installing workspace keys every channel: in a channel shared with another
    # organisation, the payload's team ids may be theirs.
    team = identity.team_id
    if not event or not kind:
        return Ignored("no event in the payload")
    if kind == "app_mention":
        return _mention(event, team, identity)
    if kind == "message":
        return _message(event, team, identity)
    if kind == "file_shared":
        return _file_notice(event, team)
    if kind in ("pin_added", "pin_removed"):
        return _pin_change(event, team, kind == "pin_added", identity)
    if kind in ASSISTANT_EVENTS:
        return thread_viewed(event, team) or Ignored(f"an {kind} event without its thread")
    return Ignored(f"event type {kind!r} is not used")


def _is_from_bot(event: Mapping[str, Any], identity: BotIdentity) -> bool:
    """Bots' messages (ours included) are never questions: two bots must not answer each other."""
    if event.get("bot_id") or event.get("subtype") == "bot_message":
        return True
    return as_text(event.get("user")) == identity.user_id


def _origin(event: Mapping[str, Any], team: str) -> Origin:
    return Origin(
        team=team,
        channel=as_text(event.get("channel")),
        user=as_text(event.get("user")),
        ts=as_text(event.get("ts")),
        thread_ts=as_text(event.get("thread_ts")),
    )


def _mention(event: Mapping[str, Any], team: str, identity: BotIdentity) -> Arrival:
    if _is_from_bot(event, identity):
        return Ignored("a mention by a bot")
    origin = _origin(event, team)
    if not origin.channel or not origin.user or not origin.ts:
        return Ignored("a mention without channel, user or ts")
    return Asked(origin, plain_text(as_text(event.get("text")), identity.user_id))


def _message(event: Mapping[str, Any], team: str, identity: BotIdentity) -> Arrival:
    subtype = event.get("subtype")
    if subtype == "message_changed":
        return _edited(event, team, identity)
    if _is_from_bot(event, identity):
        return Ignored("a message from a bot")
    if subtype not in (None, "file_share", "thread_broadcast"):
        return Ignored(f"message subtype {subtype!r}")
    origin = _origin(event, team)
    if not origin.channel or not origin.user or not origin.ts:
        return Ignored("a message without channel, user or ts")
    if subtype == "file_share":
        files = tuple(f for f in (slack_file(as_mapping(r)) for r in as_list(event.get("files"))) if f is not None)
        return FilesShared(origin, files) if files else Ignored("a file share without files")
    text = as_text(event.get("text"))
    if event.get("channel_type") == "im":
        return Asked(origin, plain_text(text, identity.user_id), direct=True)
    if mentions(text, identity.user_id):
        return Ignored("tags the bot: its app_mention event is answered instead")
    if origin.thread_ts and origin.thread_ts != origin.ts:
        return FollowUp(origin, plain_text(text, identity.user_id))
    return Ignored("a channel message not addressed to the bot")


def _edited(event: Mapping[str, Any], team: str, identity: BotIdentity) -> Arrival:
    """A ``message_changed`` event: the message as it is now (``message``) may be a pinned
    source; the handler tells. Edits of bots' messages (our own answers, as they stream)
    are never sources."""
    message = as_mapping(event.get("message"))
    if _is_from_bot(message, identity):
        return Ignored("an edit of a bot's message")
    channel, ts = as_text(event.get("channel")), as_text(message.get("ts"))
    if not channel or not ts:
        return Ignored("an edit without channel or message ts")
    author = as_text(message.get("user"))
    origin = Origin(team, channel, author, ts, as_text(message.get("thread_ts")))
    revision = _seconds(as_text(as_mapping(message.get("edited")).get("ts")))
    return Pinned(origin, text=plain_text(as_text(message.get("text")), identity.user_id), author=author, edited=True,
                  revision=revision)


def _seconds(ts: str) -> float:
    """A Slack timestamp (``"1712345678.000200"``) as seconds; 0 when absent or malformed."""
    try:
        return float(ts) if ts else 0.0
    except ValueError:
        return 0.0


def _file_notice(event: Mapping[str, Any], team: str) -> Arrival:
    file_id = as_text(event.get("file_id")) or as_text(as_mapping(event.get("file")).get("id"))
    channel = as_text(event.get("channel_id"))
    user = as_text(event.get("user_id"))
    if not file_id or not channel:
        return Ignored("a file_shared event without file or channel")
    return FileNotice(Origin(team, channel, user), file_id)


def _pin_change(event: Mapping[str, Any], team: str, added: bool, identity: BotIdentity) -> Arrival:
    item = as_mapping(event.get("item"))
    if item.get("type") != "message":
        # Slack no longer pins files; anything else has no text to learn from.
        return Ignored(f"a pinned item of type {item.get('type')!r}")
    message = as_mapping(item.get("message"))
    channel = as_text(event.get("channel_id")) or as_text(item.get("channel"))
    ts = as_text(message.get("ts")) or as_text(item.get("ts"))
    if not channel or not ts:
        return Ignored("a pin without channel or message ts")
    origin = Origin(team, channel, as_text(event.get("user")), ts, as_text(message.get("thread_ts")))
    if not added:
        return Unpinned(origin)
    return Pinned(
        origin,
        text=plain_text(as_text(message.get("text")), identity.user_id),
        author=as_text(message.get("user")),
        permalink=as_text(message.get("permalink")),
    )


# -- neutral events ----------------------------------------------------------------------


def question(arrival: Asked | FollowUp, person: Person, context: Sequence[str] = ()) -> Question:
    """The question an :class:`Asked` or a :class:`FollowUp` stands for, answered in its
    reply thread, with the thread's earlier messages as ``context``."""
    thread = arrival.reply_thread if isinstance(arrival, Asked) else arrival.origin.thread_ts
    return Question(arrival.origin.key, person, arrival.text, thread=thread, context=tuple(context))


def pin(
    pinned: Pinned, person: Person, text: str, link: str, author: str = "", replies: Sequence[str] = ()
) -> Pin:
    """A pinned (or edited) message, or thread with ``replies``, as a Pin under
    :func:`message_external_id`."""
    origin = pinned.origin
    return Pin(
        origin.key,
        person,
        text,
        external_id=message_external_id(origin.channel, origin.ts),
        link=link,
        author=author,
        replies=tuple(replies),
        edited=pinned.edited,
        revision=pinned.revision,
    )


def unpin(unpinned: Unpinned, person: Person) -> Unpin:
    """An unpinned message as an Unpin, under the same external id as its Pin."""
    origin = unpinned.origin
    return Unpin(origin.key, person, message_external_id(origin.channel, origin.ts))
