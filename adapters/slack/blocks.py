"""Pure rendering: a neutral :class:`~bot.neutral.Reply` as Block Kit messages within Slack's limits.

:func:`render_reply` returns one or more :class:`SlackMessage` (``text`` and
``blocks``), to be posted in order. An answer is its text, then its numbered
sources (each an excerpt or a summary with its layer, linked, with a short
quote, and for a summary a button that opens its children), then Slack's native
feedback element (``feedback_buttons`` in a ``context_actions`` block, built with
slack_sdk's own models) whose 👍/👎 carry the answer id (:func:`feedback_blocks` is
that block alone, which ends a streamed answer). Other replies are text sections (an error
with a warning sign and its reference, progress as a quiet context line).

The answer's own text (the model's or the extractive answer's, standard
Markdown) goes in ``markdown`` blocks, which Slack renders with headings,
lists, tables and code; mrkdwn sections would show a table's pipes and a
heading's hashes. Everything else, and above all the quotes of documents in
the sources, stays escaped mrkdwn, so a document's text is never taken for
markup.

Documents and models never speak in the bot's voice: every text of a reply (the
answer, the sources' titles and quotes, any other reply) has its links unmasked
(:func:`adapters.untrusted_text.unmask_links`) before it is rendered, and in a
markdown block (or a streamed answer, :func:`markdown_text`) its ``<`` is escaped, so
no ``<!channel>``, ``<!here>``, ``<!subteam^…>``, ``<@U…>`` or ``<url|label>`` in it
is Slack's syntax; mrkdwn escapes ``&``, ``<`` and ``>`` as always. The links the bot
makes (a source's title, linked to its file or message) are added after, and stay
links.

Slack's limits are kept by construction, never discovered through an API
error: every section or context text is at most :data:`SECTION_TEXT_LIMIT`
characters *as sent* (after escaping), the markdown blocks of a message hold
at most :data:`MARKDOWN_TEXT_LIMIT` characters together, a message holds at
most :data:`MAX_BLOCKS` blocks, and its ``text`` (always set: notifications
and screen readers use it) at most :data:`MAX_TEXT_CHARS`. A long reply
becomes several messages. Text is split at paragraph, line, sentence or word
boundaries, never inside an escape such as ``&amp;``; an answer's Markdown
never inside a code block or a table that fits in one message (one that does
not is closed and reopened, or its header repeated, across messages).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from slack_sdk.models.blocks import ContextActionsBlock, FeedbackButtonObject, FeedbackButtonsElement

from adapters.markdown_text import fitting, split_markdown
from adapters.slack.threads import SOURCES_HEADING
from adapters.slack.translate import (
    ACTION_FEEDBACK,
    ACTION_NODE,
    ANSWER_BLOCK,
    QUESTION_BLOCK,
    WORKING_REACTION,
    vote_value,
)
from adapters.untrusted_text import unmask_links
from bot.neutral import CitationKind, CitationView, Reply, ReplyKind

log = logging.getLogger(__name__)

SECTION_TEXT_LIMIT = 3000  # characters of a section's (or a context element's) text
MARKDOWN_TEXT_LIMIT = 12_000  # characters of all the markdown blocks of one message together
MAX_BLOCKS = 50  # blocks per message
MAX_TEXT_CHARS = 40_000  # characters of a message's top-level text
BUTTON_TEXT_LIMIT = 75
BUTTON_VALUE_LIMIT = 2000

TITLE_CHARS = 150  # a citation's title is cut to this...
QUOTE_CHARS = 300  # ...and its quote to this, so a citation always fits one section
MAX_LINK_CHARS = 1000  # a longer link is left out rather than risk the section's limit
FEEDBACK_BLOCK = "raptor_feedback"  # the block id of an answer's 👍/👎 (one of threads.ANSWER_MARKS)

Block = dict[str, Any]


@dataclass(frozen=True, slots=True)
class SlackMessage:
    """One message to post: its fallback ``text`` and its ``blocks``."""

    text: str
    blocks: tuple[Block, ...]

    def payload(self) -> dict[str, Any]:
        """The keyword arguments of ``chat.postMessage``/``chat.postEphemeral`` it stands for."""
        return {"text": self.text, "blocks": list(self.blocks)}


@dataclass(frozen=True, slots=True)
class _Part:
    """One block, its share of the message's fallback text (escaped, may be empty) and the
    characters it adds to the message's markdown blocks (0 for any other block)."""

    block: Block
    fallback: str
    markdown_chars: int = 0


