"""Turn an uploaded file into plain text, or refuse it with a reason.

The one entry point is :func:`load_bytes` (and :func:`load_file`, which reads
a path with the same checks). Accepted types are plain text, Markdown, PDF,
HTML and Word (.docx). Anything else, and any file that is empty, too large,
binary, corrupt, encrypted or without text, is refused with
:class:`~raptor_engine.errors.DocumentRejected`, whose ``detail`` is written
for the person who sent the file. No exception of pypdf, lxml, zipfile or
expat escapes this module.

Every extraction is bounded in time and memory, whatever the file: what is
decompressed and parsed is capped and streamed, the text extracted is capped
(``max_text_chars``, refused past it), and the work is stopped past a time
budget. A small file built to unpack into gigabytes is refused early.

- Word (.docx): each zip member is read in chunks, its declared and actual
  unpacked sizes checked; the main part is parsed with a streaming parser
  (expat) that keeps no tree, so memory does not grow with the document.
- PDF: pypdf's per-stream decompression limits are lowered, decoded streams
  are dropped from pypdf's cache as extraction goes, and the time and text
  limits are checked between pages and inside each page.
- HTML: parsed by libxml2 (lxml) in one pass, with no tree; text hidden with
  the ``hidden`` attribute, ``aria-hidden="true"``, an inline ``display:none``
  / ``visibility:hidden`` style, or a simple ``<style>`` rule is left out.

Extracted text is normalised the same way for every format: ``'\\n'``
newlines, no trailing spaces on a line, paragraphs separated by one blank
line, no stray control characters.
"""

from __future__ import annotations

import codecs
import contextlib
import dataclasses
import io
import logging
import os
import pyexpat
import re
import stat
import time
import zipfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import Any

from lxml import etree
from pypdf import (
    Configuration as PdfConfiguration,
    PasswordType,
    PdfReader,
    apply_configuration as apply_pdf_configuration,
)
from pypdf.errors import DependencyError, LimitReachedError
from pypdf.generic import EncodedStreamObject

from raptor_engine.errors import DocumentRejected, RejectReason

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_TEXT_CHARS",
    "SUPPORTED_SUFFIXES",
    "LoadedText",
    "load_bytes",
    "load_file",
]

logger = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = 20 * 1024 * 1024
# The text a file may hold: ~1.3 M tokens, thousands of pages. More is almost
# always a data dump, and it would take long to embed.
DEFAULT_MAX_TEXT_CHARS = 5 * 1024 * 1024
SUPPORTED_SUFFIXES = (".txt", ".md", ".pdf", ".html", ".htm", ".docx")

_FORMAT_BY_SUFFIX = {
    ".txt": "txt",
    ".md": "md",
    ".pdf": "pdf",
    ".html": "html",
    ".htm": "html",
    ".docx": "docx",
}
_ACCEPTED = ", ".join(SUPPORTED_SUFFIXES[:-1]) + " or " + SUPPORTED_SUFFIXES[-1]

# Any one extraction stops past this; checked between pages and parser chunks,
# and between the operations of a PDF page.
_TIME_BUDGET_S = 120.0

# Text is refused as binary when more than this share of its characters are
# control characters: real text has almost none, random bytes have ~10-20 %.
_MAX_CONTROL_SHARE = 0.05
# Control characters other than tab/newline/carriage return/form feed/vertical
# tab, including DEL and the C1 range that latin-1 maps bytes 0x80-0x9F to.
_CONTROL_RE = re.compile(r"[\x00-\x08\x0e-\x1f\x7f-\x9f]")
# Whitespace (other than newlines) ending a line. The look-behind makes a match
# start only at the beginning of a run, which keeps the search linear.
_TRAILING_SPACE_RE = re.compile(r"(?<![^\S\n])[^\S\n]++(?=\n|\Z)")

# PDF safety limits: a hostile PDF must neither run forever nor fill memory.
_PDF_MAX_PAGES = 2000
# The most one stream (page content, form, font map) may decompress to. Real
# page contents are well under 1 MB; parsing 16 MB already takes pypdf seconds.
_PDF_MAX_STREAM_BYTES = 16 * 1024 * 1024
_PDF_STREAM_LIMITS = (
    "zlib_maximum_output_length",
    "lzw_maximum_output_length",
    "run_length_maximum_output_length",
    "brotli_maximum_output_length",
    "array_based_stream_maximum_output_length",
)
# pypdf keeps every decoded stream in its object cache; the cache is emptied of
# them at least this often, so memory tracks the work of a moment, not the file.
_PDF_CACHE_DROP_S = 0.2
# A text-showing operator with more characters than this is not a real page.
_PDF_MAX_TEXT_OPERAND = 64 * 1024
_PDF_TEXT_OPERATORS = frozenset({b"Tj", b"TJ", b"'", b'"'})
# Acrobat requires %%EOF within the last 1024 bytes; without it the file was
# almost always cut off in transfer, and pypdf would silently recover a part.
_PDF_EOF_WINDOW = 1024
_PDF_HEADER_WINDOW = 1024  # readers accept junk before %PDF- in the first 1 KB

# An encrypted .docx is not a zip but an OLE compound file holding a stream
# named "EncryptedPackage"; an OLE file without it is an old binary .doc.
_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_OLE_ENCRYPTED_MARKER = "EncryptedPackage".encode("utf-16-le")
# The unpacked size of the whole archive (images included) is capped: Word XML
# packs ~20x, hence the generous factor over the upload limit.
_DOCX_UNPACKED_FACTOR = 10
_DOCX_UNPACKED_FLOOR = 32 * 1024 * 1024
# The main part may hold this much XML per character of the text limit: Word
# writes ~5-20 bytes of markup per character; more is bloat meant to slow us.
_DOCX_XML_PER_TEXT_CHAR = 20
_DOCX_SMALL_PART_BYTES = 1024 * 1024  # relationships, core properties
_DOCX_MAX_COLUMNS = 512  # Word allows 63; only used to remember merged cells
_XML_CHUNK = 256 * 1024  # must stay below _XML_MAX_TOKEN_BYTES (see _TagSpacing)
_XML_MAX_DEPTH = 1000  # Word nests a few dozen levels
# expat re-scans an unfinished tag on every chunk (quadratic before expat 2.6),
# and a tag with millions of attributes costs it hundreds of MB: no real tag
# comes near this many bytes without a '>'.
_XML_MAX_TOKEN_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class LoadedText:
    """The text extracted from one file.

    ``title`` is the document's own title when it has one (HTML ``<title>``,
    first Markdown ``# `` heading, PDF ``/Title``, docx core title), else the
    file name. ``text`` is normalised and never empty or whitespace-only.
    ``format`` is one of ``"txt"``, ``"md"``, ``"pdf"``, ``"html"``, ``"docx"``.
    """

    title: str
    text: str
    format: str


