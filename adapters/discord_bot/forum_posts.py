"""Pure translation of Discord's forum channels: no I/O, no awaiting.

A forum channel (channel type 15) holds posts; a post is a public thread whose parent is the
forum, opened by a message whose id is the thread's own id (Discord: "the thread starter
message ID is the same ID as the thread"). A post may carry tags (``applied_tags``: ids of
the forum's ``available_tags``). Here:

* which places are posts of a forum the bot serves (``discord.forums``), and which message
  opens a post;
* the forum's "Solved" tag: a tag whose name, letters only, is "solved" or "resolved"
  (so "✅ Solved" counts), newly applied to a post;
* the "Mark solved" button's custom id, ``raptor:solved:<answer id>`` (it carries all it needs,
  so it works after a restart), and whether a message is the bot's offer to mark solved;
* the post's latest answer, for a post marked solved by its tag;
* the external id of a solved post's source, ``solved:<post id>`` (not ``<channel>/<message>``:
  that would be taken for a pinned message of the post, and lost when it is not pinned).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import Any

from adapters.discord_bot import translate
from adapters.discord_bot.translate import Place

SOLVED_TAG_NAMES = frozenset({"solved", "resolved"})
SOLVED_PREFIX = f"{translate.CUSTOM_ID_PREFIX}:solved:"


def in_served_forum(place: Place, forums: Collection[str]) -> bool:
    """True for a post (a public thread) of one of the ``forums`` the bot serves."""
    return place.parent_id is not None and not place.private and str(place.parent_id) in forums


def opens_post(message_id: int, place: Place) -> bool:
    """True for the message that opens a post: it has the thread's id."""
    return place.parent_id is not None and message_id == place.channel_id


def is_solved_tag(name: str) -> bool:
    """True for a tag named "Solved" or "Resolved", whatever its case, emoji or punctuation."""
    return "".join(c for c in name.lower() if c.isalpha()) in SOLVED_TAG_NAMES


def newly_solved_tag(before: Iterable[Any], after: Iterable[Any]) -> Any | None:
    """The Solved tag among ``after`` (a post's ``ForumTag`` list now) that ``before`` lacked; None
    when no such tag was applied by this change."""
    earlier = {tag.id for tag in before}
    return next((tag for tag in after if tag.id not in earlier and is_solved_tag(tag.name)), None)


def solved_custom_id(answer_id: str) -> str | None:
    """The custom id of the "Mark solved" button under an answer; None when it would not fit."""
    custom_id = SOLVED_PREFIX + answer_id
    return custom_id if answer_id and len(custom_id) <= translate.CUSTOM_ID_LIMIT else None


def solved_answer_id(custom_id: str) -> str | None:
    """The answer id a "Mark solved" button carries; None for any other custom id."""
    if not custom_id.startswith(SOLVED_PREFIX):
        return None
    return custom_id.removeprefix(SOLVED_PREFIX) or None


def is_solved_offer(message: Any) -> bool:
    """True for the bot's message offering to mark a post solved (it holds the button)."""
    return any(str(getattr(item, "custom_id", "") or "").startswith(SOLVED_PREFIX)
               for row in getattr(message, "components", ()) for item in getattr(row, "children", ()))


def latest_answer(newest_first: Sequence[Any], author_id: int | None, bot_id: int) -> tuple[str, str]:
    """The post's latest answer and who wrote it: the newest message with text that is not
    the post author's own, nor the bot's offer to mark solved. ("", "") when there is none."""
    for message in newest_first:
        if message.author.id == author_id or is_solved_offer(message) or translate.is_thread_starter(message):
            continue
        text = translate.message_text(message, bot_id)
        if text:
            return text, getattr(message.author, "display_name", "") or message.author.name
    return "", ""


def solved_external_id(post_id: int) -> str:
    return f"solved:{post_id}"
