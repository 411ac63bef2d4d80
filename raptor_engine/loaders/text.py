"""Plain text (.txt) and Markdown (.md): decoded, normalised, kept as written.

Contract: :func:`load_text` returns the decoded, normalised text, titled by
the first level-1 Markdown heading (for ``md`` only) or else the file name.
Bytes that are not text are refused as BINARY, blank text as EMPTY, and text
past the budget as TOO_LARGE, before it is normalised.
"""

from __future__ import annotations

import io
import re

from raptor_engine.errors import DocumentRejected, RejectReason
from raptor_engine.loaders.common import LoadedText, Request, clean_title, decode_text, default_title, normalise_text

_MD_FENCE_RE = re.compile(r"^ {0,3}(```|~~~)")
_MD_H1_RE = re.compile(r"^ {0,3}#[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")


def load_text(data: bytes, request: Request) -> LoadedText:
    """Load a .txt or .md file; Markdown is kept as written (it reads as text)."""
    filename = request.filename
    text = decode_text(data, filename)
    # Checked before normalising, which costs memory in proportion to the text.
    request.budget.add_text(len(text))
    text = normalise_text(text)
    if not text.strip():
        raise DocumentRejected(RejectReason.EMPTY, filename, "the file contains only blank space")
    title = (_markdown_title(text) if request.format == "md" else "") or default_title(filename)
    return LoadedText(title=title, text=text, format=request.format)


def _markdown_title(text: str) -> str:
    """The text of the first level-1 ATX heading (``# Title``), outside code fences."""
    in_fence = False
    for line in io.StringIO(text):  # line by line, not a list of every line
        line = line.rstrip("\n")
        if _MD_FENCE_RE.match(line):
            # A "# comment" inside a fenced shell snippet is not a heading.
            in_fence = not in_fence
            continue
        match = None if in_fence else _MD_H1_RE.match(line)
        if match and match.group(1).strip():
            return clean_title(match.group(1))
    return ""