# --------------------------------------------------------------------------
# Entry points
# --------------------------------------------------------------------------


def load_file(
    path: Path, max_bytes: int = DEFAULT_MAX_BYTES, *, max_text_chars: int = DEFAULT_MAX_TEXT_CHARS
) -> LoadedText:
    """Load the file at ``path``; see :func:`load_bytes` for the contract.

    The type, the kind of file and the size (from ``stat()``) are checked
    before anything is read, so an oversized file is refused without being
    loaded. Only regular files are read: a named pipe, device, socket or folder
    is refused at once (a pipe would otherwise block forever), and the file is
    opened without blocking and checked again, in case it was swapped. A file
    that cannot be read (missing, no permission) is refused as ``UNREADABLE``.
    """
    path = Path(path)
    name = path.name
    _format_for(name)
    try:
        _check_regular(path.stat(), name, max_bytes)
        data = _read_regular(path, name, max_bytes)
    except OSError as exc:
        raise DocumentRejected(RejectReason.UNREADABLE, name, _unreadable_detail(exc)) from exc
    return load_bytes(data, name, max_bytes, max_text_chars=max_text_chars)


def _read_regular(path: Path, name: str, max_bytes: int) -> bytes:
    """At most ``max_bytes + 1`` bytes of ``path``, opened without blocking."""
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with open(descriptor, "rb") as handle:
        _check_regular(os.fstat(handle.fileno()), name, max_bytes)
        # One byte more than allowed: a file that grew since stat() is still
        # caught by the size check in load_bytes.
        return handle.read(max_bytes + 1)


def _check_regular(status: os.stat_result, name: str, max_bytes: int) -> None:
    """Refuse anything but a regular file, then a regular file over ``max_bytes``."""
    mode = status.st_mode
    if stat.S_ISDIR(mode):
        raise DocumentRejected(RejectReason.UNREADABLE, name, "it is a folder, not a file")
    if not stat.S_ISREG(mode):
        raise DocumentRejected(
            RejectReason.UNREADABLE,
            name,
            f"it is {_special_file_kind(mode)}, not a regular file; give the path of a saved file",
        )
    _check_size(status.st_size, name, max_bytes)


def _special_file_kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a special file"


def _unreadable_detail(error: OSError) -> str:
    if isinstance(error, FileNotFoundError):
        return "there is no such file"
    if isinstance(error, IsADirectoryError):
        return "it is a folder, not a file"
    if isinstance(error, PermissionError):
        return "permission to read it was denied"
    return f"it could not be read ({error.strerror or error})"


def load_bytes(
    data: bytes,
    filename: str,
    max_bytes: int = DEFAULT_MAX_BYTES,
    *,
    max_text_chars: int = DEFAULT_MAX_TEXT_CHARS,
    size: int | None = None,
) -> LoadedText:
    """Extract the text of a file given as ``data`` named ``filename``.

    The type is chosen by the lower-cased suffix of ``filename``. Returns a
    :class:`LoadedText` whose text is non-empty; raises
    :class:`DocumentRejected` (and nothing else) when the file cannot be used:
    unsupported type, empty, over ``max_bytes``, binary, corrupt, encrypted,
    without any text, with more than ``max_text_chars`` characters of text, or
    too costly to read (past the unpacking or time limits).

    ``size`` is the file's full size in bytes when the caller knows it and
    ``data`` may be only its beginning (adapters stop reading one byte past
    ``max_bytes``): a refusal then states the true size.
    """
    fmt = _format_for(filename)
    _check_size(max(len(data), size or 0), filename, max_bytes)
    if not data.strip():
        detail = "the file is empty (0 bytes)" if not data else "the file contains only blank space"
        raise DocumentRejected(RejectReason.EMPTY, filename, detail)
    budget = _Budget(filename, max_text_chars, time.monotonic() + _TIME_BUDGET_S)
    if fmt == "pdf":
        loaded = _load_pdf(data, filename, budget)
    elif fmt == "docx":
        loaded = _load_docx(data, filename, max_bytes, budget)
    elif fmt == "html":
        loaded = _load_html(data, filename, budget)
    else:
        loaded = _load_plain(data, filename, fmt, budget)
    _check_text_size(len(loaded.text), filename, max_text_chars)
    logger.debug("loaded %s as %s: %d chars", filename, fmt, len(loaded.text))
    return loaded


# --------------------------------------------------------------------------
# Shared checks and helpers
# --------------------------------------------------------------------------


@dataclass(slots=True)
class _Budget:
    """What one extraction may still spend: characters of text and time."""

    filename: str
    max_text_chars: int
    deadline: float
    chars: int = 0

    def add_text(self, count: int) -> None:
        """Count ``count`` more characters; refuses the file past the text limit."""
        self.chars += count
        _check_text_size(self.chars, self.filename, self.max_text_chars)

    def check_time(self) -> None:
        """Refuses the file once the time budget is spent."""
        if time.monotonic() > self.deadline:
            raise _too_slow(self.filename)


def _format_for(filename: str) -> str:
    """The format name for ``filename``'s suffix; refuses unsupported types."""
    suffix = PurePath(filename).suffix.lower()
    fmt = _FORMAT_BY_SUFFIX.get(suffix)
    if fmt is not None:
        return fmt
    if suffix:
        found = f"'{suffix}' files are not supported"
    else:
        found = "the file name has no extension, so its type is unknown"
    raise DocumentRejected(
        RejectReason.UNSUPPORTED_TYPE, filename, f"{found}; accepted types are {_ACCEPTED}"
    )


def _check_size(size: int, filename: str, max_bytes: int) -> None:
    """Refuse a file of ``size`` bytes when it is over ``max_bytes``."""
    if size > max_bytes:
        raise DocumentRejected(
            RejectReason.TOO_LARGE,
            filename,
            f"the file is {_human_size(size)}, over the limit of {_human_size(max_bytes)}",
        )


