"""HTML pages (.html, .htm): the visible text, titled by ``<title>``.

Contract: :func:`load_html` decodes the page (a ``<meta charset>`` in the first
4 KB is honoured), parses it with libxml2 (lxml) in one pass with no tree, and
returns the text a browser would show: scripts, styles, the head and hidden
elements (the ``hidden`` attribute, ``aria-hidden="true"``, an inline
``display:none`` / ``visibility:hidden`` style, or a simple ``<style>`` rule,
see :mod:`raptor_engine.loaders.html_css`) are left out. A page that cannot be
parsed is refused as CORRUPT, one without visible text as NO_TEXT; no lxml
exception escapes. The text and time budgets are checked as the parser goes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from lxml import etree

from raptor_engine.errors import DocumentRejected, RejectReason
from raptor_engine.loaders.common import (
    Budget,
    LoadedText,
    Request,
    clean_title,
    decode_text,
    default_title,
    logger,
    require_text,
)
from raptor_engine.loaders.html_css import CssRules, css_hides

# Content of these elements is never visible text.
_HTML_SKIP = frozenset({"script", "style", "noscript", "template", "svg", "iframe", "object"})
# These end a paragraph: a blank line before and after.
_HTML_PARAGRAPH = frozenset(
    {
        "p", "div", "section", "article", "main", "header", "footer", "aside", "nav",
        "blockquote", "pre", "ul", "ol", "dl", "table", "form", "fieldset", "figure",
        "figcaption", "address", "details", "hr", "h1", "h2", "h3", "h4", "h5", "h6",
        "body", "html",
    }
)  # fmt: skip
# These end a line only.
_HTML_LINE = frozenset({"br", "li", "tr", "dt", "dd", "caption", "summary", "option", "legend"})
_HTML_CELL = frozenset({"td", "th"})
_HTML_CHARSET_RE = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.I)
_HTML_TITLE_CHARS = 1000
_HTML_TICK = 1024  # parser events between two looks at the clock
_CSS_MAX_CHARS = 1024 * 1024  # stylesheet text read per page; the rest is ignored


def load_html(data: bytes, request: Request) -> LoadedText:
    """Load an HTML page: visible text only, title from ``<title>``."""
    filename = request.filename
    match = _HTML_CHARSET_RE.search(data[:4096])
    declared = match.group(1).decode("ascii", "replace") if match else None
    source = decode_text(data, filename, declared)
    if not source.strip():
        raise DocumentRejected(RejectReason.EMPTY, filename, "the file contains only blank space")
    collector = _HTMLText(request.budget)
    try:
        # One call, not a feed per chunk: libxml2's push parser re-scans an
        # unfinished construct on every chunk, which is quadratic on junk.
        parser = etree.HTMLParser(target=collector, encoding="utf-8", no_network=True)
        etree.fromstring(source.encode("utf-8", "replace"), parser)
    except DocumentRejected:
        raise
    except Exception as exc:  # libxml2 recovers from almost anything, but never let it escape
        logger.warning("html parse of %s failed: %r", filename, exc)
        raise DocumentRejected(
            RejectReason.CORRUPT, filename, "the page could not be read as HTML"
        ) from exc
    text = require_text(
        collector.text(),
        filename,
        "the page has no visible text (only scripts, styles, hidden parts or markup); "
        "send a page with readable content or paste the text as a .txt file",
    )
    title = clean_title(collector.title) or default_title(filename)
    return LoadedText(title=title, text=text, format="html")


class _HTMLText:
    """An lxml parser target collecting the visible text and the first ``<title>``.

    libxml2 reports every element's start and end, properly nested (it closes
    implied and unclosed elements itself), and builds no tree when given a
    target. Whitespace is collapsed like a browser does, except inside
    ``<pre>``; block elements become line or paragraph breaks; table cells of
    a row are joined with `` | ``. Hidden elements and everything inside them
    are left out (see :meth:`_is_hidden`).
    """

    def __init__(self, budget: Budget) -> None:
        self.title = ""
        self._budget = budget
        self._out: list[str] = []
        self._pending: list[str] = []  # text since the last tag, emitted as one piece
        self._pending_breaks = 0
        self._depth = 0
        self._hidden_at = 0  # depth of the outermost hidden element open; 0 when none
        self._skip = 0  # open elements whose content is never text (script, style, ...)
        self._head = 0
        self._style = 0
        self._css: list[str] = []
        self._css_chars = 0
        self._rules = CssRules()
        self._in_title = False
        self._title_done = False
        self._pre_depth = 0
        self._cells_in_row = 0
        self._events = 0

    # -- lxml target interface -----------------------------------------------

    def start(self, tag: object, attrib: Mapping[str, str]) -> None:
        self._flush()
        self._tick()
        self._depth += 1
        if self._hidden_at:
            return
        name = tag.lower() if isinstance(tag, str) else ""
        if self._is_hidden(name, attrib):
            self._hidden_at = self._depth
        elif name == "title" and not self._title_done and not self._skip:
            self._in_title = True
        elif name == "head":
            self._head += 1
        elif name in _HTML_SKIP:
            self._skip += 1
            self._style += name == "style"
        elif name in _HTML_CELL:
            if self._cells_in_row and not self._skipping():
                self._emit(" | ")
            self._cells_in_row += 1
        else:
            self._block(name)
            self._pre_depth += name == "pre"

    def end(self, tag: object) -> None:
        self._flush()
        depth = self._depth
        self._depth -= 1
        if self._hidden_at:
            if depth == self._hidden_at:
                self._hidden_at = 0
            return
        name = tag.lower() if isinstance(tag, str) else ""
        if name == "title" and self._in_title:
            self._in_title = False
            self._title_done = True
        elif name == "head":
            self._head = max(self._head - 1, 0)
        elif name in _HTML_SKIP:
            self._skip = max(self._skip - 1, 0)
            if name == "style" and self._style:
                self._style -= 1
                self._rules.add_sheet("".join(self._css))
                self._css.clear()
        elif name not in _HTML_CELL:
            self._block(name)
            if name == "pre" and self._pre_depth:
                self._pre_depth -= 1

    def data(self, data: str) -> None:
        if self._hidden_at:
            return
        if self._in_title:
            if len(self.title) < _HTML_TITLE_CHARS:
                self.title += data[:_HTML_TITLE_CHARS]
        elif self._style:
            if self._css_chars < _CSS_MAX_CHARS:
                self._css.append(data)
                self._css_chars += len(data)
        elif not self._skipping():
            self._pending.append(data)

    def close(self) -> str:
        self._flush()
        return self.text()

    # -- output ------------------------------------------------------------

    def text(self) -> str:
        """The collected text (not yet normalised)."""
        return "".join(self._out)

    def _flush(self) -> None:
        if self._pending:
            chunk = "".join(self._pending)
            self._pending.clear()
            self._emit(chunk)

    def _break(self, newlines: int) -> None:
        # Breaks are deferred so that adjacent blocks yield one blank line,
        # not a pile of them, and nothing is emitted before the first text.
        self._pending_breaks = max(self._pending_breaks, newlines)

    def _emit(self, chunk: str) -> None:
        if self._pre_depth == 0:
            chunk = re.sub(r"\s+", " ", chunk)
            if chunk == " ":
                # Whitespace between tags: one space at most, none at a line start.
                at_line_start = not self._out or self._out[-1].endswith((" ", "\n"))
                if not self._pending_breaks and not at_line_start:
                    self._out.append(" ")
                return
        if not chunk:
            return
        if self._out and self._pending_breaks:
            self._out[-1] = self._out[-1].rstrip(" ")
            self._out.append("\n" * self._pending_breaks)
        self._pending_breaks = 0
        if self._pre_depth == 0 and (not self._out or self._out[-1].endswith((" ", "\n"))):
            chunk = chunk.lstrip(" ")
        if chunk:
            self._budget.add_text(len(chunk))
            self._out.append(chunk)

    # -- helpers -----------------------------------------------------------

    def _tick(self) -> None:
        self._events += 1
        if self._events % _HTML_TICK == 0:
            self._budget.check_time()

    def _skipping(self) -> bool:
        return bool(self._skip or self._head)

    def _block(self, tag: str) -> None:
        if tag == "tr":
            self._cells_in_row = 0
        if tag in _HTML_PARAGRAPH:
            self._break(2)
        elif tag in _HTML_LINE:
            self._break(1)

    def _is_hidden(self, tag: str, attrib: Mapping[str, str]) -> bool:
        """True for an element a browser would not show.

        The ``hidden`` attribute, ``aria-hidden="true"``, an inline style with
        ``display: none`` or ``visibility: hidden``; else a ``<style>`` rule
        seen earlier in the page (see :class:`CssRules`). An inline style that
        sets ``display`` or ``visibility`` to anything else wins over the rules.
        """
        if not attrib:  # most elements: skip the (slow) mapping lookups below
            return self._rules.hides(tag, "", "")
        if "hidden" in attrib or attrib.get("aria-hidden", "").strip().lower() == "true":
            return True
        inline = css_hides(attrib.get("style", ""))
        if inline is not None:
            return inline
        return self._rules.hides(tag, attrib.get("id", ""), attrib.get("class", ""))
