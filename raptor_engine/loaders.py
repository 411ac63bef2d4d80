"""Turn an uploaded file into plain text, or refuse it with a reason.

The one entry point is :func:`load_bytes` (and :func:`load_file`, which reads
a path with the same checks). Accepted types are plain text, Markdown, PDF,
HTML and Word (.docx). Anything else, and any file that is empty, too large,
binary, corrupt, encrypted or without text, is refused with
:class:`~raptor_engine.errors.DocumentRejected`, whose ``detail`` is written
for the person who sent the file. No exception of pypdf, python-docx, zipfile
or html.parser escapes this module.

Extracted text is normalised the same way for every format: ``'\\n'``
newlines, no trailing spaces on a line, paragraphs separated by one blank
line, no stray control characters.
"""

from __future__ import annotations

import codecs
import io
import logging
import re
import time
import zipfile
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path, PurePath

import docx
from docx.document import Document as DocxDocument
from docx.table import Table, _Cell
from pypdf import PasswordType, PdfReader
from pypdf.errors import DependencyError

from raptor_engine.errors import DocumentRejected, RejectReason

__all__ = ["DEFAULT_MAX_BYTES", "SUPPORTED_SUFFIXES", "LoadedText", "load_bytes", "load_file"]

logger = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = 20 * 1024 * 1024
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

# Text is refused as binary when more than this share of its characters are
# control characters: real text has almost none, random bytes have ~10-20 %.
_MAX_CONTROL_SHARE = 0.05
# Control characters other than tab/newline/carriage return/form feed/vertical
# tab, including DEL and the C1 range that latin-1 maps bytes 0x80-0x9F to.
_CONTROL_RE = re.compile(r"[\x00-\x08\x0e-\x1f\x7f-\x9f]")

# PDF safety limits: a hostile PDF must neither run forever nor fill memory.
_PDF_MAX_PAGES = 2000
_PDF_TEXT_FACTOR = 4  # stop once extracted text exceeds this many x max_bytes chars
_PDF_TIME_BUDGET_S = 120.0  # checked between pages; one page cannot be interrupted
# Acrobat requires %%EOF within the last 1024 bytes; without it the file was
# almost always cut off in transfer, and pypdf would silently recover a part.
_PDF_EOF_WINDOW = 1024
_PDF_HEADER_WINDOW = 1024  # readers accept junk before %PDF- in the first 1 KB

# An encrypted .docx is not a zip but an OLE compound file holding a stream
# named "EncryptedPackage"; an OLE file without it is an old binary .doc.
_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_OLE_ENCRYPTED_MARKER = "EncryptedPackage".encode("utf-16-le")
# python-docx loads every part of the archive into memory, so the unpacked
# size is capped (zip bombs). Word XML packs ~20x, hence the generous factor.
_DOCX_UNPACKED_FACTOR = 10
_DOCX_UNPACKED_FLOOR = 32 * 1024 * 1024


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


