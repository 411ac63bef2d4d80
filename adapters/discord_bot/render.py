"""Pure rendering of neutral replies as Discord messages, within Discord's limits.

:func:`render_reply` turns one :class:`~bot.neutral.Reply` into the list of
:class:`Outgoing` messages to send, in order:

* an answer is one or more embeds with its text, then embeds of numbered
  sources (each an excerpt or a summary with its layer, its title linked to
  the message or file it came from, a short quote and the node id), with
  buttons on the last message: one per summary citation (opens the node and
  its children) and 👍/👎 (votes on the answer);
* (an answer that fits in one message may go instead as Components v2:
  :mod:`~adapters.discord_bot.layout`, with the same texts and buttons);
* every other reply is plain text (progress marked ⏳, errors ⚠️ with their
  reference), with its files (the tree picture) on the first message.

An answer's text is the model's (or the extractive answer's) Markdown, kept as
written: Discord renders lists, headings, quotes and code itself. Discord does
not render tables, so a pipe table becomes a fenced code block with its columns
aligned. Text quoted from documents in the sources stays escaped.

Documents and models never speak in the bot's voice: every text of a reply goes
through :func:`safe_text` (its links unmasked, its ``@everyone``, ``@here``, ``<@…>``
and ``<@&…>`` broken by a zero-width space, so they show as text and never notify)
before the bot adds its own; the link it makes to a source's file or message stays a
link. The messages are also sent with no mention allowed
(``adapters.discord_bot.sending``).

Nothing is cut: text over a limit continues in the next embed or message, cut at
a paragraph, line, sentence or word, never inside a code block that fits in one
piece (one that does not is closed and reopened across pieces).
Limits (Discord's): 2,000 characters of content per message; per embed a
4,096-character description, 256-character title and field names,
1,024-character field values and 25 fields; 6,000 characters over all the
embeds of a message, and 10 embeds; 5 rows of 5 buttons, labels of 80
characters. No I/O here; ``client`` turns :class:`Outgoing` into requests.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import discord

from adapters.discord_bot import translate
from adapters.markdown_text import align_tables, close_open_fence, split_markdown
from adapters.untrusted_text import unmask_links
from bot import replies
from bot.neutral import Attachment, CitationKind, CitationView, Reply, ReplyKind

log = logging.getLogger(__name__)

CONTENT_LIMIT = 2000
DESCRIPTION_LIMIT = 4096
TITLE_LIMIT = 256
FIELD_NAME_LIMIT = 256
FIELD_VALUE_LIMIT = 1024
FIELDS_PER_EMBED = 25
EMBED_TOTAL_LIMIT = 6000  # over all the embeds of one message
EMBEDS_PER_MESSAGE = 10
BUTTONS_PER_ROW = 5
BUTTON_ROWS = 5
BUTTON_LABEL_LIMIT = 80
QUOTE_LIMIT = 300  # a source's quote under an answer: short, the node command shows all of it

ANSWER_COLOUR = discord.Colour(0x5865F2)
SOURCES_COLOUR = discord.Colour(0x4F545C)
SOURCES_TITLE = "Sources"
PROGRESS_MARK = "⏳ "
ERROR_MARK = "⚠️ "
EMPTY_TEXT = "(nothing to show)"


@dataclass(frozen=True, slots=True)
class ButtonSpec:
    """One button to attach: its label, custom id, style, optional emoji and row (0-4)."""

    label: str
    custom_id: str
    style: discord.ButtonStyle = discord.ButtonStyle.secondary
    emoji: str | None = None
    row: int = 0


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One Discord message to send: content, embeds, buttons and files, each within the limits."""

    content: str = ""
    embeds: tuple[discord.Embed, ...] = ()
    buttons: tuple[ButtonSpec, ...] = ()
    files: tuple[Attachment, ...] = ()


def render_reply(reply: Reply) -> list[Outgoing]:
    """The messages that say ``reply`` on Discord (at least one); see the module docstring."""
    if reply.kind is ReplyKind.ANSWER:
        return answer_messages(reply)
    return text_messages(reply_text(reply), reply.attachments)


def safe_text(text: str) -> str:
    """Text from a document, a model or a person as the bot's message may show it: links
    unmasked (:func:`adapters.untrusted_text.unmask_links`), mentions made inert (a
    zero-width space after their ``@``, as :func:`discord.utils.escape_mentions` does)."""
    return discord.utils.escape_mentions(unmask_links(text))


