"""Pure reading of a Slack thread (``conversations.replies``): whether the bot answered
there, its earlier messages as a follow-up's context, and a pinned thread's text.

Contract: an answer of the bot is known from ``conversations.replies`` alone, statelessly
(any replica can tell), by its blocks: the answer's text goes in markdown blocks whose
``block_id`` starts with :data:`ANSWER_BLOCK`, followed by its sources and 👍/👎 buttons
(:data:`ANSWER_MARKS`). Slack documents that it ignores a markdown block's ``block_id`` and
may hand the block back translated into others, so an answer is also known by those
section and context_actions (👍/👎) blocks, which keep their ids; its text is then read from the message's
``text`` (the plain fallback the bot always sends), up to the sources' heading. Messages
are ordered by ``ts`` whatever order Slack lists them in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from adapters.slack.payload import BotIdentity, as_int, as_list, as_mapping, as_text, plain_text

ANSWER_BLOCK = "raptor_answer"  # block_id prefix of an answer's text
ANSWER_MARKS = ("raptor_sources", "raptor_source_", "raptor_feedback")  # what follows an answer's text
SOURCES_HEADING = "Sources:"  # where an answer's fallback text turns to its citations (adapters.slack.blocks)
QUESTION_BLOCK = "raptor_question"  # block_id prefix of a slash-command question echoed in the channel

MAX_CONTEXT_MESSAGES = 20  # earlier thread messages passed as a follow-up's context (the newest ones)


def is_bot_message(message: Mapping[str, Any], identity: BotIdentity) -> bool:
    """True for a message posted by this bot (by user id or bot id)."""
    user, bot = as_text(message.get("user")), as_text(message.get("bot_id"))
    return (bool(user) and user == identity.user_id) or (bool(bot) and bot == identity.bot_id)


def _block_texts(message: Mapping[str, Any], prefixes: tuple[str, ...]) -> list[str]:
    texts = []
    for block in as_list(message.get("blocks")):
        block = as_mapping(block)
        if as_text(block.get("block_id")).startswith(prefixes):
            text = block.get("text")  # a markdown block's text is a string, a section's an object
            texts.append(text if isinstance(text, str) else as_text(as_mapping(text).get("text")))
    return texts


def _block_ids(message: Mapping[str, Any]) -> list[str]:
    return [as_text(as_mapping(block).get("block_id")) for block in as_list(message.get("blocks"))]


def _is_answer(message: Mapping[str, Any]) -> bool:
    return any(block_id.startswith((ANSWER_BLOCK, *ANSWER_MARKS)) for block_id in _block_ids(message))


def _answer_text(message: Mapping[str, Any]) -> str:
    """An answer's own text: its markdown blocks, or where Slack dropped their ids, the
    message's fallback text before the sources."""
    texts = _block_texts(message, (ANSWER_BLOCK,))
    if texts:
        return "\n".join(texts)
    fallback = as_text(message.get("text"))
    return fallback.split("\n" + SOURCES_HEADING, 1)[0] if not fallback.startswith(SOURCES_HEADING) else ""


def bot_answered(messages: Sequence[Mapping[str, Any]], identity: BotIdentity) -> bool:
    """True when one of a thread's messages is an answer of this bot (see the module docstring)."""
    return any(is_bot_message(m, identity) and _is_answer(m) for m in messages)


def context_text(message: Mapping[str, Any], identity: BotIdentity) -> str:
    """One thread message as context: a person's message as plain text; the bot's answer
    (or its echo of a slash-command question) as that text alone, without the citations;
    other bot messages (progress, notes) as nothing."""
    if is_bot_message(message, identity):
        parts = _block_texts(message, (QUESTION_BLOCK,))
        if _is_answer(message):
            parts.append(_answer_text(message))
        return plain_text("\n".join(parts), identity.user_id)
    if message.get("bot_id") or message.get("subtype") not in (None, "thread_broadcast", "file_share"):
        return ""
    return plain_text(as_text(message.get("text")), identity.user_id)


def thread_context(
    messages: Sequence[Mapping[str, Any]], current_ts: str, identity: BotIdentity
) -> tuple[str, ...]:
    """The earlier messages of a thread (oldest first, those at or after ``current_ts``
    left out, empty ones dropped), the newest :data:`MAX_CONTEXT_MESSAGES` of them."""
    earlier = [m for m in messages if _ts_before(as_text(m.get("ts")), current_ts)]
    earlier.sort(key=lambda m: _ts_key(as_text(m.get("ts"))))
    texts = [t for t in (context_text(m, identity) for m in earlier) if t]
    return tuple(texts[-MAX_CONTEXT_MESSAGES:])


def _ts_key(ts: str) -> tuple[int, int]:
    seconds, _, micros = ts.partition(".")
    return (as_int(seconds), as_int(micros.ljust(6, "0")[:6]))


def _ts_before(ts: str, current: str) -> bool:
    return bool(ts) and (not current or _ts_key(ts) < _ts_key(current))


def pinned_thread(messages: Sequence[Mapping[str, Any]], root_ts: str, identity: BotIdentity) -> tuple[str, tuple[str, ...]]:
    """A pinned thread from ``conversations.replies``: the root's plain text and the
    replies' texts in order (the bot's own progress notes left out, its answers kept)."""
    root = ""
    replies: list[str] = []
    for message in sorted(messages, key=lambda m: _ts_key(as_text(m.get("ts")))):
        ts = as_text(message.get("ts"))
        if ts == root_ts:
            root = plain_text(as_text(message.get("text")), identity.user_id)
        else:
            text = context_text(message, identity)
            if text:
                replies.append(text)
    return root, tuple(replies)
