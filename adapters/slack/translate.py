"""Pure translation for Slack: payloads in, neutral events (or what is still missing) out.

Nothing here performs input/output. An Events API payload is first
*classified* (:func:`classify_event`) into one small value saying what
arrived and where (an :class:`Origin`): a question addressed to the bot
(:class:`Asked`), a message in a thread that may be a follow-up
(:class:`FollowUp`), shared files (:class:`FilesShared`, :class:`FileNotice`),
a pin change (:class:`Pinned`, :class:`Unpinned`), or :class:`Ignored` with
the reason. The app then fetches what Slack did not send (the person, the
thread, the file's bytes) and calls the builders here (:func:`question`,
:func:`upload`, :func:`pin`, :func:`unpin`, :func:`command`,
:func:`action_event`) to make the neutral event for the handler.

Conventions, kept here so both directions agree:

* A channel's key is ``ChannelKey("slack", team_id, channel_id)``; a direct
  message conversation is a channel of its own.
* A pinned message's external id is ``"<channel>:<ts>"`` (:func:`message_external_id`),
  the same for its :class:`~bot.chat.Pin` and its :class:`~bot.chat.Unpin`.
* The bot's answers carry blocks whose ``block_id`` starts with
  :data:`ANSWER_BLOCK`; that is how a thread is known to hold an answer,
  statelessly, from ``conversations.replies`` alone (any replica can tell).

Classification never raises on odd payloads: a missing or mistyped field
gives :class:`Ignored` (or an empty string), so a malformed event is dropped
with a log line, not an exception.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bot.chat import ChannelKey, Command, Person, Pin, Question, Unpin, Upload, Vote
from bot.commands import parse_command

log = logging.getLogger(__name__)

PLATFORM = "slack"
WORKING_REACTION = "hourglass_flowing_sand"  # shown on the message being worked on, removed after

ACTION_NODE = "raptor_node"  # button on a summary citation: its value is the node id
ACTION_VOTE_UP = "raptor_vote_up"  # feedback buttons: their value is the answer id
ACTION_VOTE_DOWN = "raptor_vote_down"
ACTION_PREFIX = "raptor_"  # every action id of ours starts so (the app listens to this prefix)

ANSWER_BLOCK = "raptor_answer"  # block_id prefix of an answer's text
QUESTION_BLOCK = "raptor_question"  # block_id prefix of a slash-command question echoed in the channel

MAX_CONTEXT_MESSAGES = 20  # earlier thread messages passed as a follow-up's context (the newest ones)

Payload = Mapping[str, Any]

# <@U123>, <@U123|name>, <#C123|general>, <!here>, <!subteam^S123|@team>, <https://x|label>, <mailto:a@b|a@b>
_ANGLE = re.compile(r"<([^<>|]*)(?:\|([^<>]*))?>")
_SPACES = re.compile(r"[ \t]+")


# -- where things arrive ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BotIdentity:
    """Who the bot is in its workspace (from ``auth.test``): its user id, its bot id, its team."""

    user_id: str
    bot_id: str = ""
    team_id: str = ""


@dataclass(frozen=True, slots=True)
class Origin:
    """Where an arrival came from: the team, the conversation, who did it, the message
    that carried it (``ts``, empty when none, e.g. a slash command) and that message's
    thread (``thread_ts``, empty outside threads; equal to ``ts`` for a thread's root)."""

    team: str
    channel: str
    user: str
    ts: str = ""
    thread_ts: str = ""

    @property
    def key(self) -> ChannelKey:
        return channel_key(self.team, self.channel)


@dataclass(frozen=True, slots=True)
class SlackFile:
    """A file as Slack describes it. ``url`` is ``url_private_download`` (else
    ``url_private``): empty when Slack sent only the id, then ``files.info`` tells the rest."""

    id: str
    name: str = ""
    title: str = ""
    mimetype: str = ""
    url: str = ""
    permalink: str = ""
    size: int = 0

    @property
    def filename(self) -> str:
        return self.name or self.title or self.id


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


Arrival = Asked | FollowUp | FilesShared | FileNotice | Pinned | Unpinned | Ignored


# -- small helpers ------------------------------------------------------------------


def channel_key(team: str, channel: str) -> ChannelKey:
    """The key of a Slack conversation: ``ChannelKey("slack", team_id, channel_id)``."""
    return ChannelKey(PLATFORM, team, channel)


def message_external_id(channel: str, ts: str) -> str:
    """The external id of a pinned message: its channel and its ``ts`` (unique in a workspace)."""
    return f"{channel}:{ts}"


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def plain_text(text: str, bot_user_id: str = "") -> str:
    """Slack's message markup as plain text: the bot's own mention removed, other
    mentions as ``@name``/``@U123``, channels as ``#name``, links as their URL (with the
    label first when it says something else), ``&amp;``/``&lt;``/``&gt;`` unescaped.
    Runs of spaces are folded and the ends stripped; line breaks are kept."""

    def replace(match: re.Match[str]) -> str:
        target, label = match.group(1), match.group(2)
        if target.startswith("@"):
            user = target[1:]
            return "" if bot_user_id and user == bot_user_id else "@" + (label or user)
        if target.startswith("#"):
            return "#" + (label or target[1:])
        if target.startswith("!"):
            special = target[1:].split("^", 1)[0]
            return label if label and label.startswith("@") else "@" + (label or special)
        url = target.removeprefix("mailto:") if target.startswith("mailto:") else target
        if label and label not in target:
            return f"{label} ({url})"
        return url

    converted = _ANGLE.sub(replace, text)
    unescaped = converted.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    lines = [_SPACES.sub(" ", line).strip() for line in unescaped.split("\n")]
    return "\n".join(lines).strip()


def mentions(text: str, user_id: str) -> bool:
    """True when the message text tags ``user_id`` (``<@U123>`` or ``<@U123|name>``)."""
    return bool(user_id) and (f"<@{user_id}>" in text or f"<@{user_id}|" in text)


def slack_file(raw: Mapping[str, Any]) -> SlackFile | None:
    """A file object of an event or of ``files.info``; None without an id. Files Slack
    does not let the bot read (``mode`` tombstone/hidden_by_limit, external links) keep an
    empty ``url``, which the app reports."""
    file_id = _text(raw.get("id"))
    if not file_id:
        return None
    readable = raw.get("mode") not in ("tombstone", "hidden_by_limit", "external") and not raw.get("is_external")
    url = (_text(raw.get("url_private_download")) or _text(raw.get("url_private"))) if readable else ""
    return SlackFile(
        id=file_id,
        name=_text(raw.get("name")),
        title=_text(raw.get("title")),
        mimetype=_text(raw.get("mimetype")),
        url=url,
        permalink=_text(raw.get("permalink")),
        size=_int(raw.get("size")),
    )


# -- classification ----------------------------------------------------------------


def classify_event(body: Payload, identity: BotIdentity) -> Arrival:
    """What an Events API payload (``event_callback``) means for the bot. Never raises."""
    event = _mapping(body.get("event"))
    kind = _text(event.get("type"))
    team = _text(body.get("team_id")) or _text(event.get("team")) or identity.team_id
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
    return Ignored(f"event type {kind!r} is not used")


def _is_from_bot(event: Mapping[str, Any], identity: BotIdentity) -> bool:
    """Bots' messages (ours included) are never questions: two bots must not answer each other."""
    if event.get("bot_id") or event.get("subtype") == "bot_message":
        return True
    return _text(event.get("user")) == identity.user_id


def _origin(event: Mapping[str, Any], team: str) -> Origin:
    return Origin(
        team=team,
        channel=_text(event.get("channel")),
        user=_text(event.get("user")),
        ts=_text(event.get("ts")),
        thread_ts=_text(event.get("thread_ts")),
    )


def _mention(event: Mapping[str, Any], team: str, identity: BotIdentity) -> Arrival:
    if _is_from_bot(event, identity):
        return Ignored("a mention by a bot")
    origin = _origin(event, team)
    if not origin.channel or not origin.user or not origin.ts:
        return Ignored("a mention without channel, user or ts")
    return Asked(origin, plain_text(_text(event.get("text")), identity.user_id))


def _message(event: Mapping[str, Any], team: str, identity: BotIdentity) -> Arrival:
    subtype = event.get("subtype")
    if _is_from_bot(event, identity):
        return Ignored("a message from a bot")
    if subtype not in (None, "file_share", "thread_broadcast"):
        return Ignored(f"message subtype {subtype!r}")
    origin = _origin(event, team)
    if not origin.channel or not origin.user or not origin.ts:
        return Ignored("a message without channel, user or ts")
    if subtype == "file_share":
        files = tuple(f for f in (slack_file(_mapping(r)) for r in _list(event.get("files"))) if f is not None)
        return FilesShared(origin, files) if files else Ignored("a file share without files")
    text = _text(event.get("text"))
    if event.get("channel_type") == "im":
        return Asked(origin, plain_text(text, identity.user_id), direct=True)
    if mentions(text, identity.user_id):
        return Ignored("tags the bot: its app_mention event is answered instead")
    if origin.thread_ts and origin.thread_ts != origin.ts:
        return FollowUp(origin, plain_text(text, identity.user_id))
    return Ignored("a channel message not addressed to the bot")


def _file_notice(event: Mapping[str, Any], team: str) -> Arrival:
    file_id = _text(event.get("file_id")) or _text(_mapping(event.get("file")).get("id"))
    channel = _text(event.get("channel_id"))
    user = _text(event.get("user_id"))
    if not file_id or not channel:
        return Ignored("a file_shared event without file or channel")
    return FileNotice(Origin(team, channel, user), file_id)


def _pin_change(event: Mapping[str, Any], team: str, added: bool, identity: BotIdentity) -> Arrival:
    item = _mapping(event.get("item"))
    if item.get("type") != "message":
        # Slack no longer pins files; anything else has no text to learn from.
        return Ignored(f"a pinned item of type {item.get('type')!r}")
    message = _mapping(item.get("message"))
    channel = _text(event.get("channel_id")) or _text(item.get("channel"))
    ts = _text(message.get("ts")) or _text(item.get("ts"))
    if not channel or not ts:
        return Ignored("a pin without channel or message ts")
    origin = Origin(team, channel, _text(event.get("user")), ts, _text(message.get("thread_ts")))
    if not added:
        return Unpinned(origin)
    return Pinned(
        origin,
        text=plain_text(_text(message.get("text")), identity.user_id),
        author=_text(message.get("user")),
        permalink=_text(message.get("permalink")),
    )


# -- threads -------------------------------------------------------------------------


def is_bot_message(message: Mapping[str, Any], identity: BotIdentity) -> bool:
    """True for a message posted by this bot (by user id or bot id)."""
    user, bot = _text(message.get("user")), _text(message.get("bot_id"))
    return (bool(user) and user == identity.user_id) or (bool(bot) and bot == identity.bot_id)


def _block_texts(message: Mapping[str, Any], prefixes: tuple[str, ...]) -> list[str]:
    texts = []
    for block in _list(message.get("blocks")):
        block = _mapping(block)
        if _text(block.get("block_id")).startswith(prefixes):
            texts.append(_text(_mapping(block.get("text")).get("text")))
    return texts


def bot_answered(messages: Sequence[Mapping[str, Any]], identity: BotIdentity) -> bool:
    """True when one of a thread's messages is an answer of this bot (see :data:`ANSWER_BLOCK`)."""
    return any(is_bot_message(m, identity) and _block_texts(m, (ANSWER_BLOCK,)) for m in messages)


def context_text(message: Mapping[str, Any], identity: BotIdentity) -> str:
    """One thread message as context: a person's message as plain text; the bot's answer
    (or its echo of a slash-command question) as that text alone, without the citations;
    other bot messages (progress, notes) as nothing."""
    if is_bot_message(message, identity):
        parts = _block_texts(message, (ANSWER_BLOCK, QUESTION_BLOCK))
        return plain_text("\n".join(parts), identity.user_id)
    if message.get("bot_id") or message.get("subtype") not in (None, "thread_broadcast", "file_share"):
        return ""
    return plain_text(_text(message.get("text")), identity.user_id)


def thread_context(
    messages: Sequence[Mapping[str, Any]], current_ts: str, identity: BotIdentity
) -> tuple[str, ...]:
    """The earlier messages of a thread (oldest first, those at or after ``current_ts``
    left out, empty ones dropped), the newest :data:`MAX_CONTEXT_MESSAGES` of them."""
    earlier = [m for m in messages if _ts_before(_text(m.get("ts")), current_ts)]
    earlier.sort(key=lambda m: _ts_key(_text(m.get("ts"))))
    texts = [t for t in (context_text(m, identity) for m in earlier) if t]
    return tuple(texts[-MAX_CONTEXT_MESSAGES:])


def _ts_key(ts: str) -> tuple[int, int]:
    seconds, _, micros = ts.partition(".")
    return (_int(seconds), _int(micros.ljust(6, "0")[:6]))


def _ts_before(ts: str, current: str) -> bool:
    return bool(ts) and (not current or _ts_key(ts) < _ts_key(current))


def pinned_thread(messages: Sequence[Mapping[str, Any]], root_ts: str, identity: BotIdentity) -> tuple[str, tuple[str, ...]]:
    """A pinned thread from ``conversations.replies``: the root's plain text and the
    replies' texts in order (the bot's own progress notes left out, its answers kept)."""
    root = ""
    replies: list[str] = []
    for message in sorted(messages, key=lambda m: _ts_key(_text(m.get("ts")))):
        ts = _text(message.get("ts"))
        if ts == root_ts:
            root = plain_text(_text(message.get("text")), identity.user_id)
        else:
            text = context_text(message, identity)
            if text:
                replies.append(text)
    return root, tuple(replies)


# -- people ----------------------------------------------------------------------------


def person_from_user(user: Mapping[str, Any], fallback_id: str = "") -> Person:
    """A person from a ``users.info`` user: the display name (else real name, else handle);
    workspace admins and owners manage every channel."""
    profile = _mapping(user.get("profile"))
    name = (
        _text(profile.get("display_name"))
        or _text(profile.get("real_name"))
        or _text(user.get("real_name"))
        or _text(user.get("name"))
    )
    manages = bool(user.get("is_admin") or user.get("is_owner") or user.get("is_primary_owner"))
    return Person(_text(user.get("id")) or fallback_id, name, manages)


# -- neutral events ----------------------------------------------------------------------


def question(arrival: Asked | FollowUp, person: Person, context: Sequence[str] = ()) -> Question:
    """The question an :class:`Asked` or a :class:`FollowUp` stands for, answered in its
    reply thread, with the thread's earlier messages as ``context``."""
    thread = arrival.reply_thread if isinstance(arrival, Asked) else arrival.origin.thread_ts
    return Question(arrival.origin.key, person, arrival.text, thread=thread, context=tuple(context))


def upload(origin: Origin, person: Person, file: SlackFile, data: bytes) -> Upload:
    """A downloaded file as an upload, linked by its permalink, its file id as external id.
    Its size is the one Slack states: the download stops one byte past the limit."""
    return Upload(origin.key, person, file.filename, data, link=file.permalink, external_id=file.id,
                  size=file.size or None)


def pin(
    pinned: Pinned, person: Person, text: str, link: str, author: str = "", replies: Sequence[str] = ()
) -> Pin:
    """A pinned message (or thread, with ``replies``) as a Pin under :func:`message_external_id`."""
    origin = pinned.origin
    return Pin(
        origin.key,
        person,
        text,
        external_id=message_external_id(origin.channel, origin.ts),
        link=link,
        author=author,
        replies=tuple(replies),
    )


def unpin(unpinned: Unpinned, person: Person) -> Unpin:
    origin = unpinned.origin
    return Unpin(origin.key, person, message_external_id(origin.channel, origin.ts))


# -- slash commands and buttons ------------------------------------------------------------


def slash_origin(body: Payload) -> Origin:
    """Where a slash command was typed (no message carries it: ``ts`` is empty)."""
    return Origin(_text(body.get("team_id")), _text(body.get("channel_id")), _text(body.get("user_id")))


def command(body: Payload, person: Person, thread: str = "") -> Command:
    """``/raptor rebuild`` → ``Command("rebuild")``; blank text → help (see ``parse_command``)."""
    name, argument = parse_command(_text(body.get("text")))
    return Command(slash_origin(body).key, person, name, argument, thread=thread)


def action_origin(body: Payload) -> Origin:
    """Where a button was clicked: the message holding it and that message's thread."""
    container = _mapping(body.get("container"))
    message = _mapping(body.get("message"))
    channel = _text(_mapping(body.get("channel")).get("id")) or _text(container.get("channel_id"))
    team = _text(_mapping(body.get("team")).get("id")) or _text(_mapping(body.get("user")).get("team_id"))
    return Origin(
        team=team,
        channel=channel,
        user=_text(_mapping(body.get("user")).get("id")),
        ts=_text(message.get("ts")) or _text(container.get("message_ts")),
        thread_ts=_text(message.get("thread_ts")) or _text(container.get("thread_ts")),
    )


def action_event(body: Payload, person: Person) -> Command | Vote | None:
    """The event a click on one of our buttons stands for: a summary's ``node`` command
    (its children shown in the answer's thread), or a vote on an answer. None for
    anything else (another app's action, no value)."""
    origin = action_origin(body)
    for raw in _list(body.get("actions")):
        action = _mapping(raw)
        action_id, value = _text(action.get("action_id")), _text(action.get("value")).strip()
        if not value or not origin.channel:
            continue
        if action_id == ACTION_NODE:
            return Command(origin.key, person, "node", value, thread=origin.thread_ts)
        if action_id in (ACTION_VOTE_UP, ACTION_VOTE_DOWN):
            return Vote(origin.key, person, value, up=action_id == ACTION_VOTE_UP)
    return None


# -- what people read when Slack itself fails ------------------------------------------------

_API_HINTS = {
    "not_in_channel": "I am not a member of this channel: invite me (/invite) and try again.",
    "channel_not_found": "Slack does not let me see this conversation: invite me to it and try again.",
    "is_archived": "This channel is archived, so I cannot post in it.",
    "missing_scope": "The Slack app lacks a permission it needs; its admin should reinstall it from the manifest.",
    "ratelimited": "Slack is limiting how fast I may post; please try again in a minute.",
    "invalid_auth": "My Slack token was refused; tell the bot's operator.",
    "token_revoked": "My Slack token was revoked; tell the bot's operator.",
    "account_inactive": "My Slack token was revoked; tell the bot's operator.",
}


def api_failure_text(error: str, reference: str, action: str = "finish that") -> str:
    """The short note sent when Slack refused a call of the bot (``error`` is Slack's error
    code, or the name of a network failure): what could not be done, a hint, the reference
    of the log line."""
    hint = _API_HINTS.get(error, "Please try again; if it keeps happening, tell the bot's operator.")
    return f"I could not {action} (Slack said: {error}). {hint} (reference {reference})"


def posting_failure_text(error: str, reference: str) -> str:
    """:func:`api_failure_text` for a reply Slack refused to take."""
    return api_failure_text(error, reference, "post my reply here")


def download_failure_text(filename: str, problem: str, reference: str) -> str:
    """The note sent when a shared file could not be downloaded (``problem`` says why)."""
    return f"I could not download “{filename}”: {problem} Nothing was added. (reference {reference})"


LOGIN_PAGE_PROBLEM = (
    "Slack sent a sign-in page instead of the file, which means the bot token is wrong or lacks "
    "the files:read scope (an admin can add it and reinstall the app)."
)


def is_login_page(content_type: str, file: SlackFile) -> bool:
    """True when a download answered HTML for a file that is not HTML: Slack's sign-in page,
    which it serves (with status 200) to a wrong token or one without ``files:read``."""
    served = content_type.split(";", 1)[0].strip().lower()
    return served == "text/html" and file.mimetype.lower() != "text/html"
