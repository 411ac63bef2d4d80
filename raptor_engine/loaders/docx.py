"""Word documents (.docx): paragraphs and table rows in document order.

Contract: :func:`load_docx` returns the main part's text (see
:class:`~raptor_engine.loaders.docx_body.DocxText`), blocks separated by blank
lines, titled by the core properties' ``dc:title`` or else the file name. A
password-protected document is refused as ENCRYPTED, an old binary .doc
renamed .docx as UNSUPPORTED_TYPE, anything that is not a readable Word zip
as CORRUPT, one without text as NO_TEXT. Every part read is capped (declared
and actual unpacked size, see :mod:`raptor_engine.loaders.docx_xml`), so a
small file built to unpack into gigabytes is refused early; no zipfile, zlib
or expat exception escapes.
"""

from __future__ import annotations

import io
import zipfile

from raptor_engine.errors import DocumentRejected, RejectReason
from raptor_engine.loaders.common import Budget, LoadedText, Request, clean_title, default_title, logger, require_text
from raptor_engine.loaders.docx_body import DocxText
from raptor_engine.loaders.docx_xml import XmlHandlers, docx_corrupt, docx_unpacks_too_far, has_member, parse_part

_RELATIONSHIPS_NAMESPACE = "http://schemas.openxmlformats.org/package/2006/relationships"
_DC_NAMESPACE = "http://purl.org/dc/elements/1.1/"
_DOCX_DEFAULT_MAIN_PART = "word/document.xml"

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


def load_docx(data: bytes, request: Request) -> LoadedText:
    """Load a .docx: paragraphs and table rows in document order.

    The main part is streamed through expat, never held as a tree; every part
    read is capped (declared and actual unpacked size) and the text and time
    budgets are checked as it goes.
    """
    filename, budget = request.filename, request.budget
    _check_docx_envelope(data, filename, request.accepted)
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            _check_unpacked_size(archive, filename, request.max_bytes)
            main_part, core_part = _docx_part_names(archive, filename, budget)
            part_limit = max(_DOCX_XML_PER_TEXT_CHAR * budget.max_text_chars, _DOCX_UNPACKED_FLOOR)
            collector = DocxText(budget)
            parse_part(archive, main_part, filename, part_limit, budget, collector.handlers())
            collector.finish()
            title = _docx_title(archive, core_part, filename, budget)
    except DocumentRejected:
        raise
    except Exception as exc:  # BadZipFile, zlib.error, ExpatError, KeyError, NotImplementedError...
        logger.info("%s is not a readable Word document: %r", filename, exc)
        raise docx_corrupt(filename) from exc
    text = require_text("\n\n".join(collector.blocks), filename, "the Word document contains no text")
    return LoadedText(title=title or default_title(filename), text=text, format="docx")


def _check_docx_envelope(data: bytes, filename: str, accepted: str) -> None:
    """Refuse encrypted and old-format (OLE) .docx files, which are not zips.

    ``accepted`` is the list of accepted types, named in the old-format refusal.
    """
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
            f"Word and save it as .docx. Accepted types are {accepted}",
        )


def _check_unpacked_size(archive: zipfile.ZipFile, filename: str, max_bytes: int) -> None:
    """Refuse an archive whose members declare more than the unpacked limit in all.

    A first, cheap check; what is actually read is counted again (see
    :func:`~raptor_engine.loaders.docx_xml.zip_chunks`), since a header can lie.
    """
    unpacked = sum(info.file_size for info in archive.infolist())
    limit = max(_DOCX_UNPACKED_FACTOR * max_bytes, _DOCX_UNPACKED_FLOOR)
    if unpacked > limit:
        raise docx_unpacks_too_far(filename, limit, unpacked)


def _docx_part_names(archive: zipfile.ZipFile, filename: str, budget: Budget) -> tuple[str, str | None]:
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

    if has_member(archive, "_rels/.rels"):
        parse_part(archive, "_rels/.rels", filename, _DOCX_SMALL_PART_BYTES, budget, XmlHandlers(relationship))
    return found.get("officeDocument") or _DOCX_DEFAULT_MAIN_PART, found.get("core-properties")


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


def _docx_title(archive: zipfile.ZipFile, core_part: str | None, filename: str, budget: Budget) -> str:
    """The core properties' ``dc:title``; empty when there is none or it cannot be read."""
    if not core_part or not has_member(archive, core_part):
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
        parse_part(archive, core_part, filename, _DOCX_SMALL_PART_BYTES, budget, XmlHandlers(start, end, data))
    except Exception as exc:  # the title is optional; damaged metadata must not refuse the file
        logger.info("%s: core properties unreadable: %r", filename, exc)
        return ""
    return clean_title("".join(pieces))
