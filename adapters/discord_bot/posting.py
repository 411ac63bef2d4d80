"""A rendered reply as discord.py's ``send`` arguments, and an answer posted as one Components v2
message where Discord takes it.

Contract of :func:`post_reply` and :func:`try_layout`: an answer that fits in one message
(:func:`~adapters.discord_bot.layout.answer_layout`) is posted, or edited into its draft, as one
Components v2 message when the configuration allows it (``discord.components_v2``); when Discord
refuses it with a 400 (an API without Components v2, or a limit it counts otherwise), the same
reply goes in today's form (:func:`~adapters.discord_bot.render.render_reply`: embeds), so a
person always gets an answer. Other failures are the caller's, as before.

Every message and edit is sent with :data:`ALLOWED_MENTIONS`, none: what a reply says never
notifies anyone.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import discord

from adapters.discord_bot import render
from adapters.discord_bot.layout import answer_layout
from adapters.discord_bot.render import Outgoing
from bot.neutral import Reply

log = logging.getLogger(__name__)

# No one: not @everyone, a user, a role, nor the author of the message replied to.
ALLOWED_MENTIONS = discord.AllowedMentions.none()
BAD_REQUEST = 400

Post = Callable[[dict[str, Any], bool], Awaitable[object]]
"""Posts one message of a reply: its ``send`` arguments, and whether it is the reply's first."""


async def post_reply(reply: Reply, post: Post, components_v2: bool) -> None:
    """Posts ``reply`` with ``post``: as one Components v2 message when it can be and Discord
    takes it, else as today's messages (see the module docstring). Raises what ``post`` raises,
    but a 400 refusing the Components v2 message."""
    async def post_layout(layout: discord.ui.LayoutView) -> object:
        return await post({"view": layout, "allowed_mentions": ALLOWED_MENTIONS}, True)

    if await try_layout(reply, components_v2, post_layout):
        return
    for index, outgoing in enumerate(render.render_reply(reply)):
        await post(message_arguments(outgoing), index == 0)


async def try_layout(reply: Reply, components_v2: bool,
                     send: Callable[[discord.ui.LayoutView], Awaitable[object]]) -> bool:
    """Whether ``reply`` went as one Components v2 message through ``send`` (a post, or the
    edit of a draft): False when it is not to (not an answer, too long, a private reply,
    ``components_v2`` off) or Discord refused it with a 400 (logged), and the caller posts
    today's form instead."""
    layout = answer_layout(reply) if components_v2 and not reply.private else None
    if layout is None:
        return False
    try:
        await send(layout)
    except discord.HTTPException as exc:
        if exc.status != BAD_REQUEST:
            raise
        log.warning("Discord refused an answer as one Components v2 message (%s); posting it as embeds", exc)
        return False
    return True


def message_arguments(outgoing: Outgoing) -> dict[str, Any]:
    """The keyword arguments of ``send`` for one outgoing message (no mention allowed)."""
    arguments: dict[str, Any] = {"allowed_mentions": ALLOWED_MENTIONS}
    if outgoing.content:
        arguments["content"] = outgoing.content
    if outgoing.embeds:
        arguments["embeds"] = list(outgoing.embeds)
    if outgoing.files:
        arguments["files"] = [discord.File(io.BytesIO(a.data), filename=a.filename) for a in outgoing.files]
    view = button_view(outgoing.buttons)
    if view is not None:
        arguments["view"] = view
    return arguments


def button_view(buttons: tuple[render.ButtonSpec, ...]) -> discord.ui.View | None:
    """The buttons as a view for sending. It is stopped at once: presses are handled by
    custom id in ``on_interaction`` (they survive restarts), so discord.py need not keep
    one view per message in memory."""
    if not buttons:
        return None
    view = discord.ui.View(timeout=None)
    for spec in buttons:
        view.add_item(discord.ui.Button(label=spec.label, custom_id=spec.custom_id, style=spec.style,
                                        emoji=spec.emoji, row=spec.row))
    view.stop()
    return view
