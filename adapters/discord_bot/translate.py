"""Pure translation from Discord to the neutral chat types: no I/O, no awaiting.

Everything here reads attributes of discord.py objects (or plain values) and
returns neutral values: the channel key of a channel or thread, whether the
configuration lets the bot work somewhere, the text of a question without
the bot's mention, the person behind an event, the custom ids of the bot's
buttons and their meaning, and what changed between a channel's pins and the
pinned-message sources the engine holds.

Identifiers kept in the engine (``external_id``):

* a pinned message: ``"<channel id>/<message id>"`` (the channel id is the
  thread's when the pin is in a thread: public threads share their channel's
  tree, so the pins of each are told apart by it); the attachments of a pinned
  message share that id, so unpinning removes them too;

Which tree serves where (:attr:`Place.key`): a guild channel has its own; a
public (or news) thread uses its parent channel's, as its messages are open to
the parent's members anyway; a *private* thread is a channel of its own (its
files and pins would otherwise be answerable to everyone in the parent
channel); a DM or group DM is its own channel, under the workspace ``"dm"``.

* any other uploaded attachment: ``"<channel id>/<message id>/<attachment id>"``;
* a message's text added by the "Add to channel knowledge" command:
  ``"<channel id>/<message id>/text"``;
* a solved forum post: ``"solved:<post id>"`` (see :mod:`~adapters.discord_bot.forum_posts`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import discord

from bot.commands import NODE
from bot.config import DiscordConfig
from bot.neutral import ChannelKey, Command, Person, SourceView, Vote

log = logging.getLogger(__name__)

PLATFORM = "discord"
DM_WORKSPACE = "dm"
CUSTOM_ID_PREFIX = "raptor"
CUSTOM_ID_LIMIT = 100  # Discord's limit on a component's custom_id
THREAD_NAME_LIMIT = 100  # Discord's limit on a thread's name
CONTEXT_MESSAGES = 10  # earlier thread messages passed as context (the handler keeps the last few)
# Discord does not say who pinned a message, only that someone allowed to pin did: since
# Discord's separate Pin Messages permission, that is no sign of managing the channel. A pin
# is therefore no admin action: it counts against this stand-in person's upload allowance,
# one per guild (its limits are per person and workspace), like anyone's files and pins.
PINNER = Person("discord-pins", "a pin")
# Threads that share their parent's tree (public and news); any other thread is a channel of its own.
OPEN_THREADS = (discord.ChannelType.public_thread, discord.ChannelType.news_thread)

_USER_MENTION = re.compile(r"<@!?(\d+)>")
_SPACES = re.compile(r"[ \t]+")


@dataclass(frozen=True, slots=True)
class Place:
    """Where an event happened: the guild (None in a DM), the channel, the parent
    channel when the channel is a thread, and whether that thread is private."""

    guild_id: int | None
    channel_id: int
    parent_id: int | None = None
    private: bool = False

    @property
    def home_id(self) -> int:
        """The channel whose tree serves here: the parent of a public thread, else the
        channel itself (a private thread included: only its members may read it)."""
        return self.parent_id if self.parent_id is not None and not self.private else self.channel_id

    @property
    def key(self) -> ChannelKey:
        workspace = str(self.guild_id) if self.guild_id is not None else DM_WORKSPACE
        return ChannelKey(PLATFORM, workspace, str(self.home_id))

    @property
    def thread(self) -> str:
        """The thread id the neutral events carry ("" outside a thread)."""
        return str(self.channel_id) if self.parent_id is not None else ""


def place_of(channel: Any, guild_id: int | None = None) -> Place:
    """The place of a discord.py channel: a ``Thread`` (it has ``parent_id``), a guild
    channel or a DM. ``guild_id`` is used when the channel does not carry its guild
    (a ``PartialMessageable``)."""
    guild = getattr(channel, "guild", None)
    found_guild = getattr(guild, "id", None) or getattr(channel, "guild_id", None) or guild_id
    thread = is_thread(channel)
    parent_id = getattr(channel, "parent_id", None) if thread else None
    return Place(found_guild, int(channel.id), parent_id, private=thread and is_private_thread(channel))


def is_thread(channel: Any) -> bool:
    """True for a discord.py ``Thread`` (public, private or news)."""
    return isinstance(channel, discord.Thread)


def is_private_thread(channel: Any) -> bool:
    """True for a thread that is not known to be public: a private thread, and any thread
    whose type is missing or new to discord.py (keeping its material apart is the safe
    mistake)."""
    return getattr(channel, "type", None) not in OPEN_THREADS


@dataclass(frozen=True, slots=True)
class Scope:
    """The guilds and channels the configuration lets the bot work in (empty = all), and
    the library channels whose every attachment is ingested. For ``allows``, a thread
    counts as its parent channel, or as itself when its own id is listed: private
    threads included, since the bot working there exposes nothing (their tree is
    their own). For ``is_library``, a private thread counts only as itself: people
    there did not sign up for their files being taken in wholesale."""

    guilds: frozenset[str] = frozenset()
    channels: frozenset[str] = frozenset()
    library_channels: frozenset[str] = frozenset()

    @classmethod
    def of(cls, config: DiscordConfig) -> Scope:
        return cls(frozenset(config.guilds), frozenset(config.channels), frozenset(config.library_channels))

    def allows(self, place: Place) -> bool:
        """True when the bot may work at ``place``. A DM is allowed only when no guild list
        restricts the bot (and no channel list, unless it names the DM channel)."""
        if self.guilds and (place.guild_id is None or str(place.guild_id) not in self.guilds):
            return False
        return not self.channels or bool(self._ids(place) & self.channels)

    def is_library(self, place: Place) -> bool:
        ids = {str(place.channel_id)} if place.private else self._ids(place)
        return bool(ids & self.library_channels)

    @staticmethod
    def _ids(place: Place) -> set[str]:
        return {str(place.channel_id)} | ({str(place.parent_id)} if place.parent_id is not None else set())


# -- people and messages ----------------------------------------------------------------


def person_of(user: Any, manages_channel: bool = False) -> Person:
    """The neutral person for a discord.py ``User`` or ``Member``."""
    name = getattr(user, "display_name", "") or getattr(user, "name", "") or ""
    return Person(str(user.id), name, manages_channel)


def mentions_bot(message: Any, bot_id: int) -> bool:
    """True when the message addresses the bot: an ``<@bot>`` mention, a reply that pings
    the bot (Discord lists it in ``mentions``), or a mention of the bot's own role."""
    if any(user.id == bot_id for user in getattr(message, "mentions", ())):
        return True
    if bot_id in _mentioned_ids(getattr(message, "content", "") or ""):
        return True
    for role in getattr(message, "role_mentions", ()):
        tags = getattr(role, "tags", None)
        if tags is not None and getattr(tags, "bot_id", None) == bot_id:
            return True
    return False