def draft_content(text: str) -> str:
    """An answer's text so far, as the content of the message that shows it while it is
    written: made safe (:func:`safe_text`), within a message's 2,000 characters."""
    content = safe_text(text)
    return content if len(content) <= CONTENT_LIMIT else content[: CONTENT_LIMIT - 1] + "…"


def reply_text(reply: Reply) -> str:
    """A non-answer reply as text, made safe: progress and errors marked, an error's reference added."""
    text = safe_text(reply.text.strip())
    if reply.kind is ReplyKind.ERROR:
        if reply.reference and reply.reference not in text:
            text += f" (reference {reply.reference})"
        return ERROR_MARK + text
    if reply.kind is ReplyKind.PROGRESS:
        return PROGRESS_MARK + text
    return text


# -- plain text ---------------------------------------------------------------------------


def text_messages(text: str, files: Sequence[Attachment] = ()) -> list[Outgoing]:
    """``text`` split into messages of at most 2,000 characters, the files on the first."""
    parts = split_text(text, CONTENT_LIMIT)
    if not parts:
        parts = [""] if files else [EMPTY_TEXT]
    return [Outgoing(content=part, files=tuple(files) if i == 0 else ()) for i, part in enumerate(parts)]


def split_text(text: str, limit: int) -> list[str]:
    """``text`` in pieces of at most ``limit`` characters, broken at paragraph or line ends
    where possible, else at sentence ends or spaces, else anywhere, and never inside a code
    block that fits in a piece (see :func:`adapters.markdown_text.split_markdown`); blank
    pieces are dropped."""
    return split_markdown(text, limit)


def answer_markdown(text: str) -> str:
    """An answer's Markdown as Discord shows it well, made safe (:func:`safe_text`): each
    table a fixed-width code block with aligned columns, a code block the text leaves open
    closed (so the warning after it is not code); everything else as written."""
    return close_open_fence(align_tables(safe_text(text.strip()), fenced=True))


# -- answers ------------------------------------------------------------------------------


def answer_messages(reply: Reply) -> list[Outgoing]:
    """The answer's embeds then its sources' embeds, packed into messages; buttons on the last."""
    embeds = answer_embeds(reply) + source_embeds(reply.citations)
    groups = pack_embeds(embeds)
    buttons = answer_buttons(reply)
    messages = [Outgoing(embeds=tuple(group)) for group in groups]
    last = messages[-1]
    messages[-1] = Outgoing(last.content, last.embeds, buttons, last.files)
    return messages


def answer_embeds(reply: Reply) -> list[discord.Embed]:
    """The answer text (and its warning) in as many embeds as its length needs."""
    text = answer_text(reply)
    return [discord.Embed(description=part, colour=ANSWER_COLOUR) for part in split_text(text, DESCRIPTION_LIMIT)]


def answer_text(reply: Reply) -> str:
    """The answer's text as shown (:func:`answer_markdown`), its warning after it."""
    text = answer_markdown(reply.text) or EMPTY_TEXT
    if reply.warning:
        text += f"\n\n{ERROR_MARK}*{discord.utils.escape_markdown(safe_text(reply.warning.strip()))}*"
    return text


def source_embeds(citations: Sequence[CitationView]) -> list[discord.Embed]:
    """The numbered sources as embed fields, as many embeds as the 25-field and
    6,000-character limits need (the first titled "Sources")."""
    embeds: list[discord.Embed] = []
    current: discord.Embed | None = None
    for citation in citations:
        name, value = citation_field(citation)
        if current is None or len(current.fields) >= FIELDS_PER_EMBED or \
                embed_length(current) + len(name) + len(value) > EMBED_TOTAL_LIMIT:
            current = discord.Embed(title=SOURCES_TITLE if not embeds else None, colour=SOURCES_COLOUR)
            embeds.append(current)
        current.add_field(name=name, value=value, inline=False)
    return embeds


def citation_field(citation: CitationView) -> tuple[str, str]:
    """A source as (field name, field value): ``[2] summary · layer 1 · Title`` and
    the quote, the link and the node id."""
    notes = f" · {_plain(citation.notes)}" if citation.notes else ""
    name = _cut(f"[{citation.number}] {kind_label(citation)} · {_plain(citation.title) or 'untitled'}{notes}",
                FIELD_NAME_LIMIT)
    lines = []
    quote = _plain(citation.quote)
    if quote:
        lines.append("> " + _cut(quote, QUOTE_LIMIT))
    where = [f"[open the source]({citation.link})"] if is_web_link(citation.link) else []
    where.append(f"node `{citation.node_id}`")
    lines.append(" · ".join(where))
    value = "\n".join(lines)
    if len(value) > FIELD_VALUE_LIMIT:  # only a very long link or node id gets here
        value = _cut(value, FIELD_VALUE_LIMIT)
    return name, value