def load_file(path: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> LoadedText:
    """Load the file at ``path``; see :func:`load_bytes` for the contract.

    The type and the size (from ``stat()``) are checked before anything is
    read, so an oversized file is refused without being loaded. A file that
    cannot be read (missing, a directory, no permission) is refused as
    ``UNREADABLE``.
    """
    path = Path(path)
    name = path.name
    _format_for(name)
    try:
        _check_size(path.stat().st_size, name, max_bytes)
        with path.open("rb") as handle:
            # Read one byte more than allowed: a file that grew since stat() is
            # still caught by the size check in load_bytes.
            data = handle.read(max_bytes + 1)
    except OSError as exc:
        raise DocumentRejected(RejectReason.UNREADABLE, name, _unreadable_detail(exc)) from exc
    return load_bytes(data, name, max_bytes)


def _unreadable_detail(error: OSError) -> str:
    if isinstance(error, FileNotFoundError):
        return "there is no such file"
    if isinstance(error, IsADirectoryError):
        return "it is a folder, not a file"
    if isinstance(error, PermissionError):
        return "permission to read it was denied"
    return f"it could not be read ({error.strerror or error})"


def load_bytes(data: bytes, filename: str, max_bytes: int = DEFAULT_MAX_BYTES) -> LoadedText:
    """Extract the text of a file given as ``data`` named ``filename``.

    The type is chosen by the lower-cased suffix of ``filename``. Returns a
    :class:`LoadedText` whose text is non-empty; raises
    :class:`DocumentRejected` (and nothing else) when the file cannot be used:
    unsupported type, empty, over ``max_bytes``, binary, corrupt, encrypted or
    without any text.
    """
    fmt = _format_for(filename)
    _check_size(len(data), filename, max_bytes)
    if not data.strip():
        detail = "the file is empty (0 bytes)" if not data else "the file contains only blank space"
        raise DocumentRejected(RejectReason.EMPTY, filename, detail)
    if fmt == "pdf":
        loaded = _load_pdf(data, filename, max_bytes)
    elif fmt == "docx":
        loaded = _load_docx(data, filename, max_bytes)
    elif fmt == "html":
        loaded = _load_html(data, filename)
    else:
        loaded = _load_plain(data, filename, fmt)
    logger.debug("loaded %s as %s: %d chars", filename, fmt, len(loaded.text))
    return loaded


# --------------------------------------------------------------------------
# Shared checks and helpers
# --------------------------------------------------------------------------


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
    return " ".join(_CONTROL_RE.sub(" ", raw).split())


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
    lines = [line.rstrip() for line in text.split("\n")]
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(lines))
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


def _load_plain(data: bytes, filename: str, fmt: str) -> LoadedText:
    """Load a .txt or .md file; Markdown is kept as written (it reads as text)."""
    text = _normalise_text(_decode_text(data, filename))
    if not text.strip():
        raise DocumentRejected(RejectReason.EMPTY, filename, "the file contains only blank space")
    title = (_markdown_title(text) if fmt == "md" else "") or _default_title(filename)
    return LoadedText(title=title, text=text, format=fmt)


_MD_FENCE_RE = re.compile(r"^ {0,3}(```|~~~)")
_MD_H1_RE = re.compile(r"^ {0,3}#[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")


def _markdown_title(text: str) -> str:
    """The text of the first level-1 ATX heading (``# Title``), outside code fences."""
    in_fence = False
    for line in text.split("\n"):
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
    controls = len(_CONTROL_RE.findall(text))
    return controls > _MAX_CONTROL_SHARE * max(len(text), 1)


# --------------------------------------------------------------------------
# HTML
# --------------------------------------------------------------------------

# Content of these elements is never visible text.
_HTML_SKIP = frozenset(
    {"script", "style", "noscript", "template", "head", "svg", "iframe", "object"}
)
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