def _check_text_size(chars: int, filename: str, max_text_chars: int) -> None:
    """Refuse a file once its text passes ``max_text_chars`` characters."""
    if chars > max_text_chars:
        raise DocumentRejected(
            RejectReason.TOO_LARGE,
            filename,
            f"the file holds more than {_human_size(max_text_chars)} of text, the limit; "
            "split it into smaller files and send them one by one",
        )


def _too_slow(filename: str) -> DocumentRejected:
    return DocumentRejected(
        RejectReason.TOO_LARGE,
        filename,
        f"reading it took longer than {_TIME_BUDGET_S:.0f} seconds, so it is too large or too "
        "complex; split it into smaller files or save it again in a simpler form",
    )


def _human_size(n: int) -> str:
    """``n`` bytes as MB (one decimal), or KB/bytes when smaller than that."""
    if n >= 1024 * 1024:
        return f"{n / (1024 * 1024):.1f} MB".replace(".0 MB", " MB")
    if n >= 1024:
        return f"{n / 1024:.1f} KB".replace(".0 KB", " KB")
    return f"{n} bytes"


def _default_title(filename: str) -> str:
    """The file name without any directory part, used when a file has no title."""
    return PurePath(filename).name or filename


def _clean_title(raw: object) -> str:
    """A metadata title as one trimmed line; empty when there is none."""
    if not isinstance(raw, str):
        return ""
    return " ".join(_CONTROL_RE.sub(" ", raw[:10_000]).split())


def _normalise_text(text: str) -> str:
    """Normalise extracted text for every format.

    Newlines become ``'\\n'`` (form feeds and Unicode separators too), stray
    control characters are dropped, trailing whitespace is trimmed from every
    line, runs of blank lines shrink to one, and leading/trailing blank lines
    are removed. Leading indentation is kept (Markdown code, pre blocks).
    """
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = text.translate({0x0B: "\n", 0x0C: "\n", 0x85: "\n", 0x2028: "\n", 0x2029: "\n\n"})
    text = _CONTROL_RE.sub("", text).replace("\ufeff", "")
    # Regular expressions, not a list of lines: a file of millions of short
    # lines would otherwise cost hundreds of MB in line objects.
    text = _TRAILING_SPACE_RE.sub("", text)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip("\n")


def _require_text(text: str, filename: str, detail: str) -> str:
    """Return ``text`` normalised; refuse with NO_TEXT and ``detail`` when blank."""
    text = _normalise_text(text)
    if not text.strip():
        raise DocumentRejected(RejectReason.NO_TEXT, filename, detail)
    return text


# --------------------------------------------------------------------------
# Plain text and Markdown
# --------------------------------------------------------------------------


def _load_plain(data: bytes, filename: str, fmt: str, budget: _Budget) -> LoadedText:
    """Load a .txt or .md file; Markdown is kept as written (it reads as text)."""
    text = _decode_text(data, filename)
    # Checked before normalising, which costs memory in proportion to the text.
    budget.add_text(len(text))
    text = _normalise_text(text)
    if not text.strip():
        raise DocumentRejected(RejectReason.EMPTY, filename, "the file contains only blank space")
    title = (_markdown_title(text) if fmt == "md" else "") or _default_title(filename)
    return LoadedText(title=title, text=text, format=fmt)


_MD_FENCE_RE = re.compile(r"^ {0,3}(```|~~~)")
_MD_H1_RE = re.compile(r"^ {0,3}#[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")


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
            return _clean_title(match.group(1))
    return ""


def _decode_text(data: bytes, filename: str, declared: str | None = None) -> str:
    """Decode bytes that should be text; refuse them as BINARY when they are not.

    Order: a UTF-8 BOM, a UTF-16 BOM, then (only when there are no NUL bytes)
    strict UTF-8, the ``declared`` charset if any, and cp1252 / latin-1 — the
    last two only when the result has few control characters, because they
    decode any byte sequence.
    """
    if data.startswith(codecs.BOM_UTF8):
        text = _try_decode(data[len(codecs.BOM_UTF8) :], "utf-8")
    elif data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        text = _try_decode(data, "utf-16")
    elif b"\x00" in data:
        # NUL never occurs in 8-bit text; UTF-16 without a BOM is not supported.
        text = None
    else:
        text = _try_decode(data, "utf-8")
        if text is None and declared:
            text = _try_decode(data, declared)
        if text is None:
            text = _try_decode(data, "cp1252") or data.decode("latin-1")
    if text is None or _looks_binary(text):
        raise DocumentRejected(
            RejectReason.BINARY,
            filename,
            "the file does not contain readable text (it looks like binary data); "
            f"{PurePath(filename).suffix.lower()} files must be plain text",
        )
    return text


def _try_decode(data: bytes, encoding: str) -> str | None:
    """``data`` decoded strictly with ``encoding``, or None when it does not fit."""
    try:
        return data.decode(encoding)
    except (UnicodeDecodeError, LookupError):
        return None


def _looks_binary(text: str) -> bool:
    """True when ``text`` contains NUL or a high share of control characters."""
    if "\x00" in text:
        return True
    # subn counts without building a list of millions of one-character matches.
    controls = _CONTROL_RE.subn("", text)[1]
    return controls > _MAX_CONTROL_SHARE * max(len(text), 1)


# --------------------------------------------------------------------------
# HTML
# --------------------------------------------------------------------------

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
_CSS_MAX_SELECTORS = 10_000