def kind_label(citation: CitationView) -> str:
    if citation.kind is CitationKind.SUMMARY:
        return f"summary · layer {citation.layer}"
    return "excerpt"


def answer_buttons(reply: Reply) -> tuple[ButtonSpec, ...]:
    """A button per summary citation (as many as fit in four rows), then 👍 and 👎 when the
    answer has an id to vote on. Ids too long for a custom id get no button: the field
    shows the node id for ``node``."""
    buttons: list[ButtonSpec] = []
    node_slots = (BUTTON_ROWS - 1) * BUTTONS_PER_ROW
    for citation in reply.citations:
        if citation.kind is not CitationKind.SUMMARY or len(buttons) >= node_slots:
            continue
        custom_id = translate.node_custom_id(citation.node_id)
        if custom_id is None:
            continue
        label = _cut(f"Open [{citation.number}] (layer {citation.layer} summary)", BUTTON_LABEL_LIMIT)
        buttons.append(ButtonSpec(label, custom_id, row=len(buttons) // BUTTONS_PER_ROW))
    up = translate.vote_custom_id(reply.answer_id, True) if reply.answer_id else None
    down = translate.vote_custom_id(reply.answer_id, False) if reply.answer_id else None
    if up and down:
        row = (len(buttons) + BUTTONS_PER_ROW - 1) // BUTTONS_PER_ROW
        buttons.append(ButtonSpec("Helpful", up, discord.ButtonStyle.success, "👍", row))
        buttons.append(ButtonSpec("Not helpful", down, discord.ButtonStyle.danger, "👎", row))
    return tuple(buttons)


def pack_embeds(embeds: Sequence[discord.Embed]) -> list[list[discord.Embed]]:
    """Embeds grouped into messages: at most 10 each and 6,000 characters over a message."""
    groups: list[list[discord.Embed]] = [[]]
    total = 0
    for embed in embeds:
        size = embed_length(embed)
        if groups[-1] and (len(groups[-1]) >= EMBEDS_PER_MESSAGE or total + size > EMBED_TOTAL_LIMIT):
            groups.append([])
            total = 0
        groups[-1].append(embed)
        total += size
    return groups


def embed_length(embed: discord.Embed) -> int:
    """The characters of an embed that count towards the 6,000 (as ``len(embed)``)."""
    return len(embed)


def is_web_link(link: str) -> bool:
    return link.startswith(("https://", "http://"))


def _plain(text: str) -> str:
    """One line with Discord's markdown escaped and made safe (:func:`safe_text`): titles and
    quotes come from documents."""
    return discord.utils.escape_markdown(safe_text(" ".join(text.split())))


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    cut = text[: limit - 1].removesuffix("\\")  # never leave half an escape
    return cut + "…"


# -- adapter-level notices -------------------------------------------------------------


def send_failed_reply(reference: str) -> Reply:
    """Said (as plainly as possible) when a reply could not be posted."""
    text = (
        "I could not post my reply here. Please try again; if it keeps happening, "
        "tell the bot's operator"
    )
    return Reply(ReplyKind.ERROR, f"{text} (reference {reference}).", reference=reference)


def failure_reply(reference: str) -> Reply:
    """Said when handling an event failed here, in the adapter (the handler says its own)."""
    return Reply(ReplyKind.ERROR, replies.unexpected_text(reference), reference=reference)


def download_failed_reply(filename: str, reference: str) -> Reply:
    text = (
        f"I could not download “{filename}” from Discord, so it was not added. Please try again; "
        f"if it keeps happening, tell the bot's operator (reference {reference})."
    )
    return Reply(ReplyKind.ERROR, text, reference=reference)


def too_large_reply(filename: str, size: int, limit: int) -> Reply:
    """An attachment over ``files.max_mb``, refused before downloading it."""
    return Reply(ReplyKind.ERROR, replies.too_large_text(filename, size, limit))


NOT_ENABLED_TEXT = "I'm not enabled in this channel, so I can't help here."

