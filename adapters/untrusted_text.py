"""Text the bot did not write, made safe to show in its own messages: no link in it stays masked.

An answer quotes documents word for word (offline) or is whatever a language model
wrote, so it can hold Markdown such as ``[reset your password](https://…)``: in the
bot's message that would be a link whose text hides where it goes. Every platform's
rendering passes such text through :func:`unmask_links` before adding anything of its
own (the links the bot makes to a cited file or message are added afterwards, and stay
clickable); each platform then defuses its own mention syntax (``adapters.slack.blocks``,
``adapters.discord_bot.render``; a terminal has neither, see ``adapters.console.translate``).

:func:`unmask_links` puts a space after a ``]`` that a ``(`` follows, and after the ``]``
of a ``[label]`` that begins a line and a ``:`` follows. Slack's markdown, Discord's and
CommonMark all need those characters side by side for an inline link (``[text](url)``,
an image ``![alt](url)``) or a link reference definition (``[label]: url``, which would
make ``[text][label]`` a link elsewhere), so none survives, and the reader sees the text
and the address as written, one space apart. Code is no exception: where code begins and
ends is read differently by each platform (Discord ends a fenced block at the first three
backticks, even inside a line), and a link must not survive on one of them because this
module read the text as code; ``handlers[key](event)`` in code becomes
``handlers[key] (event)``, still readable.

Only a ``]`` is ever followed by something new, so the change is the same for a text and
any longer text it begins, except for a ``]`` at the very end (the next character decides):
:func:`settled` leaves that out, for a text shown while a model writes it, whose shown part
cannot be taken back (Slack's streaming appends). Pure functions: no input/output.
"""

from __future__ import annotations

import re

_INLINE_LINK = re.compile(r"\](?=\()")
# A label at the start of a line (after indentation, quote marks or a list marker) before a colon;
# it may run over lines, as CommonMark allows.
_DEFINITION = re.compile(r"^([ \t>]*(?:(?:[-+*]|\d{1,9}[.)])[ \t]+)?\[[^\[\]]*\])(?=:)", re.MULTILINE)


def unmask_links(text: str) -> str:
    """``text`` with no Markdown link or link definition left (see the module docstring)."""
    return _INLINE_LINK.sub("] ", _DEFINITION.sub(r"\1 ", text))


def settled(text: str) -> str:
    """The part of a growing ``text`` whose :func:`unmask_links` form the rest cannot change:
    all of it but a ``]`` at its very end (the next character may be a ``(`` or a ``:``)."""
    return text[:-1] if text.endswith("]") else text
