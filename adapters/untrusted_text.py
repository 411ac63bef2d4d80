"""Text the bot did not write, made safe to show in its own messages: no link in it stays masked.

An answer quotes documents word for word (offline) or is whatever a language model
wrote, so it can hold Markdown such as ``[reset your password](https://…)``: in the
bot's message that would be a link whose text hides where it goes. Slack's and Discord's
renderings pass such text through :func:`unmask_links` before adding anything of their
own (the links the bot makes to a cited file or message are added afterwards, and stay
clickable), then defuse their own mention syntax (``adapters.slack.blocks``,
``adapters.discord_bot.render``). A terminal shows a masked link's address as written and
has no mentions; what it must not print is an escape sequence (``adapters.console.translate``).

:func:`unmask_links` puts a space after a ``]`` that a ``(`` follows, and after the ``]``
of a ``[label]`` that begins a line and a ``:`` follows. Slack's markdown, Discord's and
CommonMark all need those characters side by side for an inline link (``[text](url)``,
an image ``![alt](url)``) or a link reference definition (``[label]: url``, which would
make ``[text][label]`` a link elsewhere), so none survives, and the reader sees the text
and the address as written, one space apart. Code is no exception: each platform reads
where code begins and ends in its own way, and a link must not survive on one of them
because this module read the text as code; ``handlers[key](event)`` in code becomes
``handlers[key] (event)``, still readable.

The space goes right after a ``]``, and whether it goes there depends on the text before
it and the one character after it only. So the unmasked form of a text begins the unmasked
form of any longer text it begins: a text shown while a model writes it, whose shown part
cannot be taken back (Slack's streaming appends), can be unmasked as it grows. A pure
function: no input/output.
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