# -- text ---------------------------------------------------------------------------


def escape(text: str) -> str:
    """Text as Slack's mrkdwn shows it literally: ``&``, ``<`` and ``>`` escaped."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def markdown_text(text: str) -> str:
    """Standard Markdown from a document or a model (its links unmasked already) as a markdown
    block or a streamed answer may carry it: ``<`` escaped, so nothing in it is Slack's
    ``<…>`` syntax (a mention, ``<!channel>``, a labelled link), which Slack reads in markdown
    too; Slack shows ``&lt;`` as ``<``. ``&`` is left alone: a URL's query string in the text
    stays as written, and Slack never reads an entity it decodes as syntax."""
    return text.replace("<", "&lt;")


def escaped_length(text: str) -> int:
    return len(text) + 4 * text.count("&") + 3 * text.count("<") + 3 * text.count(">")


def escaped_weight(char: str) -> int:
    """What one character counts once escaped (see :func:`escape`)."""
    return 5 if char == "&" else 4 if char in "<>" else 1


def split_text(text: str, limit: int = SECTION_TEXT_LIMIT) -> list[str]:
    """``text`` (raw, not escaped) cut into pieces whose escaped length is at most ``limit``,
    at the last paragraph break, else line break, else sentence end, else space in the
    second half of the room; a hard cut only when none is there. Empty for blank text."""
    pieces: list[str] = []
    rest = text.strip()
    while rest and escaped_length(rest) > limit:
        room = fitting(rest, limit, escaped_weight)
        cut = _boundary(rest[:room])
        pieces.append(rest[:cut].rstrip())
        rest = rest[cut:].strip()
    if rest:
        pieces.append(rest)
    return [p for p in pieces if p]


def _boundary(window: str) -> int:
    """Where to cut ``window`` (its length when no good boundary lies in its second half)."""
    half = len(window) // 2
    for separator in ("\n\n", "\n", ". ", "? ", "! ", "; ", ", ", " "):
        at = window.rfind(separator)
        if at >= half:
            return at + len(separator)
    return len(window)


def clip(text: str, chars: int) -> str:
    """One line of at most ``chars`` characters, an ellipsis marking a cut."""
    folded = " ".join(text.split())
    return folded if len(folded) <= chars else folded[: chars - 1].rstrip() + "…"


# -- blocks ---------------------------------------------------------------------------


def _section(block_id: str, mrkdwn: str, accessory: Block | None = None) -> Block:
    block: Block = {"type": "section", "block_id": block_id, "text": {"type": "mrkdwn", "text": mrkdwn}}
    if accessory is not None:
        block["accessory"] = accessory
    return block


def _context(block_id: str, mrkdwn: str) -> Block:
    return {"type": "context", "block_id": block_id, "elements": [{"type": "mrkdwn", "text": mrkdwn}]}


def _button(label: str, action_id: str, value: str, style: str = "") -> Block:
    button: Block = {
        "type": "button",
        "action_id": action_id,
        "text": {"type": "plain_text", "text": label[:BUTTON_TEXT_LIMIT], "emoji": True},
        "value": value[:BUTTON_VALUE_LIMIT],
    }
    if style:
        button["style"] = style
    return button


def _text_parts(block_id: str, text: str, prefix: str = "", context: bool = False) -> list[_Part]:
    """``text`` as as many sections (or context lines) as it needs; ``prefix`` (mrkdwn,
    e.g. an emoji) goes before the first piece, its room kept free in every piece."""
    room = SECTION_TEXT_LIMIT - len(prefix)
    parts = []
    for index, piece in enumerate(split_text(unmask_links(text), room)):
        mrkdwn = (prefix if index == 0 else "") + escape(piece)
        make = _context if context else _section
        parts.append(_Part(make(f"{block_id}_{index}", mrkdwn), mrkdwn))
    return parts


def _link(url: str) -> str:
    """A URL usable inside ``<url|label>``; empty when it is not a web link or too long."""
    if not url.startswith(("https://", "http://")) or len(url) > MAX_LINK_CHARS:
        return ""
    return url.replace(" ", "%20").replace("|", "%7C").replace("<", "%3C").replace(">", "%3E")


def kind_label(citation: CitationView) -> str:
    """``excerpt`` or ``summary, layer 2``."""
    if citation.kind is CitationKind.EXCERPT:
        return "excerpt"
    return f"summary, layer {citation.layer}"


def _citation_part(citation: CitationView) -> _Part:
    title = clip(unmask_links(citation.title) or "untitled", TITLE_CHARS)
    url = _link(citation.link)
    shown = f"<{url}|{escape(title).replace('|', '¦')}>" if url else escape(title)
    notes = f" · {escape(unmask_links(citation.notes))}" if citation.notes else ""
    lines = [f"*[{citation.number}]* {shown} · _{kind_label(citation)}_{notes}"]
    quote = clip(unmask_links(citation.quote), QUOTE_CHARS)
    if quote:
        lines.append(f">{escape(quote)}")
    accessory = None
    if citation.kind is CitationKind.SUMMARY and citation.node_id:
        accessory = _button("Open summary", ACTION_NODE, citation.node_id)
    block = _section(f"raptor_source_{citation.number}", "\n".join(lines), accessory)
    return _Part(block, escape(f"[{citation.number}] {title} ({kind_label(citation)})"))


def _feedback_part(answer_id: str) -> _Part:
    """Slack's native 👍/👎 under an answer. Its block id keeps the ``raptor_feedback`` mark
    by which :mod:`adapters.slack.threads` knows an answer."""
    element = FeedbackButtonsElement(
        action_id=ACTION_FEEDBACK,
        positive_button=FeedbackButtonObject(text="Helpful", accessibility_label="This answer helped",
                                             value=vote_value(answer_id, up=True)),
        negative_button=FeedbackButtonObject(text="Not helpful", accessibility_label="This answer did not help",
                                             value=vote_value(answer_id, up=False)),
    )
    return _Part(ContextActionsBlock(block_id=FEEDBACK_BLOCK, elements=[element]).to_dict(), "")


def feedback_blocks(reply: Reply) -> list[Block]:
    """The native feedback element a streamed answer ends with (the blocks of ``chat.stopStream``):
    one block for an answer kept for votes and seen by everyone; none for any other reply."""
    if reply.kind is not ReplyKind.ANSWER or not reply.answer_id or reply.private:
        return []
    return [_feedback_part(reply.answer_id).block]


def _markdown_parts(text: str) -> list[_Part]:
    """The answer's text as markdown blocks, each in a message of its own when it is long.

    The text goes as written, standard Markdown, which the markdown block renders (it is
    not mrkdwn), but for its links, unmasked, and its ``<``, escaped (:func:`markdown_text`).
    Pieces are measured escaped as mrkdwn, which counts each ``<`` as its escape does, so
    that each piece's fallback text (escaped, as every ``text`` is) fits as well.

    The blocks carry the :data:`ANSWER_BLOCK` prefix that :mod:`adapters.slack.threads`
    looks for. Slack's documentation says it ignores a markdown block's ``block_id`` and
    does not keep it (and may return the block translated into others), so on Slack
    itself ``conversations.replies`` may not show that mark; the stand-in keeps it.
    """
    pieces = split_markdown(unmask_links(text), MARKDOWN_TEXT_LIMIT, escaped_weight) or ["(no answer text)"]
    blocks = [{"type": "markdown", "block_id": f"{ANSWER_BLOCK}_{index}", "text": markdown_text(piece)}
              for index, piece in enumerate(pieces)]
    return [_Part(block, escape(piece), len(block["text"])) for block, piece in zip(blocks, pieces, strict=True)]


def _answer_parts(reply: Reply) -> list[_Part]:
    parts = _markdown_parts(reply.text)
    if reply.warning:
        parts += _text_parts("raptor_warning", reply.warning, prefix=":warning: ", context=True)
    if reply.citations:
        parts.append(_Part({"type": "divider"}, ""))
        parts.append(_Part(_context("raptor_sources", "*Sources*"), SOURCES_HEADING))
        parts += [_citation_part(citation) for citation in reply.citations]
    if reply.answer_id:
        parts.append(_feedback_part(reply.answer_id))
    return parts


def _error_parts(reply: Reply) -> list[_Part]:
    parts = _text_parts("raptor_error", reply.text, prefix=":warning: ")
    if reply.reference and reply.reference not in reply.text:
        mrkdwn = f"Reference: `{escape(clip(reply.reference, 100))}`"
        parts.append(_Part(_context("raptor_reference", mrkdwn), mrkdwn))
    return parts


def reply_parts(reply: Reply) -> list[_Part]:
    """Every block of a reply, in order, before it is cut into messages."""
    if reply.kind is ReplyKind.ANSWER:
        return _answer_parts(reply)
    if reply.kind is ReplyKind.ERROR:
        return _error_parts(reply)
    if reply.kind is ReplyKind.PROGRESS:
        return _text_parts("raptor_progress", reply.text, prefix=f":{WORKING_REACTION}: ", context=True)
    return _text_parts("raptor_info", reply.text)


def paginate(parts: Iterable[_Part]) -> list[SlackMessage]:
    """Blocks packed in order into as few messages as Slack's limits allow."""
    messages: list[SlackMessage] = []
    blocks: list[Block] = []
    texts: list[str] = []
    size = markdown = 0
    for part in parts:
        extra = len(part.fallback) + (1 if texts and part.fallback else 0)
        if blocks and (len(blocks) >= MAX_BLOCKS or size + extra > MAX_TEXT_CHARS
                       or markdown + part.markdown_chars > MARKDOWN_TEXT_LIMIT):
            messages.append(_message(blocks, texts))
            blocks, texts, size, markdown = [], [], 0, 0
            extra = len(part.fallback)
        blocks.append(part.block)
        markdown += part.markdown_chars
        if part.fallback:
            texts.append(part.fallback)
            size += extra
    if blocks:
        messages.append(_message(blocks, texts))
    return messages


def _message(blocks: Sequence[Block], texts: Sequence[str]) -> SlackMessage:
    # The fallback is never empty: a message with blocks but no text notifies as "(no preview)".
    return SlackMessage("\n".join(texts) or "…", tuple(blocks))


def render_reply(reply: Reply) -> list[SlackMessage]:
    """A reply as the messages to post, in order (see the module docstring). Never empty:
    a reply with no text at all becomes one short message saying so."""
    messages = paginate(reply_parts(reply))
    return messages or [SlackMessage("…", (_section("raptor_info_0", "…"),))]


def render_question(user_id: str, text: str) -> list[SlackMessage]:
    """A question asked with the slash command, shown in the channel so its answer (posted in
    a thread under it) has its question above it. The question's own blocks are marked
    with :data:`QUESTION_BLOCK`, so a follow-up in that thread gets it as context."""
    asked = _Part(_context("raptor_asked", f"<@{user_id}> asked:"), f"<@{user_id}> asked:")
    return paginate([asked, *_text_parts(QUESTION_BLOCK, text)])