def _mentioned_ids(content: str) -> set[int]:
    return {int(found) for found in _USER_MENTION.findall(content)}


def question_text(content: str, bot_id: int, names: Mapping[int, str] | None = None) -> str:
    """The message text without the bot's mentions; other user mentions become ``@name``
    (when known), and runs of spaces collapse, so retrieval sees words, not ids."""
    names = names or {}

    def replace(found: re.Match[str]) -> str:
        user_id = int(found.group(1))
        if user_id == bot_id:
            return " "
        return f"@{names[user_id]}" if user_id in names else found.group(0)

    text = _USER_MENTION.sub(replace, content)
    return "\n".join(_SPACES.sub(" ", line).strip() for line in text.strip().splitlines()).strip()


def mention_names(message: Any) -> dict[int, str]:
    """The display names of the users a message mentions, by id."""
    return {user.id: getattr(user, "display_name", "") or user.name for user in getattr(message, "mentions", ())}


def is_help(text: str) -> bool:
    """A lone "help" (or "/help") addressed to the bot is a request for the command list, not a question."""
    return text.strip().lower().lstrip("/") == "help"


def message_text(message: Any, bot_id: int) -> str:
    """What a message says, for context: the bot's own messages by their embeds (an answer
    lives in its first embed), a thread's starter message by the message it points at,
    anyone else's by its content without the bot's mention."""
    author = getattr(message, "author", None)
    if author is not None and author.id == bot_id:
        parts = [message.content or ""] + [embed.description or "" for embed in getattr(message, "embeds", ())[:1]]
        return "\n".join(part for part in parts if part).strip()
    reference = getattr(message, "reference", None)
    resolved = getattr(reference, "resolved", None) if reference is not None else None
    if is_thread_starter(message) and resolved is not None and hasattr(resolved, "content"):
        return question_text(resolved.content or "", bot_id, mention_names(resolved))
    return question_text(message.content or "", bot_id, mention_names(message))


def is_thread_starter(message: Any) -> bool:
    """True for the system message that opens a thread started from a message."""
    return getattr(message, "type", None) is discord.MessageType.thread_starter_message


def bot_posted(history: Iterable[Any], bot_id: int) -> bool:
    """True when the bot wrote any of these messages (so it is part of the conversation)."""
    return any(getattr(message.author, "id", None) == bot_id for message in history)


def context_of(history_oldest_first: Sequence[Any], bot_id: int) -> tuple[str, ...]:
    """The last :data:`CONTEXT_MESSAGES` non-empty texts of a thread's earlier messages, oldest first."""
    texts = [message_text(message, bot_id) for message in history_oldest_first]
    return tuple(text for text in texts if text)[-CONTEXT_MESSAGES:]


def thread_name(question: str) -> str:
    """A thread's name from the question that opens it, within Discord's 100 characters."""
    words = " ".join(question.split()) or "Question"
    if len(words) <= THREAD_NAME_LIMIT:
        return words
    return words[: THREAD_NAME_LIMIT - 1].rsplit(" ", 1)[0] + "…"


