"""PDF (.pdf): the text layer of every page, read by pypdf within bounds.

Contract: :func:`load_pdf` returns the pages' text joined by blank lines,
titled by the PDF's ``/Title`` or else the file name. A file without a PDF
header, or cut off before its ``%%EOF``, or that pypdf cannot read, is refused
as CORRUPT; one that needs a password as ENCRYPTED (an owner password alone is
fine); one without a text layer (a scan) as NO_TEXT. A hostile PDF can neither
run forever nor fill memory: pypdf's per-stream decompression limits are
lowered, decoded streams are dropped from pypdf's cache as extraction goes,
the page count is capped, and the time and text budgets are checked between
pages and inside each page. No pypdf exception escapes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import time
from typing import Any

from pypdf import (
    Configuration as PdfConfiguration,
    PasswordType,
    PdfReader,
    apply_configuration as apply_pdf_configuration,
)
from pypdf.errors import DependencyError, LimitReachedError
from pypdf.generic import EncodedStreamObject

from raptor_engine.errors import DocumentRejected, RejectReason
from raptor_engine.loaders.common import (
    Budget,
    LoadedText,
    Request,
    clean_title,
    default_title,
    logger,
    require_text,
    too_slow,
)

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


def load_pdf(data: bytes, request: Request) -> LoadedText:
    """Load a PDF's text layer with pypdf, pages joined by blank lines."""
    filename = request.filename
    _check_pdf_envelope(data, filename)
    with _pdf_limits():
        reader = _open_pdf(data, filename)
        pages = _extract_pdf_pages(reader, filename, request.budget)
        title = _pdf_title(reader)
    text = require_text(
        "\n\n".join(pages),
        filename,
        "the PDF has no text layer; it looks like a scanned document made of images. "
        "Run it through OCR (text recognition) first and send the result",
    )
    return LoadedText(title=title or default_title(filename), text=text, format="pdf")


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

    def __init__(self, reader: PdfReader, budget: Budget) -> None:
        self.page_no = 0
        self._reader = reader
        self._budget = budget
        self._dropped_at = time.monotonic()

    def before_operation(self, operator: bytes, operands: object, *_: object) -> None:
        if operator in _PDF_TEXT_OPERATORS and _pdf_operand_chars(operands) > _PDF_MAX_TEXT_OPERAND:
            raise _PdfStop(_pdf_too_complex(self._budget.filename, f"page {self.page_no} of the PDF"))
        now = time.monotonic()
        if now > self._budget.deadline:
            raise _PdfStop(too_slow(self._budget.filename))
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


def _extract_pdf_pages(reader: PdfReader, filename: str, budget: Budget) -> list[str]:
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
        return clean_title(metadata.title) if metadata is not None else ""
    except Exception:  # the title is optional; a damaged Info dict must not refuse the file
        return ""
