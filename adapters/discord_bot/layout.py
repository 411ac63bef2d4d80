"""An answer as one Discord message of Components v2: pure rendering, no I/O.

:func:`answer_layout` gives the answer, its numbered sources and its buttons (a summary's node,
👍/👎, as :func:`~adapters.discord_bot.render.answer_buttons` makes them) as one
``discord.ui.LayoutView``: a container holding the answer's text, a separator and the sources,
then the buttons in action rows. discord.py sends a layout view with the message flag
``IS_COMPONENTS_V2`` (``1 << 15``), and such a message has no content and no embeds.

Discord's limits for such a message (docs.discord.com/developers/components: "the combined length
of all text across all components cannot exceed 4000 characters", "up to 40 total components"):
an answer over either is None here, and is posted in today's form
(:func:`~adapters.discord_bot.render.answer_messages`: embeds, over several messages if need be).
The text is the same as there, made safe the same way (:func:`~adapters.discord_bot.render.safe_text`).
"""

from __future__ import annotations

from collections.abc import Sequence

import discord

from adapters.discord_bot import render
from bot.neutral import Reply, ReplyKind

TEXT_LIMIT = 4000  # characters over every component of one message
COMPONENTS_LIMIT = 40  # components of one message, nested ones included


def answer_layout(reply: Reply) -> discord.ui.LayoutView | None:
    """The answer as one Components v2 message, or None when it is no answer or does not fit
    in Discord's limits (see the module docstring). The view is stopped: presses are handled
    by custom id, as for today's buttons (:func:`~adapters.discord_bot.sending.button_view`)."""
    if reply.kind is not ReplyKind.ANSWER:
        return None
    texts = [render.answer_text(reply)]
    if reply.citations:
        texts.append(sources_text(reply))
    buttons = render.answer_buttons(reply)
    if sum(map(len, texts)) + sum(len(spec.label) for spec in buttons) > TEXT_LIMIT:
        return None
    body: list[discord.ui.Item[discord.ui.LayoutView]] = [discord.ui.TextDisplay(texts[0])]
    for text in texts[1:]:
        body += [discord.ui.Separator(), discord.ui.TextDisplay(text)]
    view = discord.ui.LayoutView(timeout=None)
    view.add_item(discord.ui.Container(*body, accent_colour=render.ANSWER_COLOUR))
    for row in button_rows(buttons):
        view.add_item(row)
    if view.total_children_count > COMPONENTS_LIMIT:
        return None
    view.stop()
    return view


def sources_text(reply: Reply) -> str:
    """The numbered sources under a heading, one block each: the field name and value of
    today's embeds (:func:`~adapters.discord_bot.render.citation_field`)."""
    blocks = [f"**{name}**\n{value}" for name, value in map(render.citation_field, reply.citations)]
    return f"### {render.SOURCES_TITLE}\n" + "\n".join(blocks)


def button_rows(buttons: Sequence[render.ButtonSpec]) -> list[discord.ui.ActionRow[discord.ui.LayoutView]]:
    """The buttons in action rows, by each button's row."""
    rows: dict[int, discord.ui.ActionRow[discord.ui.LayoutView]] = {}
    for spec in buttons:
        row = rows.setdefault(spec.row, discord.ui.ActionRow())
        row.add_item(discord.ui.Button(label=spec.label, custom_id=spec.custom_id, style=spec.style,
                                       emoji=spec.emoji))
    return [rows[index] for index in sorted(rows)]