def thread_replies(messages_oldest_first: Iterable[Any], bot_id: int) -> tuple[str, ...]:
    """The replies of a pinned thread as ``Name: text`` lines, oldest first. The starter
    message, bots' messages (the bot's own answers would feed its answers back as
    sources) and empty messages are left out."""
    replies = []
    for message in messages_oldest_first:
        if is_thread_starter(message) or getattr(message.author, "bot", False):
            continue
        text = question_text(message.content or "", bot_id, mention_names(message))
        if text:
            replies.append(f"{getattr(message.author, 'display_name', '') or message.author.name}: {text}")
    return tuple(replies)


# -- ids kept in the engine ----------------------------------------------------------------


def pin_external_id(channel_id: int, message_id: int) -> str:
    return f"{channel_id}/{message_id}"


def upload_external_id(channel_id: int, message_id: int, attachment_id: int) -> str:
    return f"{channel_id}/{message_id}/{attachment_id}"


def knowledge_external_id(channel_id: int, message_id: int) -> str:
    """The id of a message's text added by "Add to channel knowledge": a part of the message,
    as its attachments are (deleting the message removes it), never its pin's id."""
    return f"{channel_id}/{message_id}/text"


@dataclass(frozen=True, slots=True)
class PinChanges:
    """What a channel's pins changed: message ids newly pinned, and the external ids of
    pinned-message sources whose message is no longer pinned."""

    added: tuple[int, ...]
    removed: tuple[str, ...]


def pin_changes(channel_id: int, pinned_ids: Sequence[int], sources: Sequence[SourceView],
                files_only: Collection[int] = ()) -> PinChanges:
    """Compares the messages pinned in a channel (or thread) now with the sources the
    engine holds for pins of that same channel; stateless, so it is right after a restart
    too. Pins of other channels are not compared.

    A pinned message made only of files (``files_only``) whose files are sources already
    (uploaded when it was posted, under three-part ids) counts as added: pinning it adds
    nothing, and saying "already there" at every later pin change would be noise. Only
    pinned-message sources (two-part ids) are ever removed."""
    prefix = f"{channel_id}/"
    mine = [s.external_id for s in sources if s.external_id.startswith(prefix)]
    held = {external for external in mine if external.count("/") == 1}
    uploaded = {int(external.split("/")[1]) for external in mine if external.count("/") == 2
                and external.split("/")[1].isdigit()}
    pinned = {pin_external_id(channel_id, message_id): message_id for message_id in pinned_ids}
    added = tuple(
        message_id for external, message_id in pinned.items()
        if external not in held and not (message_id in files_only and message_id in uploaded)
    )
    removed = tuple(sorted(external for external in held if external not in pinned))
    return PinChanges(added, removed)


# -- buttons ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OpenNode:
    """A press on a summary citation's button: show that node and its children."""

    node_id: str


@dataclass(frozen=True, slots=True)
class CastVote:
    """A press on 👍 (``up``) or 👎 under an answer."""

    answer_id: str
    up: bool


ButtonAction = OpenNode | CastVote


def node_custom_id(node_id: str) -> str | None:
    """The custom id of a summary's button; None when the node id is too long to fit."""
    custom_id = f"{CUSTOM_ID_PREFIX}:node:{node_id}"
    return custom_id if len(custom_id) <= CUSTOM_ID_LIMIT else None


def vote_custom_id(answer_id: str, up: bool) -> str | None:
    custom_id = f"{CUSTOM_ID_PREFIX}:vote:{'up' if up else 'down'}:{answer_id}"
    return custom_id if len(custom_id) <= CUSTOM_ID_LIMIT else None


def parse_custom_id(custom_id: str) -> ButtonAction | None:
    """The action of one of the bot's buttons; None for anything else. The ids carry all
    they need, so buttons keep working after a restart."""
    prefix, _, rest = custom_id.partition(":")
    if prefix != CUSTOM_ID_PREFIX:
        return None
    kind, _, rest = rest.partition(":")
    if kind == "node" and rest:
        return OpenNode(rest)
    if kind == "vote":
        direction, _, answer_id = rest.partition(":")
        if direction in ("up", "down") and answer_id:
            return CastVote(answer_id, direction == "up")
    return None


def button_event(action: ButtonAction, place: Place, person: Person) -> Command | Vote:
    """The neutral event of a button press."""
    if isinstance(action, OpenNode):
        return Command(place.key, person, NODE, action.node_id, thread=place.thread)
    return Vote(place.key, person, action.answer_id, action.up)


def command_argument(options: Mapping[str, Any]) -> str:
    """The argument of a slash subcommand: its options' values, in order, joined by spaces."""
    return " ".join(str(value).strip() for value in options.values() if value is not None and str(value).strip())