class _HTMLTextParser(HTMLParser):
    """Collects the visible text and the first ``<title>`` of an HTML page.

    Whitespace is collapsed like a browser does, except inside ``<pre>``;
    block elements become line or paragraph breaks; table cells of a row are
    joined with `` | ``. Entities are unescaped by ``convert_charrefs``.
    """

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.title = ""
        self._out: list[str] = []
        self._pending_breaks = 0
        self._skip_depth: dict[str, int] = {}
        self._in_title = False
        self._title_done = False
        self._pre_depth = 0
        self._cells_in_row = 0

    # -- output ------------------------------------------------------------

    def text(self) -> str:
        """The collected text (not yet normalised)."""
        return "".join(self._out)

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
            self._out.append(chunk)

    # -- parser callbacks --------------------------------------------------

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "body":
            # Pages often omit </head>; the body must not stay hidden then.
            self._skip_depth.pop("head", None)
        if tag == "title" and not self._title_done and not self._skipping(ignore_head=True):
            self._in_title = True
        elif tag in _HTML_SKIP:
            self._skip_depth[tag] = self._skip_depth.get(tag, 0) + 1
        elif tag in _HTML_CELL:
            if self._cells_in_row and not self._skipping():
                self._emit(" | ")
            self._cells_in_row += 1
        else:
            self._block(tag)
            if tag == "pre":
                self._pre_depth += 1

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        # <br/>, <hr/>: a break, never an open element.
        self._block(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag == "title" and self._in_title:
            self._in_title = False
            self._title_done = True
        elif tag in _HTML_SKIP:
            if self._skip_depth.get(tag, 0) > 0:
                self._skip_depth[tag] -= 1
        else:
            self._block(tag)
            if tag == "pre" and self._pre_depth:
                self._pre_depth -= 1

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
        elif not self._skipping():
            self._emit(data)

    # -- helpers -----------------------------------------------------------

    def _skipping(self, ignore_head: bool = False) -> bool:
        return any(
            depth > 0
            for tag, depth in self._skip_depth.items()
            if not (ignore_head and tag == "head")
        )

    def _block(self, tag: str) -> None:
        if tag == "tr":
            self._cells_in_row = 0
        if tag in _HTML_PARAGRAPH:
            self._break(2)
        elif tag in _HTML_LINE:
            self._break(1)


def _load_html(data: bytes, filename: str) -> LoadedText:
    """Load an HTML page: visible text only, title from ``<title>``."""
    match = _HTML_CHARSET_RE.search(data[:4096])
    declared = match.group(1).decode("ascii", "replace") if match else None
    source = _decode_text(data, filename, declared)
    if not source.strip():
        raise DocumentRejected(RejectReason.EMPTY, filename, "the file contains only blank space")
    parser = _HTMLTextParser()
    try:
        parser.feed(source)
        parser.close()
    except Exception as exc:  # html.parser is lenient, but never let it escape
        logger.warning("html parse of %s failed: %r", filename, exc)
        raise DocumentRejected(
            RejectReason.CORRUPT, filename, "the page could not be read as HTML"
        ) from exc
    text = _require_text(
        parser.text(),
        filename,
        "the page has no visible text (only scripts, styles or markup); "
        "send a page with readable content or paste the text as a .txt file",
    )
    title = _clean_title(parser.title) or _default_title(filename)
    return LoadedText(title=title, text=text, format="html")


# --------------------------------------------------------------------------
# PDF
# --------------------------------------------------------------------------


def _load_pdf(data: bytes, filename: str, max_bytes: int) -> LoadedText:
    """Load a PDF's text layer with pypdf, pages joined by blank lines."""
    _check_pdf_envelope(data, filename)
    reader = _open_pdf(data, filename)
    pages = _extract_pdf_pages(reader, filename, max_bytes)
    text = _require_text(
        "\n\n".join(pages),
        filename,
        "the PDF has no text layer; it looks like a scanned document made of images. "
        "Run it through OCR (text recognition) first and send the result",
    )
    return LoadedText(title=_pdf_title(reader) or _default_title(filename), text=text, format="pdf")


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


def _pdf_opens_without_password(reader: PdfReader, filename: str) -> bool:
    """True when an encrypted PDF can be decrypted with the empty password."""
    try:
        return reader.decrypt("") != PasswordType.NOT_DECRYPTED
    except Exception as exc:  # unsupported algorithm, missing crypto library...
        logger.info("cannot decrypt %s with empty password: %r", filename, exc)
        return False


def _extract_pdf_pages(reader: PdfReader, filename: str, max_bytes: int) -> list[str]:
    """The text of each page, within the page, size and time limits.

    Past a limit, extraction stops and the text so far is kept (a warning is
    logged): a hostile file must not hang the bot or fill its memory.
    """
    budget_chars = _PDF_TEXT_FACTOR * max_bytes
    deadline = time.monotonic() + _PDF_TIME_BUDGET_S
    texts: list[str] = []
    total = 0
    page_no = 0
    try:
        for page_no, page in enumerate(reader.pages, start=1):
            if page_no > _PDF_MAX_PAGES or total > budget_chars or time.monotonic() > deadline:
                logger.warning("%s: stopped PDF extraction at page %d (limits)", filename, page_no)
                break
            text = page.extract_text() or ""
            texts.append(text)
            total += len(text)
    except DependencyError as exc:
        # Encryption pypdf cannot undo without an optional crypto library (AES).
        logger.info("cannot decrypt %s: %r", filename, exc)
        raise _pdf_encrypted(filename) from exc
    except Exception as exc:  # anything raised mid-extraction means a damaged file
        logger.info("pypdf failed on %s page %d: %r", filename, page_no, exc)
        where = f" (page {page_no})" if page_no else ""
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


def _load_docx(data: bytes, filename: str, max_bytes: int) -> LoadedText:
    """Load a .docx: paragraphs and table rows in document order."""
    _check_docx_envelope(data, filename, max_bytes)
    document = _open_docx(data, filename)
    try:
        blocks = _docx_blocks(document)
        title = _clean_title(document.core_properties.title)
    except Exception as exc:  # malformed XML surfaces lazily, during traversal
        logger.info("python-docx failed on %s: %r", filename, exc)
        raise _docx_corrupt(filename) from exc
    text = _require_text("\n\n".join(blocks), filename, "the Word document contains no text")
    return LoadedText(title=title or _default_title(filename), text=text, format="docx")


def _docx_corrupt(filename: str) -> DocumentRejected:
    return DocumentRejected(
        RejectReason.CORRUPT,
        filename,
        "the file is not a valid Word document (.docx) or is damaged; "
        "open it in Word and save it again as .docx",
    )


def _check_docx_envelope(data: bytes, filename: str, max_bytes: int) -> None:
    """Refuse encrypted, old-format, non-zip or zip-bomb .docx files."""
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
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            unpacked = sum(info.file_size for info in archive.infolist())
    except Exception as exc:  # BadZipFile, but also NotImplementedError, OSError...
        logger.info("%s is not a readable zip: %r", filename, exc)
        raise _docx_corrupt(filename) from exc
    limit = max(_DOCX_UNPACKED_FACTOR * max_bytes, _DOCX_UNPACKED_FLOOR)
    if unpacked > limit:
        raise DocumentRejected(
            RejectReason.TOO_LARGE,
            filename,
            f"the Word document unpacks to {_human_size(unpacked)}, over the limit of "
            f"{_human_size(limit)}",
        )


def _open_docx(data: bytes, filename: str) -> DocxDocument:
    """Open ``data`` with python-docx; any failure (missing parts, bad XML) is CORRUPT."""
    try:
        return docx.Document(io.BytesIO(data))
    except Exception as exc:  # KeyError, ValueError, lxml errors, PackageNotFoundError...
        logger.info("python-docx could not open %s: %r", filename, exc)
        raise _docx_corrupt(filename) from exc


def _docx_blocks(container: DocxDocument | _Cell) -> list[str]:
    """Non-blank paragraphs and tables of ``container`` in order, one string each."""
    blocks: list[str] = []
    for item in container.iter_inner_content():
        text = _docx_table_text(item) if isinstance(item, Table) else item.text
        if text.strip():
            blocks.append(text)
    return blocks


def _docx_table_text(table: Table) -> str:
    """A table as one line per row, cells joined by `` | ``.

    python-docx repeats a merged cell for every grid column it spans, so
    repeated cells are kept once. Nested tables are flattened into their cell.
    """
    rows: list[str] = []
    for row in table.rows:
        seen: set[object] = set()  # the cells' XML elements (hashable by identity)
        cells: list[str] = []
        for cell in row.cells:
            if cell._tc in seen:
                continue
            seen.add(cell._tc)
            cells.append(" ".join(" ".join(_docx_blocks(cell)).split()))
        if any(cells):
            rows.append(" | ".join(cells))
    return "\n".join(rows)