def _load_html(data: bytes, filename: str, budget: _Budget) -> LoadedText:
    """Load an HTML page: visible text only, title from ``<title>``."""
    match = _HTML_CHARSET_RE.search(data[:4096])
    declared = match.group(1).decode("ascii", "replace") if match else None
    source = _decode_text(data, filename, declared)
    if not source.strip():
        raise DocumentRejected(RejectReason.EMPTY, filename, "the file contains only blank space")
    collector = _HTMLText(budget)
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
    text = _require_text(
        collector.text(),
        filename,
        "the page has no visible text (only scripts, styles, hidden parts or markup); "
        "send a page with readable content or paste the text as a .txt file",
    )
    title = _clean_title(collector.title) or _default_title(filename)
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

    def __init__(self, budget: _Budget) -> None:
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
        self._rules = _CssRules()
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
        seen earlier in the page (see :class:`_CssRules`). An inline style that
        sets ``display`` or ``visibility`` to anything else wins over the rules.
        """
        if not attrib:  # most elements: skip the (slow) mapping lookups below
            return self._rules.hides(tag, "", "")
        if "hidden" in attrib or attrib.get("aria-hidden", "").strip().lower() == "true":
            return True
        inline = _css_hides(attrib.get("style", ""))
        if inline is not None:
            return inline
        return self._rules.hides(tag, attrib.get("id", ""), attrib.get("class", ""))


def _css_hides(declarations: str) -> bool | None:
    """True when CSS ``declarations`` hide the element, False when they set
    ``display`` / ``visibility`` to something that shows it, None when silent."""
    display = visibility = None
    for declaration in declarations.split(";"):
        name, colon, value = declaration.partition(":")
        if not colon:
            continue
        name = name.strip().lower()
        value = value.lower().replace("!important", "").strip()
        if name == "display":
            display = value
        elif name == "visibility":
            visibility = value
    if display == "none" or visibility in ("hidden", "collapse"):
        return True
    if display is None and visibility is None:
        return None
    return False


_CSS_COMPOUND_RE = re.compile(r"([a-zA-Z][a-zA-Z0-9-]*)?((?:[.#][\w-]+)*)")
_CSS_PART_RE = re.compile(r"([.#])([\w-]+)")
_CSS_COMBINATOR_RE = re.compile(r"\s*[\s>+~]\s*")
_CSS_PSEUDO_RE = re.compile(r"::?[\w-]+(?:\([^)]*\))?|\[[^\]]*\]")


@dataclass(frozen=True, slots=True)
class _Selector:
    """A compound selector: optional tag, optional id, classes (``div#menu.a.b``)."""

    tag: str
    id: str
    classes: frozenset[str]

    @property
    def key(self) -> str:
        """The most selective part, under which the selector is indexed."""
        if self.id:
            return "#" + self.id
        if self.classes:
            return "." + min(self.classes)
        return self.tag

    def matches(self, tag: str, id_: str, classes: frozenset[str]) -> bool:
        return (
            (not self.tag or self.tag == tag)
            and (not self.id or self.id == id_)
            and self.classes <= classes
        )


def _compound_selector(text: str) -> _Selector | None:
    """``text`` as a :class:`_Selector`; None unless it is a plain compound selector."""
    match = _CSS_COMPOUND_RE.fullmatch(text.strip())
    if match is None or not match.group(0):
        return None
    parts = _CSS_PART_RE.findall(match.group(2) or "")
    ids = [name for kind, name in parts if kind == "#"]
    if len(ids) > 1:
        return None
    classes = frozenset(name for kind, name in parts if kind == ".")
    return _Selector((match.group(1) or "").lower(), ids[0] if ids else "", classes)


@dataclass(slots=True)
class _CssBlock:
    """An open ``{`` of a stylesheet: what precedes it, and whether blocks nest inside."""

    prelude: str
    nested: bool = False


class _CssRules:
    """The rules of a page's ``<style>`` elements that decide whether an element shows.

    Deliberately cautious, since hiding text that a reader sees would lose it:
    an element is hidden only when a plain compound selector (``.ad``,
    ``#banner``, ``div.note``), outside any ``@media``-like block, sets
    ``display: none`` or ``visibility: hidden``, and no rule anywhere (in any
    block, any selector whose last part could match it) shows it. Rules with
    combinators or pseudo-classes never hide. Only styles that come before an
    element in the page apply to it.
    """

    def __init__(self) -> None:
        self._hide: dict[str, list[_Selector]] = {}
        self._show: dict[str, list[_Selector]] = {}
        self._count = 0

    def hides(self, tag: str, id_: str, class_attr: str) -> bool:
        if not self._hide:
            return False
        classes = frozenset(class_attr.split())
        keys = [tag, *(("#" + id_,) if id_ else ()), *("." + name for name in classes)]
        if not any(s.matches(tag, id_, classes) for k in keys for s in self._hide.get(k, ())):
            return False
        return not any(s.matches(tag, id_, classes) for k in keys for s in self._show.get(k, ()))

    def add_sheet(self, css: str) -> None:
        """Reads the rules of one stylesheet's text."""
        css = _strip_css_comments(css)
        open_blocks: list[_CssBlock] = []
        start = 0
        for brace in re.finditer(r"[{}]", css):
            position = brace.start()
            if css[position] == "{":
                if open_blocks:
                    open_blocks[-1].nested = True
                open_blocks.append(_CssBlock(css[start:position].strip()))
            elif open_blocks:
                block = open_blocks.pop()
                if not block.nested and not block.prelude.startswith("@"):
                    conditional = any(outer.prelude.startswith("@") for outer in open_blocks)
                    self._add_rule(block.prelude, css[start:position], conditional)
            start = position + 1

    def _add_rule(self, prelude: str, declarations: str, conditional: bool) -> None:
        hides = _css_hides(declarations)
        if hides is None:
            return
        for text in prelude.split(","):
            if self._count >= _CSS_MAX_SELECTORS:
                return
            if hides and not conditional:
                # A print-only or narrow-screen rule does not hide what a reader sees.
                selector = _compound_selector(text)
                target = self._hide
            elif not hides:
                # The subject (last part), pseudo-classes dropped: it may show the element.
                subject = _CSS_COMBINATOR_RE.split(text.strip())[-1]
                selector = _compound_selector(_CSS_PSEUDO_RE.sub("", subject))
                target = self._show
            else:
                continue
            if selector is not None:
                target.setdefault(selector.key, []).append(selector)
                self._count += 1


def _strip_css_comments(css: str) -> str:
    """``css`` without ``/* ... */`` comments (an unclosed one runs to the end)."""
    pieces: list[str] = []
    position = 0
    while (opening := css.find("/*", position)) >= 0:
        pieces.append(css[position:opening])
        closing = css.find("*/", opening + 2)
        if closing < 0:
            return "".join(pieces)
        position = closing + 2
    pieces.append(css[position:])
    return "".join(pieces)


# --------------------------------------------------------------------------
# PDF
# --------------------------------------------------------------------------


def _load_pdf(data: bytes, filename: str, budget: _Budget) -> LoadedText:
    """Load a PDF's text layer with pypdf, pages joined by blank lines."""
    _check_pdf_envelope(data, filename)
    with _pdf_limits():
        reader = _open_pdf(data, filename)
        pages = _extract_pdf_pages(reader, filename, budget)
        title = _pdf_title(reader)
    text = _require_text(
        "\n\n".join(pages),
        filename,
        "the PDF has no text layer; it looks like a scanned document made of images. "
        "Run it through OCR (text recognition) first and send the result",
    )
    return LoadedText(title=title or _default_title(filename), text=text, format="pdf")


def _pdf_limits() -> contextlib.AbstractContextManager[object]:
    """pypdf's decompression limits lowered to :data:`_PDF_MAX_STREAM_BYTES` per
    stream, for the current thread (pypdf keeps them in a context variable)."""
    known = {f.name for f in dataclasses.fields(PdfConfiguration)}
    limits: dict[str, Any] = {name: _PDF_MAX_STREAM_BYTES for name in _PDF_STREAM_LIMITS if name in known}
    return apply_pdf_configuration(None, **limits)


def _check_pdf_envelope(data: bytes, filename: str) -> None:
    """Refuse as CORRUPT a .pdf without a PDF header, or cut off before its end."""
    if b"%PDF-" not in data[:_PDF_HEADER_WINDOW]:
        raise DocumentRejected(
            RejectReason.CORRUPT,
            filename,
            "the file is not a PDF (it has no PDF header); it may be another kind of "
            "file renamed to .pdf — send the original PDF",
        )
    if b"%%EOF" not in data[-_PDF_EOF_WINDOW:]:
        raise DocumentRejected(
            RejectReason.CORRUPT,
            filename,
            "the PDF is incomplete (its end is missing, as after an interrupted "
            "download); send the complete file",
        )


def _open_pdf(data: bytes, filename: str) -> PdfReader:
    """Open ``data`` with pypdf; refuse CORRUPT or ENCRYPTED files.

    An encrypted PDF that opens with the empty password (owner password only,
    as many "protected" PDFs are) is accepted.
    """
    try:
        reader = PdfReader(io.BytesIO(data), strict=False)
        encrypted = reader.is_encrypted
    except LimitReachedError as exc:
        raise _pdf_too_complex(filename, "") from exc
    except Exception as exc:  # pypdf raises many kinds on hostile input
        logger.info("pypdf could not open %s: %r", filename, exc)
        raise DocumentRejected(
            RejectReason.CORRUPT, filename, "the PDF is damaged and could not be read; "
            "try re-saving or re-exporting it as PDF"
        ) from exc
    if encrypted and not _pdf_opens_without_password(reader, filename):
        raise _pdf_encrypted(filename)
    return reader


def _pdf_encrypted(filename: str) -> DocumentRejected:
    return DocumentRejected(
        RejectReason.ENCRYPTED,
        filename,
        "the PDF is password-protected (encrypted); remove the password (or print it "
        "to a new PDF) and send it again",
    )


def _pdf_too_complex(filename: str, where: str) -> DocumentRejected:
    return DocumentRejected(
        RejectReason.TOO_LARGE,
        filename,
        f"{where or 'the PDF'} is too large or too complex to read safely; "
        "split the PDF, or export it again as a simpler PDF",
    )


def _pdf_opens_without_password(reader: PdfReader, filename: str) -> bool:
    """True when an encrypted PDF can be decrypted with the empty password."""
    try:
        return reader.decrypt("") != PasswordType.NOT_DECRYPTED
    except Exception as exc:  # unsupported algorithm, missing crypto library...
        logger.info("cannot decrypt %s with empty password: %r", filename, exc)
        return False


class _PdfStop(BaseException):
    """Carries a refusal out of pypdf's callbacks. A BaseException, because pypdf
    catches ``Exception`` around each form XObject, logs it and carries on."""

    def __init__(self, rejection: DocumentRejected) -> None:
        super().__init__(str(rejection))
        self.rejection = rejection


class _PdfGuard:
    """The callbacks given to pypdf's ``extract_text``, which keep a page within bounds.

    Before each operation: the time budget, the size of text operands, and
    (every :data:`_PDF_CACHE_DROP_S`) the decoded streams dropped from pypdf's
    cache. For each piece of text: the text budget. A form XObject invoked by a
    page runs through the same callbacks.
    """

    def __init__(self, reader: PdfReader, budget: _Budget) -> None:
        self.page_no = 0
        self._reader = reader
        self._budget = budget
        self._dropped_at = time.monotonic()

    def before_operation(self, operator: bytes, operands: object, *_: object) -> None:
        if operator in _PDF_TEXT_OPERATORS and _pdf_operand_chars(operands) > _PDF_MAX_TEXT_OPERAND:
            raise _PdfStop(_pdf_too_complex(self._budget.filename, f"page {self.page_no} of the PDF"))
        now = time.monotonic()
        if now > self._budget.deadline:
            raise _PdfStop(_too_slow(self._budget.filename))
        if now - self._dropped_at > _PDF_CACHE_DROP_S:
            self.drop_decoded()

    def on_text(self, text: str, *_: object) -> None:
        try:
            self._budget.add_text(len(text))
        except DocumentRejected as exc:
            raise _PdfStop(exc) from None

    def drop_decoded(self) -> None:
        """Forgets every decoded stream pypdf cached; they are decoded again if needed.

        Only the decoded copy goes; the objects stay, so pypdf's identity-based
        cycle checks are unaffected.
        """
        cache = getattr(self._reader, "resolved_objects", None)
        if isinstance(cache, dict):
            for obj in list(cache.values()):
                if isinstance(obj, EncodedStreamObject) and getattr(obj, "decoded_self", None) is not None:
                    obj.decoded_self = None
        self._dropped_at = time.monotonic()


def _pdf_operand_chars(operands: object) -> int:
    """Characters in the string operands of a text-showing operator (TJ: its array)."""
    if not isinstance(operands, list):
        return 0
    total = 0
    for operand in operands:
        items = operand if isinstance(operand, list) else (operand,)
        total += sum(len(item) for item in items if isinstance(item, (str, bytes)))
    return total


def _extract_pdf_pages(reader: PdfReader, filename: str, budget: _Budget) -> list[str]:
    """The text of each page, within the page, text and time limits (refused past them)."""
    guard = _PdfGuard(reader, budget)
    texts: list[str] = []
    total = 0
    try:
        page_count = len(reader.pages)
        if page_count > _PDF_MAX_PAGES:
            raise DocumentRejected(
                RejectReason.TOO_LARGE,
                filename,
                f"the PDF has {page_count:,} pages, over the limit of {_PDF_MAX_PAGES:,}; "
                "split it into smaller files",
            )
        for guard.page_no, page in enumerate(reader.pages, start=1):
            budget.check_time()
            text = page.extract_text(
                visitor_operand_before=guard.before_operation, visitor_text=guard.on_text
            ) or ""
            guard.drop_decoded()
            texts.append(text)
            total += len(text)
            # The callbacks see the text in pieces; this is the page's true count.
            budget.chars = total
            budget.add_text(0)
    except _PdfStop as stop:
        raise stop.rejection from None
    except DocumentRejected:
        raise
    except DependencyError as exc:
        # Encryption pypdf cannot undo without an optional crypto library (AES).
        logger.info("cannot decrypt %s: %r", filename, exc)
        raise _pdf_encrypted(filename) from exc
    except LimitReachedError as exc:
        logger.info("%s: pypdf limit reached on page %d: %s", filename, guard.page_no, exc)
        where = f"page {guard.page_no} of the PDF" if guard.page_no else ""
        raise _pdf_too_complex(filename, where) from exc
    except Exception as exc:  # anything raised mid-extraction means a damaged file
        logger.info("pypdf failed on %s page %d: %r", filename, guard.page_no, exc)
        where = f" (page {guard.page_no})" if guard.page_no else ""
        raise DocumentRejected(
            RejectReason.CORRUPT,
            filename,
            f"the PDF is damaged and its text could not be read{where}; "
            "try re-saving or re-exporting it as PDF",
        ) from exc
    return texts


def _pdf_title(reader: PdfReader) -> str:
    """The PDF's /Title metadata, or empty (broken metadata is not an error)."""
    try:
        metadata = reader.metadata
        return _clean_title(metadata.title) if metadata is not None else ""
    except Exception:  # the title is optional; a damaged Info dict must not refuse the file
        return ""


# --------------------------------------------------------------------------
# Word (.docx)
# --------------------------------------------------------------------------

_W_NAMESPACES = frozenset(
    {
        "http://schemas.openxmlformats.org/wordprocessingml/2006/main",
        "http://purl.oclc.org/ooxml/wordprocessingml/main",  # "Strict Open XML"
    }
)
_MC_NAMESPACE = "http://schemas.openxmlformats.org/markup-compatibility/2006"
_RELATIONSHIPS_NAMESPACE = "http://schemas.openxmlformats.org/package/2006/relationships"
_DC_NAMESPACE = "http://purl.org/dc/elements/1.1/"
_DOCX_DEFAULT_MAIN_PART = "word/document.xml"
# Deleted and moved-away text (tracked changes) is not in the document as read.
_DOCX_SKIPPED = frozenset({"del", "moveFrom"})


def _load_docx(data: bytes, filename: str, max_bytes: int, budget: _Budget) -> LoadedText:
    """Load a .docx: paragraphs and table rows in document order.

    The main part is streamed through expat, never held as a tree; every part
    read is capped (declared and actual unpacked size) and the text and time
    budgets are checked as it goes.
    """
    _check_docx_envelope(data, filename)
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            _check_unpacked_size(archive, filename, max_bytes)
            main_part, core_part = _docx_part_names(archive, filename, budget)
            part_limit = max(_DOCX_XML_PER_TEXT_CHAR * budget.max_text_chars, _DOCX_UNPACKED_FLOOR)
            collector = _DocxText(budget)
            _parse_part(archive, main_part, filename, part_limit, budget, collector.handlers())
            collector.finish()
            title = _docx_title(archive, core_part, filename, budget)
    except DocumentRejected:
        raise
    except Exception as exc:  # BadZipFile, zlib.error, ExpatError, KeyError, NotImplementedError...
        logger.info("%s is not a readable Word document: %r", filename, exc)
        raise _docx_corrupt(filename) from exc
    text = _require_text("\n\n".join(collector.blocks), filename, "the Word document contains no text")
    return LoadedText(title=title or _default_title(filename), text=text, format="docx")


def _docx_corrupt(filename: str) -> DocumentRejected:
    return DocumentRejected(
        RejectReason.CORRUPT,
        filename,
        "the file is not a valid Word document (.docx) or is damaged; "
        "open it in Word and save it again as .docx",
    )


def _docx_too_complex(filename: str) -> DocumentRejected:
    return DocumentRejected(
        RejectReason.TOO_LARGE,
        filename,
        "the Word document has parts too large or too deeply nested to read safely; "
        "open it in Word and save it again as .docx",
    )


def _docx_unpacks_too_far(filename: str, limit: int, declared: int | None = None) -> DocumentRejected:
    size = _human_size(declared) if declared is not None else f"more than {_human_size(limit)}"
    return DocumentRejected(
        RejectReason.TOO_LARGE,
        filename,
        f"the Word document unpacks to {size}, over the limit of {_human_size(limit)}",
    )


def _check_docx_envelope(data: bytes, filename: str) -> None:
    """Refuse encrypted and old-format (OLE) .docx files, which are not zips."""
    if data.startswith(_OLE_MAGIC):
        if _OLE_ENCRYPTED_MARKER in data:
            raise DocumentRejected(
                RejectReason.ENCRYPTED,
                filename,
                "the Word document is password-protected; remove the password in Word "
                "(File > Info > Protect Document) and send it again",
            )
        raise DocumentRejected(
            RejectReason.UNSUPPORTED_TYPE,
            filename,
            "this is an old-format Word document (.doc) renamed to .docx; open it in "
            f"Word and save it as .docx. Accepted types are {_ACCEPTED}",
        )


def _check_unpacked_size(archive: zipfile.ZipFile, filename: str, max_bytes: int) -> None:
    """Refuse an archive whose members declare more than the unpacked limit in all.

    A first, cheap check; what is actually read is counted again (see
    :func:`_zip_chunks`), since a header can lie.
    """
    unpacked = sum(info.file_size for info in archive.infolist())
    limit = max(_DOCX_UNPACKED_FACTOR * max_bytes, _DOCX_UNPACKED_FLOOR)
    if unpacked > limit:
        raise _docx_unpacks_too_far(filename, limit, unpacked)


def _zip_chunks(archive: zipfile.ZipFile, name: str, filename: str, limit: int) -> Iterator[bytes]:
    """The unpacked bytes of member ``name``, in chunks, refused past ``limit`` bytes.

    The declared size is checked first, then the bytes actually produced are
    counted while reading. Only stored and deflated members are read: Word
    writes nothing else, and bzip2/lzma chunks could unpack without bound.
    """
    info = archive.getinfo(name)  # KeyError: the part is missing, so the file is corrupt
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise _docx_corrupt(filename)
    if info.file_size > limit:
        raise _docx_unpacks_too_far(filename, limit, info.file_size)
    produced = 0
    with archive.open(info) as member:
        while chunk := member.read(_XML_CHUNK):
            produced += len(chunk)
            if produced > limit:
                raise _docx_unpacks_too_far(filename, limit)
            yield chunk


@dataclass(frozen=True, slots=True)
class _XmlHandlers:
    """expat callbacks (element names are ``"namespace local"``)."""

    start: Callable[[str, dict[str, str]], None]
    end: Callable[[str], None] | None = None
    data: Callable[[str], None] | None = None


def _parse_part(
    archive: zipfile.ZipFile, name: str, filename: str, limit: int, budget: _Budget, handlers: _XmlHandlers
) -> None:
    """Stream the XML of member ``name`` through expat into ``handlers``.

    No tree is built. A DTD is refused (Word never writes one, and entities are
    the classic XML bomb), as are nesting past :data:`_XML_MAX_DEPTH` and any
    run of :data:`_XML_MAX_TOKEN_BYTES` bytes without a ``>``.
    """
    parser = pyexpat.ParserCreate(namespace_separator=" ")
    parser.buffer_text = True

    def refuse_dtd(*_: object) -> None:
        raise _docx_corrupt(filename)

    depth = 0

    def start(element: str, attributes: dict[str, str]) -> None:
        nonlocal depth
        depth += 1
        if depth > _XML_MAX_DEPTH:
            raise _docx_too_complex(filename)
        handlers.start(element, attributes)

    def end(element: str) -> None:
        nonlocal depth
        depth -= 1
        if handlers.end is not None:
            handlers.end(element)

    parser.StartDoctypeDeclHandler = refuse_dtd
    parser.EntityDeclHandler = refuse_dtd
    parser.StartElementHandler = start
    parser.EndElementHandler = end
    if handlers.data is not None:
        parser.CharacterDataHandler = handlers.data
    tags = _TagSpacing(filename)
    for chunk in _zip_chunks(archive, name, filename, limit):
        tags.check(chunk)
        parser.Parse(chunk, False)
        budget.check_time()
    parser.Parse(b"", True)


class _TagSpacing:
    """Refuses XML with a run of more than :data:`_XML_MAX_TOKEN_BYTES` bytes
    without a ``>``, counted across the chunks fed to the parser."""

    def __init__(self, filename: str) -> None:
        self._filename = filename
        self._since_last = 0  # bytes since the last '>' of the previous chunks

    def check(self, chunk: bytes) -> None:
        # A run inside one chunk is shorter than the chunk, hence than the cap.
        first = chunk.find(b">")
        if first < 0:
            self._since_last += len(chunk)
        else:
            if self._since_last + first > _XML_MAX_TOKEN_BYTES:
                raise _docx_too_complex(self._filename)
            self._since_last = len(chunk) - chunk.rfind(b">") - 1
        if self._since_last > _XML_MAX_TOKEN_BYTES:
            raise _docx_too_complex(self._filename)


def _docx_part_names(archive: zipfile.ZipFile, filename: str, budget: _Budget) -> tuple[str, str | None]:
    """The names of the main document part and the core properties part.

    Read from the package relationships (``_rels/.rels``), as Word does; a
    package without them is tried at the usual ``word/document.xml``.
    """
    found: dict[str, str] = {}

    def relationship(element: str, attributes: dict[str, str]) -> None:
        if element != f"{_RELATIONSHIPS_NAMESPACE} Relationship" or attributes.get("TargetMode") == "External":
            return
        kind = attributes.get("Type", "").rsplit("/", 1)[-1]
        if kind in ("officeDocument", "core-properties") and kind not in found:
            found[kind] = _part_name(attributes.get("Target", ""))

    if _has_member(archive, "_rels/.rels"):
        _parse_part(archive, "_rels/.rels", filename, _DOCX_SMALL_PART_BYTES, budget, _XmlHandlers(relationship))
    return found.get("officeDocument") or _DOCX_DEFAULT_MAIN_PART, found.get("core-properties")


def _has_member(archive: zipfile.ZipFile, name: str) -> bool:
    try:
        archive.getinfo(name)
    except KeyError:
        return False
    return True


def _part_name(target: str) -> str:
    """A relationship target of the package root as a zip member name."""
    parts: list[str] = []
    for piece in target.replace("\\", "/").split("/"):
        if piece == "..":
            if parts:
                parts.pop()
        elif piece and piece != ".":
            parts.append(piece)
    return "/".join(parts)


def _docx_title(archive: zipfile.ZipFile, core_part: str | None, filename: str, budget: _Budget) -> str:
    """The core properties' ``dc:title``; empty when there is none or it cannot be read."""
    if not core_part or not _has_member(archive, core_part):
        return ""
    pieces: list[str] = []
    inside = 0

    def start(element: str, _: dict[str, str]) -> None:
        nonlocal inside
        inside += element == f"{_DC_NAMESPACE} title"

    def end(element: str) -> None:
        nonlocal inside
        inside -= element == f"{_DC_NAMESPACE} title"

    def data(text: str) -> None:
        if inside:
            pieces.append(text)

    try:
        _parse_part(archive, core_part, filename, _DOCX_SMALL_PART_BYTES, budget, _XmlHandlers(start, end, data))
    except Exception as exc:  # the title is optional; damaged metadata must not refuse the file
        logger.info("%s: core properties unreadable: %r", filename, exc)
        return ""
    return _clean_title("".join(pieces))


@dataclass(slots=True)
class _DocxCell:
    blocks: list[str] = field(default_factory=list)
    span: int = 1
    continues: bool = False  # a vertically merged cell below the first: shows the cell above


@dataclass(slots=True)
class _DocxRow:
    cells: list[str] = field(default_factory=list)
    column: int = 0  # layout-grid column of the next cell
    by_column: dict[int, str] = field(default_factory=dict)


@dataclass(slots=True)
class _DocxTable:
    rows: list[str] = field(default_factory=list)
    above: dict[int, str] = field(default_factory=dict)  # the previous row's text per grid column


class _DocxText:
    """Turns the main part's expat events into blocks of text, in document order.

    A block is a non-blank paragraph, or a table as one line per row with
    cells joined by `` | ``; paragraphs and tables inside a cell become that
    cell's text, whitespace collapsed. A cell spanning columns counts once; a
    vertically merged cell repeats the text of the cell it continues (as
    python-docx reads tables). Text comes from ``w:t`` (runs anywhere in a
    paragraph: hyperlinks, insertions, fields, content controls, text boxes),
    plus tabs, line breaks and non-breaking hyphens. Deleted text and the
    fallback copy of alternate content are left out. Only buffers are kept:
    the text and time budgets bound them.
    """

    def __init__(self, budget: _Budget) -> None:
        self.blocks: list[str] = []
        self._budget = budget
        self._paragraphs: list[list[str]] = []
        self._tables: list[_DocxTable] = []
        self._rows: list[_DocxRow] = []
        self._cells: list[_DocxCell] = []
        self._root_seen = False
        self._skip = 0
        self._in_text = 0
        self._in_run = 0
        self._in_tabs = 0

    def handlers(self) -> _XmlHandlers:
        return _XmlHandlers(self.start, self.end, self.data)

    def finish(self) -> None:
        """Refuses a part that had no ``w:document`` root at all."""
        if not self._root_seen:
            raise _docx_corrupt(self._budget.filename)

    def start(self, element: str, attributes: dict[str, str]) -> None:
        namespace, _, local = element.rpartition(" ")
        if not self._root_seen:
            self._root_seen = True
            if namespace not in _W_NAMESPACES or local != "document":
                raise _docx_corrupt(self._budget.filename)  # e.g. a spreadsheet renamed .docx
        if namespace == _MC_NAMESPACE:
            self._skip += local == "Fallback"
        elif namespace in _W_NAMESPACES:
            self._start_w(local, attributes, namespace)

    def _start_w(self, local: str, attributes: dict[str, str], namespace: str) -> None:
        if local in _DOCX_SKIPPED:
            self._skip += 1
        elif local == "p":
            self._paragraphs.append([])
        elif local == "t":
            self._in_text += 1
        elif local == "r":
            self._in_run += 1
        elif local == "tabs":
            self._in_tabs += 1
        elif local in ("tab", "ptab") and self._in_run and not self._in_tabs:
            self._add("\t")
        elif local == "br" and self._in_run:
            if attributes.get(f"{namespace} type", "textWrapping") == "textWrapping":
                self._add("\n")  # page and column breaks are layout, not text
        elif local == "cr" and self._in_run:
            self._add("\n")
        elif local == "noBreakHyphen" and self._in_run:
            self._add("-")
        elif local == "tbl":
            self._tables.append(_DocxTable())
        elif local == "tr":
            self._rows.append(_DocxRow())
        elif local == "tc":
            self._cells.append(_DocxCell())
        elif local == "gridSpan" and self._cells:
            self._cells[-1].span = _grid_count(attributes.get(f"{namespace} val"), 1)
        elif local == "vMerge" and self._cells:
            self._cells[-1].continues = attributes.get(f"{namespace} val", "continue") == "continue"
        elif local == "gridBefore" and self._rows:
            self._rows[-1].column += _grid_count(attributes.get(f"{namespace} val"), 0)

    def end(self, element: str) -> None:
        namespace, _, local = element.rpartition(" ")
        if namespace == _MC_NAMESPACE:
            self._skip -= local == "Fallback"
        elif namespace not in _W_NAMESPACES:
            return
        elif local in _DOCX_SKIPPED:
            self._skip -= 1
        elif local == "t":
            self._in_text -= 1
        elif local == "r":
            self._in_run -= 1
        elif local == "tabs":
            self._in_tabs -= 1
        elif local == "p":
            self._block("".join(self._paragraphs.pop()))
        elif local == "tc":
            self._end_cell()
        elif local == "tr":
            self._end_row()
        elif local == "tbl":
            self._block("\n".join(self._tables.pop().rows))

    def data(self, text: str) -> None:
        if self._in_text:
            self._add(text)

    def _add(self, text: str) -> None:
        if self._skip or not self._paragraphs:
            return
        self._budget.add_text(len(text))
        buffer = self._paragraphs[-1]
        buffer.append(text)
        if len(buffer) > 1024:  # a paragraph of a million runs: keep one string, not a million
            buffer[:] = ["".join(buffer)]

    def _block(self, text: str) -> None:
        if not text.strip():
            return
        if self._cells:
            self._cells[-1].blocks.append(text)
        else:
            self.blocks.append(text)

    def _end_cell(self) -> None:
        cell = self._cells.pop()
        text = " ".join(" ".join(cell.blocks).split())
        if not self._rows:  # a cell outside any row: damaged, but its text still counts
            self._block(text)
            return
        row = self._rows[-1]
        if cell.continues and self._tables:
            text = self._tables[-1].above.get(row.column, "")
        if row.cells:
            self._budget.add_text(3)  # the " | " between cells is text too
        row.cells.append(text)
        for column in range(row.column, min(row.column + cell.span, _DOCX_MAX_COLUMNS)):
            row.by_column[column] = text
        row.column += cell.span

    def _end_row(self) -> None:
        row = self._rows.pop()
        line = " | ".join(row.cells) if any(row.cells) else ""
        if not self._tables:
            self._block(line)
            return
        table = self._tables[-1]
        if line:
            table.rows.append(line)
        table.above = row.by_column


def _grid_count(value: str | None, default: int) -> int:
    """A ``w:val`` count of grid columns, within 0 .. :data:`_DOCX_MAX_COLUMNS`."""
    try:
        return min(max(int(value or default), 0), _DOCX_MAX_COLUMNS)
    except ValueError:
        return default
